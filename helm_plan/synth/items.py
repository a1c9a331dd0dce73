"""Item ids of a synthetic trace: Zipf ranks, popularity drift, burst hot sets and new items.

Nothing here is sized by the catalog: a rank is drawn by inverting the
continuous Zipf CDF and mapped to an id by arithmetic, so a 10^8-item catalog
costs what a 10^3-item one does. Memory is O(items drawn), in passes of
``CHUNK_ITEMS`` uniforms, plus the burst hot sets (``bursts × burst_hot_items``).

**Positions.** The catalog's ``items`` positions are split into *regular*
positions ``0 .. regular-1`` (the Zipf draws; position = popularity rank after
drift) and, when bursts bring new items, a tail of ``bursts × new_per_burst``
reserved positions: burst ``b`` owns ``regular + b·new_per_burst + j``. Regular
traffic never draws a reserved position (drift rotates ranks modulo
``regular``), so a burst's new items are unseen before that burst, by
construction. Positions map to ids by the seeded affine bijection
``(a·pos + b) mod items``, which scatters popularity over the id space.

**Per token** of a request at time ``t``: position = (Zipf rank + shift(t))
mod ``regular``, shift = the trend drift (up to ``drift_ranks`` over the trend
span) plus ``floor(t · drift_ranks_per_s)``. Inside burst ``b`` one uniform
``u`` decides: ``u < burst_hot_share``: an item of the burst's hot set
(uniform); ``u < burst_hot_share + burst_new_item_share``: a new item of the
burst's block (Zipf over the block, same skew); else the regular draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from helm_plan import regimes
from helm_plan.synth.config import SynthConfig

#: Uniforms drawn per pass over a segment's items (bounds the temporaries; the stream is
#: the same in one pass or many, so the ids do not depend on it).
CHUNK_ITEMS = 1 << 20


@dataclass(frozen=True)
class ItemModel:
    """Trace-wide item parameters (O(bursts × burst_hot_items), never O(items))."""

    hot_items: np.ndarray
    """Hot-item ids of each burst, shape (bursts, burst_hot_items), int64."""
    bijection: tuple[int, int]
    """(a, b) of the position to item-id map (a·pos + b) mod items."""
    regular: int
    """Positions drawn by regular traffic (items less the reserved new-item blocks)."""
    new_per_burst: int
    """Size of each burst's new-item block (0: bursts bring no new items)."""

    def new_item_ids(self, burst: int, items: int) -> np.ndarray:
        """Ids of burst ``burst``'s new-item block (``items``: the catalog size)."""
        pos = self.regular + burst * self.new_per_burst + np.arange(self.new_per_burst)
        return _to_ids(pos, self.bijection, items)


def zipf_ranks(u: np.ndarray, n_items: int, alpha: float) -> np.ndarray:
    """0-based Zipf ranks for uniforms ``u`` in [0, 1): P(k) ∝ ∫_{k-1/2}^{k+1/2} x^-alpha dx."""
    return _zipf_into(np.array(u, np.float64), n_items, alpha)


def _zipf_into(x: np.ndarray, n_items: int, alpha: float) -> np.ndarray:
    """:func:`zipf_ranks` that overwrites the float64 uniforms ``x`` (fewer temporaries)."""
    lo, hi = 0.5, n_items + 0.5
    e = 1.0 - alpha
    if abs(e) < 1e-9:
        x *= math.log(hi / lo)
        np.exp(x, out=x)
        x *= lo
    else:
        a, b = lo**e, hi**e
        x *= b - a
        x += a
        np.power(x, 1.0 / e, out=x)
    x += 0.5
    np.floor(x, out=x)
    r = x.astype(np.int64)
    np.clip(r, 1, n_items, out=r)
    r -= 1
    return r


def _subseed(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def _coprime(n: int, rng: np.random.Generator) -> int:
    if n <= 2:
        return 1
    while True:
        a = int(rng.integers(n // 3 + 1, n))
        if math.gcd(a, n) == 1:
            return a


def _to_ids(pos: np.ndarray, bij: tuple[int, int], items: int) -> np.ndarray:
    """Ids of positions, in place when ``pos`` is int64 (a·pos < 2^62: items <= 2e9)."""
    pos = np.asarray(pos, np.int64)
    pos *= bij[0]
    pos += bij[1]
    pos %= items
    return pos


def item_model(cfg: SynthConfig, shp: regimes.RegimeShape) -> ItemModel:
    """Burst hot sets, the bijection and the reserved new-item blocks of ``cfg``."""
    rng = _subseed(cfg.seed, 2)
    reserved = cfg.reserved_items if shp.bursts else 0
    regular = cfg.items - reserved
    n_hot = min(cfg.burst_hot_items, regular)
    # Hot sets are uniform samples of the regular items. Without reserved positions every
    # position is regular and the sample is taken as ids directly (the original draw order,
    # so traces without new items are unchanged); with them it is taken as positions and
    # mapped, which keeps hot items out of the new-item blocks.
    draws = [rng.choice(regular, size=n_hot, replace=False).astype(np.int64) for _ in shp.bursts]
    hot = np.stack(draws) if draws else np.zeros((0, n_hot), np.int64)
    bij = (_coprime(cfg.items, rng), int(rng.integers(0, cfg.items)))
    if reserved:
        hot = _to_ids(hot, bij, cfg.items)
    return ItemModel(hot, bij, regular, cfg.new_items_per_burst if reserved else 0)


def burst_of(shp: regimes.RegimeShape, ts: np.ndarray) -> np.ndarray:
    """Index of the burst each (sorted) time falls in, -1 outside bursts (later bursts win)."""
    out = np.full(len(ts), -1, np.int32)
    for b, (a, e) in enumerate(shp.bursts):
        lo, hi = np.searchsorted(ts, [a, e], side="left")
        out[lo:hi] = b
    return out


def _shift(cfg: SynthConfig, shp: regimes.RegimeShape, ts: np.ndarray) -> np.ndarray:
    """Popularity-rotation offset (ranks) of each request: trend drift plus steady churn."""
    out = np.zeros(len(ts), np.int64)
    if shp.trend_span is not None and cfg.drift_ranks != 0:
        a, e = shp.trend_span
        frac = np.clip((ts - a) / max(e - a, 1e-12), 0.0, 1.0)
        out += np.floor(frac * cfg.drift_ranks).astype(np.int64)
    if cfg.drift_ranks_per_s > 0:
        out += np.floor(ts * cfg.drift_ranks_per_s).astype(np.int64)
    return out


def segment_items(
    cfg: SynthConfig,
    im: ItemModel,
    shp: regimes.RegimeShape,
    ts: np.ndarray,
    off: np.ndarray,
    seg: int,
) -> np.ndarray:
    """Item ids of one segment's requests (sorted times ``ts``, item offsets ``off``)."""
    total = int(off[-1])
    rng = _subseed(cfg.seed, 3, seg)
    out = np.empty(total, np.int64)
    shift = _shift(cfg, shp, ts)
    drift = bool(shift.any())
    for lo in range(0, total, CHUNK_ITEMS):
        hi = min(total, lo + CHUNK_ITEMS)
        pos = _zipf_into(rng.random(hi - lo), im.regular, cfg.zipf_alpha)
        if drift:
            pos += shift[_request_of(off, lo, hi)]
            pos %= im.regular
        out[lo:hi] = _to_ids(pos, im.bijection, cfg.items)
    if len(im.hot_items):
        _burst_items(cfg, im, shp, ts, off, seg, rng, out)
    return out


def _request_of(off: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Request index of tokens ``lo .. hi-1`` (``off``: item offsets per request)."""
    return np.searchsorted(off, np.arange(lo, hi), side="right") - 1


def _burst_items(
    cfg: SynthConfig,
    im: ItemModel,
    shp: regimes.RegimeShape,
    ts: np.ndarray,
    off: np.ndarray,
    seg: int,
    rng: np.random.Generator,
    out: np.ndarray,
) -> None:
    """Replace items of burst requests by hot-set and new items, in place."""
    bid_req = burst_of(shp, ts)
    total = len(out)
    hot = np.zeros(total, bool)
    new = np.zeros(total, bool) if im.new_per_burst else None
    # One uniform per token of the segment (burst or not), drawn in passes: the same
    # stream as one draw, so the hot choices match whatever CHUNK_ITEMS is.
    for lo in range(0, total, CHUNK_ITEMS):
        hi = min(total, lo + CHUNK_ITEMS)
        u = rng.random(hi - lo)
        inside = bid_req[_request_of(off, lo, hi)] >= 0
        np.logical_and(u < cfg.burst_hot_share, inside, out=hot[lo:hi])
        if new is not None:
            top = cfg.burst_hot_share + cfg.burst_new_item_share
            new[lo:hi] = inside & (u >= cfg.burst_hot_share) & (u < top)
    idx = np.flatnonzero(hot)
    pick = rng.integers(0, im.hot_items.shape[1], size=len(idx))
    out[idx] = im.hot_items[bid_req[np.searchsorted(off, idx, side="right") - 1], pick]
    if new is not None:
        idx = np.flatnonzero(new)
        # Own stream: adding new items leaves the regular and hot draws as they were.
        j = zipf_ranks(
            _subseed(cfg.seed, 6, seg).random(len(idx)), im.new_per_burst, cfg.zipf_alpha
        )
        b = bid_req[np.searchsorted(off, idx, side="right") - 1].astype(np.int64)
        out[idx] = _to_ids(im.regular + b * im.new_per_burst + j, im.bijection, cfg.items)
