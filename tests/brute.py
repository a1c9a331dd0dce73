"""A brute-force node written from DESIGN.md alone: the independent reference of the simulators.

Pure Python over raw ids, one request at a time, no helm_plan simulation code:
OrderedDict LRUs (EMB keys are ``(table, raw row)`` tuples, capacity in
bytes; KV per user with the chunked context start), the batch service-time
formula written out term by term, a batching FIFO over ``slots`` streams,
and the three refill modes with decayed hotness. It is slow on purpose and
only for tiny traces.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field

M64 = (1 << 64) - 1


def splitmix(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def salt(name: str) -> int:
    """A hashed table's salt: the first 8 bytes of sha256(name), little-endian."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def table_row(tab, item: int) -> int:
    """Row of ``item`` in table ``tab``: the item id, or salted SplitMix64 mod rows."""
    if tab.key == "identity":
        return item
    return splitmix((item & M64) ^ salt(tab.name)) % tab.rows


def draw_candidate(
    seed: int, i: int, k: int, stream: list[int], tok_off: list[int], window: int
) -> int:
    """Implicit candidate k of request i, from DESIGN.md: tokens up to the request only."""
    hi = tok_off[i + 1]
    span = min(hi, window)
    z = (seed * 0x9E3779B97F4A7C15 + i * 0xBF58476D1CE4E5B9 + k + 0x94D049BB133111EB) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    pick = ((z >> 32) * span) >> 32  # the top 32 bits scaled to the span
    return -1 if span == 0 else stream[hi - 1 - pick]


class BruteCaches:
    """EMB and KV caches of one node (DESIGN.md, Node model)."""

    def __init__(self, model, emb_bytes: int, kv_tokens: int):
        self.m = model
        self.emb_cap, self.kv_cap = emb_bytes, kv_tokens
        self.emb: OrderedDict[tuple[int, int], int] = OrderedDict()  # LRU first: key -> bytes
        self.kv: OrderedDict[int, tuple[int, int]] = OrderedDict()  # user -> (s0, L)
        self.hist: dict[int, list[int]] = {}

    def key(self, t: int, item: int) -> tuple[int, int]:
        return (t, table_row(self.m.tables[t], item))

    def used(self) -> int:
        return sum(self.emb.values())

    def resize(self, emb_bytes: int, kv_tokens: int) -> None:
        self.emb_cap, self.kv_cap = emb_bytes, kv_tokens
        while self.used() > emb_bytes:
            self.emb.popitem(last=False)
        while sum(v[1] for v in self.kv.values()) > kv_tokens:
            self.kv.popitem(last=False)

    def insert_if_free(self, k: tuple[int, int]) -> bool:
        b = self.m.tables[k[0]].row_bytes
        if k not in self.emb and self.used() + b <= self.emb_cap:
            self.emb[k] = b
            return True
        return False

    def request(self, u: int, new: list[int], cands: list[int], counts: dict | None):
        """(n computed, reused, L, M, lookup bytes, miss bytes, misses) of one request."""
        h = self.hist.setdefault(u, [])
        h.extend(new)
        H, S, C = len(h), self.m.max_seq_len, self.m.kv_slide_chunk
        s0 = 0 if H <= S else -(-(H - S) // C) * C
        L = H - s0
        c = 0
        if u in self.kv:
            c = self.kv[u][1] if self.kv[u][0] == s0 else 0
            del self.kv[u]
        if (H < S or s0 + S - H > 0) and 0 < L <= self.kv_cap:
            while sum(v[1] for v in self.kv.values()) + L > self.kv_cap:
                self.kv.popitem(last=False)
            self.kv[u] = (s0, L)
        n = L - c
        look = miss_b = miss = 0
        for it, is_hist in [(x, True) for x in h[H - n :]] + [(x, False) for x in cands]:
            for t, tab in enumerate(self.m.tables):
                if not (tab.per_history_token if is_hist else tab.per_candidate):
                    continue
                k, b = self.key(t, it), tab.row_bytes
                look += b
                if counts is not None:
                    counts[k] = counts.get(k, 0.0) + 1.0
                if k in self.emb:
                    self.emb.move_to_end(k)
                    continue
                miss += 1
                miss_b += b
                if b <= self.emb_cap:
                    while self.used() + b > self.emb_cap:
                        self.emb.popitem(last=False)
                    self.emb[k] = b
        return n, c, L, len(cands), look, miss_b, miss


C = {
    "t_launch_s": 2e-4, "t_request_s": 3e-5, "weight_read_s": 4e-4, "dense_s_per_token": 2e-7,
    "mfu_half_tokens": 64.0, "attn_s_per_pair": 3e-10, "hbm_bw_Bps": 2e12, "h2d_bw_Bps": 2e9,
    "h2d_latency_s": 1e-5, "host_gather_Bps": 5e9,
}  # fmt: skip
"""Coefficients with every term non-zero, for tests."""


def coeff_latency(c: dict | None = None):
    """The latency model of coefficients ``c`` (default :data:`C`)."""
    from helm_plan.latency.model import LatencyModel

    return LatencyModel(**(C if c is None else c))


def batch_time(c: dict, reqs: list[tuple], shares: list[float]) -> float:
    """DESIGN.md's batch service time, term by term (``reqs``: outcomes of ``request``)."""
    X = sum(r[0] + r[3] for r in reqs)
    P = sum(r[0] * r[2] - r[0] * (r[0] - 1) / 2 + r[3] * r[2] for r in reqs)
    look = sum(r[4] for r in reqs)
    miss = sum(r[5] for r in reqs)
    compute = max(c["weight_read_s"], c["dense_s_per_token"] * (X + c["mfu_half_tokens"])
                  + c["attn_s_per_pair"] * P)  # fmt: skip
    link = sum(r[5] / (c["h2d_bw_Bps"] * s) for r, s in zip(reqs, shares, strict=True))
    return (c["t_launch_s"] + len(reqs) * c["t_request_s"] + compute + look / c["hbm_bw_Bps"]
            + (c["h2d_latency_s"] if miss > 0 else 0.0) + link + miss / c["host_gather_Bps"])  # fmt: skip


@dataclass
class BruteNodeConfig:
    window_s: float
    slots: int = 1
    batch_max: int = 1
    batch_timeout_s: float = 0.0
    batching: str = "static"
    refill: str = "lazy"
    phi: float = 0.3


@dataclass
class BruteResult:
    sojourn: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)
    outcomes: list[tuple] = field(default_factory=list)
    h2d_bytes: list[int] = field(default_factory=list)
    prefetch_bytes: list[int] = field(default_factory=list)
    blocked: list[float] = field(default_factory=list)


class BruteNode:
    """One node's caches, refill and stream free times, stepped window by window."""

    def __init__(
        self, model, pool_bytes: int, coeffs: dict, cfg: BruteNodeConfig, r0: float, w0: int = 0
    ):
        self.m, self.pool, self.c, self.cfg, self.w0 = model, pool_bytes, coeffs, cfg, w0
        self.kv_bpt = 2 * model.layers * model.d_model * model.kv_dtype_bytes
        self.caches = BruteCaches(model, *self.caps(r0))
        self.counts: dict | None = {} if cfg.refill != "lazy" else None
        self.free = [0.0] * cfg.slots
        self.pend: list[tuple[float, tuple]] = []  # (ready, key) of the copy in flight, in order
        self.landed: list[tuple[float, int]] = []  # (ready, bytes) of copied keys
        self.share_iv = None
        self.ratio = r0

    def caps(self, r):
        return int(math.floor(r * self.pool)), int(math.floor((1 - r) * self.pool / self.kv_bpt))

    def boundary(self, w: int, r: float) -> float:
        """Window ``w``'s boundary at EMB share ``r``; returns the eager block, s."""
        cfg, model, coeffs, caches = self.cfg, self.m, self.c, self.caches
        tb = w * cfg.window_s
        block = 0.0
        if w == self.w0:  # the node starts here, cold at r
            return block
        if self.counts is not None:
            for k in self.counts:
                self.counts[k] *= 0.5
        if r != self.ratio:
            self.pend = [p for p in self.pend if p[0] <= tb]
            self.landed = [x for x in self.landed if x[0] <= tb]
            if self.share_iv and self.share_iv[1] > tb:
                self.share_iv = (self.share_iv[0], tb, self.share_iv[2])
            old = caches.emb_cap
            caches.resize(*self.caps(r))
            room = caches.emb_cap - caches.used()
            if cfg.refill != "lazy" and caches.emb_cap > old and room > 0:
                hot = sorted(
                    (-v, k) for k, v in self.counts.items() if v > 0 and k not in caches.emb
                )
                keys, total = [], 0
                for _, k in hot:
                    b = model.tables[k[0]].row_bytes
                    if total + b > room:
                        break
                    keys.append(k)
                    total += b
                if keys:
                    h2d_lat, bw, host = (
                        coeffs["h2d_latency_s"],
                        coeffs["h2d_bw_Bps"],
                        coeffs["host_gather_Bps"],
                    )
                    if cfg.refill == "eager":
                        block = h2d_lat + total / bw + total / host
                        ready = [tb] * len(keys)
                        self.share_iv = None
                    else:
                        per = 1 / (cfg.phi * bw) + 1 / host
                        acc, ready = 0, []
                        for k in keys:
                            acc += model.tables[k[0]].row_bytes
                            ready.append(tb + h2d_lat + acc * per)
                        self.share_iv = (tb, ready[-1], 1 - cfg.phi)
                    self.pend += list(zip(ready, keys, strict=True))
                    self.landed += [
                        (t, model.tables[k[0]].row_bytes) for t, k in zip(ready, keys, strict=True)
                    ]
        self.ratio = r
        return block

    def request(self, t: float, user: int, new: list[int], cands: list[int]):
        """Serve one request's caches at ``t``: (outcome tuple, H2D share it sees)."""
        while self.pend and self.pend[0][0] <= t:
            self.caches.insert_if_free(self.pend.pop(0)[1])
        out = self.caches.request(user, new, cands, self.counts)
        iv = self.share_iv
        return out, (iv[2] if iv and iv[0] <= t < iv[1] else 1.0)

    def landed_in(self, w: int, n_w: int) -> int:
        """Bytes of copied keys landing in window ``w`` (dropped from the list)."""
        ws = self.cfg.window_s

        def due(x):
            return x[0] < n_w * ws and min(int(x[0] // ws), n_w - 1) <= w

        pf = sum(b for t, b in self.landed if due((t, b)))
        self.landed = [x for x in self.landed if not due(x) and x[0] < n_w * ws]
        return pf


def simulate(
    table, model, pool_bytes: int, coeffs: dict, cfg: BruteNodeConfig, ratios, first: int = 0
) -> BruteResult:
    """Serve ``table`` (with explicit candidates) window by window at ``ratios``.

    Rows before ``first`` only build the users' histories (a node that starts
    cold at row ``first``); windows then count from ``ts[first]``'s window, and
    ``ratios`` is indexed by absolute window.
    """
    ts_all = table.column("ts_s").to_pylist()
    users_all = table.column("user_id").to_pylist()
    new_all = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()[first:]
    ws = cfg.window_s
    n_w = int(math.floor(ts_all[-1] / ws)) + 1
    w0 = int(math.floor(ts_all[first] / ws))
    node = BruteNode(model, pool_bytes, coeffs, cfg, ratios[w0], w0)
    for u, items in zip(users_all[:first], new_all[:first], strict=True):
        node.caches.hist.setdefault(u, []).extend(items)
    ts, users, new = ts_all[first:], users_all[first:], new_all[first:]
    out = BruteResult()
    i = 0
    for w in range(w0, n_w):
        tb = w * ws
        block = node.boundary(w, ratios[w])
        # the window's requests: replay in arrival order, then the batching queue
        lo = i
        while i < len(ts) and ts[i] < tb + ws:
            i += 1
        reqs, shares = [], []
        for q in range(lo, i):
            o, s = node.request(ts[q], users[q], new[q], cands[q])
            reqs.append(o)
            shares.append(s)
        out.outcomes += reqs
        blocks = [(tb, block)] if block > 0 else []
        soj, svc = _queue(ts[lo:i], reqs, shares, coeffs, cfg, node.free, blocks)
        out.sojourn += soj
        out.service += svc
        pf = node.landed_in(w, n_w)
        out.prefetch_bytes.append(pf)
        out.h2d_bytes.append(sum(r[5] for r in reqs) + pf)
        out.blocked.append(block)
    return out


def _queue(arr, reqs, shares, c, cfg, free, blocks):
    """The batching FIFO of one window, carrying the streams' free times in ``free``."""
    soj, svc = [0.0] * len(arr), [0.0] * len(arr)
    i = 0
    while i < len(arr) or blocks:
        if blocks and (i >= len(arr) or blocks[0][0] <= arr[i]):
            t = max([blocks[0][0], *free]) + blocks[0][1]
            free[:] = [t] * len(free)
            blocks.pop(0)
            continue
        k = min(range(len(free)), key=lambda s: (free[s], s))
        close = arr[i]
        if cfg.batching == "static" and cfg.batch_max > 1:
            close = arr[i] + cfg.batch_timeout_s
            if i + cfg.batch_max - 1 < len(arr):
                close = min(close, arr[i + cfg.batch_max - 1])
        close = max(close, free[k])
        j = i + 1
        while j < len(arr) and j - i < cfg.batch_max and arr[j] <= close:
            j += 1
        t_b = batch_time(c, reqs[i:j], shares[i:j])
        for q in range(i, j):
            soj[q] = close + t_b - arr[q]
            svc[q] = t_b
        free[k] = close + t_b
        i = j
    return soj, svc
