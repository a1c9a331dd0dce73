"""A brute-force cluster written from DESIGN.md and the router descriptions alone.

Pure Python, one request at a time, no helm_plan simulation code: N brute-force
nodes (tests/brute.py: OrderedDict caches, refill, the batch formula term by
term), a batching queue per node advanced event by event, and every router
re-implemented from its documented rule. The router's counters are recomputed
from scratch at every arrival (a request is outstanding on its node until its
batch's finish time has passed), so nothing depends on how the compiled
kernel keeps them. Slow on purpose; tiny traces only. Needs explicit
candidates.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from brute import BruteNode, BruteNodeConfig, batch_time

M64 = (1 << 64) - 1
G1, G2, G3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
BLOCK = 16  # Dynamo's KV block size


def mix64(z: int) -> int:
    z &= M64
    z = ((z ^ (z >> 30)) * G2) & M64
    z = ((z ^ (z >> 27)) * G3) & M64
    return z ^ (z >> 31)


def key64(seed: int, a: int, b: int) -> int:
    return mix64(seed * G1 + a * G2 + b + G3)


def pick(seed: int, i: int, k: int, n: int) -> int:
    return ((key64(seed, i, k) >> 32) * n) >> 32


def est_s(c: dict, n: int, reused: int, L: int, M: int, look: int, miss: float) -> float:
    """The router's estimate: the batch time of this request alone."""
    return batch_time(c, [(n, reused, L, M, look, miss)], [1.0])


@dataclass
class Req:
    i: int
    t: float
    node: int
    out: tuple = ()
    share: float = 1.0
    est_ns: int = 0
    batched: bool = False
    finish: float = math.inf
    start: float = math.inf
    service: float = 0.0
    size: int = 0


@dataclass
class ClusterOut:
    node: list[int] = field(default_factory=list)
    sojourn: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)
    outcomes: list[tuple] = field(default_factory=list)
    h2d_bytes: list[list[int]] = field(default_factory=list)  # per node, per window


def simulate_cluster(table, model, pool, coeffs, cfg: BruteNodeConfig, n_nodes, router, ratios,
                     seed, eps=0.25, vnodes=64, weight=1.0, s_h=8, s_c=8):  # fmt: skip
    """Serve ``table`` on ``n_nodes`` brute-force nodes; ``ratios[w][n]`` per window and node."""
    ts = table.column("ts_s").to_pylist()
    users = table.column("user_id").to_pylist()
    new = table.column("new_items").to_pylist()
    cands = table.column("candidates").to_pylist()
    ws = cfg.window_s
    n_w = int(math.floor(ts[-1] / ws)) + 1
    nodes = [BruteNode(model, pool, coeffs, cfg, ratios[0][n]) for n in range(n_nodes)]
    history: dict[int, list[int]] = {}  # a user's history is the user's, wherever it is served
    for nd in nodes:
        nd.caches.hist = history
    queues: list[list[Req]] = [[] for _ in range(n_nodes)]
    routed: list[list[Req]] = [[] for _ in range(n_nodes)]
    reqs: list[Req] = []
    ring = sorted(
        (key64(seed, n, v), n * vnodes + v, n) for n in range(n_nodes) for v in range(vnodes)
    )
    ring_h = [x[0] for x in ring]
    rr = 0
    out = ClusterOut(h2d_bytes=[[] for _ in range(n_nodes)])
    S, C = model.max_seq_len, model.kv_slide_chunk
    tok_b = model.token_lookup_bytes
    cand_b = model.candidate_lookup_bytes

    def form(n: int, now: float, flush: bool) -> None:
        """Form node n's batches that close before ``now`` (all of them when flushing)."""
        q, free = queues[n], nodes[n].free
        while q:
            k = min(range(len(free)), key=lambda s: (free[s], s))
            close = q[0].t
            if cfg.batching == "static" and cfg.batch_max > 1:
                close = q[0].t + cfg.batch_timeout_s
                if len(q) >= cfg.batch_max:
                    close = min(close, q[cfg.batch_max - 1].t)
            close = max(close, free[k])
            if not flush and close >= now:
                return
            b = [r for r in q[: cfg.batch_max] if r.t <= close]
            t_b = batch_time(coeffs, [r.out for r in b], [r.share for r in b])
            for r in b:
                r.batched, r.start, r.finish, r.service, r.size = (
                    True,
                    close,
                    close + t_b,
                    t_b,
                    len(b),
                )
            free[k] = close + t_b
            del q[: len(b)]

    def loads(now: float):
        """(count, est ns, Dynamo prefill tokens, Dynamo blocks) outstanding per node at ``now``."""
        res = []
        for n in range(n_nodes):
            out_ = [r for r in routed[n] if not r.batched or r.finish > now]
            isl = [r.out[2] + r.out[3] for r in out_]
            res.append((
                len(out_), sum(r.est_ns for r in out_),
                sum(x - (r.out[1] // BLOCK) * BLOCK for x, r in zip(isl, out_, strict=True)),
                sum((x + BLOCK - 1) // BLOCK for x in isl),
            ))  # fmt: skip
        return res

    def cached(n: int, u: int, s0: int) -> int:
        kv = nodes[n].caches.kv
        return kv[u][1] if u in kv and kv[u][0] == s0 else 0

    i = 0
    for w in range(n_w):
        tb = w * ws
        for n, nd in enumerate(nodes):
            blk = nd.boundary(w, ratios[w][n])
            if blk > 0:
                nd.free[:] = [max([tb, *nd.free]) + blk] * len(nd.free)
        first = i
        while i < len(ts) and ts[i] < tb + ws:
            t, u = ts[i], users[i]
            for n in range(n_nodes):
                form(n, t, False)
            ld = loads(t)
            H = len(history.get(u, [])) + len(new[i])
            s0 = 0 if H <= S else -(-(H - S) // C) * C
            L, M = H - s0, len(cands[i])
            miss_est = 0.0
            if router == "round-robin":
                n = rr % n_nodes
                rr += 1
            elif router == "random":
                n = pick(seed, i, 0, n_nodes)
            elif router == "jsq":
                order = [(i + j) % n_nodes for j in range(n_nodes)]
                n = min(order, key=lambda m: (ld[m][1], ld[m][0], order.index(m)))
            elif router == "p2c":
                a = pick(seed, i, 0, n_nodes)
                b = pick(seed, i, 1, n_nodes - 1)
                b = b + 1 if b >= a else b
                n = a if ld[a][1] <= ld[b][1] else b
            elif router == "affinity":
                total = sum(x[0] for x in ld)
                cap = math.ceil((1.0 + eps) * (total + 1) / n_nodes)
                pos = bisect.bisect_left(ring_h, key64(seed, u & M64, 0xA5))
                n = next(ring[(pos + j) % len(ring)][2] for j in range(len(ring))
                         if ld[ring[(pos + j) % len(ring)][2]][0] + 1 <= cap)  # fmt: skip
            elif router == "kv-overlap":
                isl = L + M
                logit = [weight * ((ld[m][2] + isl - (cached(m, u, s0) // BLOCK) * BLOCK) / BLOCK)
                         + (ld[m][3] + -(-isl // BLOCK)) for m in range(n_nodes)]  # fmt: skip
                tied = [m for m in range(n_nodes) if logit[m] == min(logit)]
                n = tied[pick(seed, i, 7, len(tied))]
            elif router == "helm":
                full = history.get(u, []) + list(new[i])
                keys_h = [(t_, x) for x in reversed(full[-min(s_h, L):]) if L > 0
                          for t_ in range(len(model.tables)) if model.tables[t_].per_history_token]  # fmt: skip
                keys_c = [(t_, x) for x in cands[i][:s_c]
                          for t_ in range(len(model.tables)) if model.tables[t_].per_candidate]  # fmt: skip
                best = None
                for j in range(n_nodes):
                    m = (i + j) % n_nodes
                    c = nodes[m].caches

                    def frac(ks, c=c):
                        tot = sum(model.tables[t_].row_bytes for t_, _ in ks)
                        res = sum(
                            model.tables[t_].row_bytes for t_, x in ks if c.key(t_, x) in c.emb
                        )
                        return res / tot if tot > 0 else 1.0

                    ncomp = L - cached(m, u, s0)
                    miss = float(ncomp * tok_b) * (1.0 - frac(keys_h)) + float(M * cand_b) * (
                        1.0 - frac(keys_c)
                    )
                    cost = ld[m][1] * 1e-9 / cfg.slots + est_s(
                        coeffs, ncomp, 0, L, M, ncomp * tok_b + M * cand_b, miss
                    )
                    if best is None or (cost, ld[m][0]) < best[:2]:
                        best = (cost, ld[m][0], m, miss)
                n, miss_est = best[2], best[3]
            else:
                raise ValueError(router)
            o, sh = nodes[n].request(t, u, new[i], cands[i])
            r = Req(i, t, n, o, sh)
            r.est_ns = int(est_s(coeffs, o[0], o[1], o[2], o[3], o[4], miss_est) * 1e9 + 0.5)
            queues[n].append(r)
            routed[n].append(r)
            reqs.append(r)
            i += 1
        for n in range(n_nodes):
            form(n, math.inf, True)
            win = [r for r in reqs[first:i] if r.node == n]
            out.h2d_bytes[n].append(sum(r.out[5] for r in win) + nodes[n].landed_in(w, n_w))
    out.node = [r.node for r in reqs]
    out.sojourn = [r.finish - r.t for r in reqs]
    out.service = [r.service for r in reqs]
    out.outcomes = [r.out for r in reqs]
    return out
