"""The controller's decision as compiled code (numba, no torch): the runtime's µs budget.

A decision runs once per window, after a whole window of simulation (or serving) has gone
through the CPU's caches. Timed in such a run, every numpy call on a small array pays its
dispatch through cold code paths and every line of Python its cold bytecode and attribute
lookups: the numpy-and-Python decision took ~14 µs in a tight loop and 70-80 µs in a run.
Here it is one compiled call with three arguments (the observation, the window's curve and
the controller's one preallocated float64 array, :func:`layout`) that allocates nothing:

- :func:`curve_update`, :func:`curve_fill`, :func:`curve_optimum`: the smoothed measured
  curve and what is read from it (:class:`~helm_plan.controller.features.CurveState` calls
  them, so the env, the threshold rule, the guard and the runtime share one piece of code);
- :func:`forward`: the actor's MLP (tanh hidden layers; the layers packed by :func:`pack`
  into one contiguous array, each W stored transposed) and the argmax of its logits;
- :func:`detect`, :func:`propose`: layers 1-3 (:class:`~helm_plan.controller.runtime.Controller`
  keeps its state in a float64 array, the slots below);
- :func:`guard_reset`, :func:`guard_step`: layer 4 (:class:`~helm_plan.controller.guard.Guard`,
  its state likewise);
- :func:`step`: the whole decision, what ``Controller.step`` times.

Same float64 arithmetic, operation by operation, as the Python and numpy code it replaced
(numba compiles without fastmath: no reassociation, no fused multiply-add; ``max``/``min`` as
Python's). The one change of order is the MLP's dot products: each sums its inputs left to
right and adds the bias last, where numpy's BLAS may group the sum otherwise; the logits
agree to 1e-12 and the chosen actions and ratios are identical
(tests/controller/test_kernel.py).
"""

from __future__ import annotations

import math
from typing import Any

import numba as nb
import numpy as np

# feature indices, as literals: numba freezes a global into the compiled code and its cache
# only notices edits to this file, so indices imported from features.py could go stale in a
# cached step; features.py imports this module and checks them against its names instead
BURST_INDEX, COLD_INDEX, RATIO_INDEX, NET_UP_INDEX, NET_DOWN_INDEX = 4, 6, 12, 13, 14
CURVE_INDEX = 15
OPT_INDEX = CURVE_INDEX

# Controller state slots (runtime.Controller's attributes of the same names)
BASE, CORRECTION, RATIO, IN_BURST, STABLE_RATIO = 0, 1, 2, 3, 4
M0, M1, V0, V1, CUSUM, CALM, BURST_LEN, RECOVER_LEFT, BURSTS = 5, 6, 7, 8, 9, 10, 11, 12, 13
CURVE_SEEN = 14  # the smoothed curve has a window in it (CurveState.seen)
N_STATE = 15

# Controller config slots (RuntimeConfig's fields, bools as 0/1, plus the curve's settings)
HOLD_MARGIN, ADAPTER, ADAPTER_CAP, ADAPTER_LR, ADAPTER_DECAY, BURST = 0, 1, 2, 3, 4, 5
EWMA_ALPHA, Z_ENTER, CUSUM_K, CUSUM_H, Z_EXIT, CALM_WINDOWS = 6, 7, 8, 9, 10, 11
MAX_BURST_WINDOWS, BURST_MAX_SHIFT, RECOVERY_WINDOWS, MIN_SD, GUARD = 12, 13, 14, 15, 16
GUARD_RESETS, CURVE_KEEP, CURVE_TOL, HOLD_ACTION = 17, 18, 19, 20
# where each part of the controller's one array (:func:`layout`) starts, and its length
OFF_ST, OFF_G, OFF_CURVE, OFF_LONG, N_CURVE = 21, 22, 23, 24, 25
OFF_SHIFTS, N_SHIFTS, OFF_DIMS, N_DIMS, OFF_BUF, N_BUF, OFF_W = 26, 27, 28, 29, 30, 31, 32
TOUCHED = 33  # scratch: the sum step() reads to pull the array into cache (never used)
OFF_WORST = 34  # the guard's worst curve (its length is N_CURVE)
OFF_RUN = 35  # the guard's current losing run per ratio (its length is N_CURVE)
OFF_SHORTEST = 36  # the guard's shortest ended losing run per ratio (N_CURVE)
N_CONFIG = 37

# Guard state and settings slots (guard.Guard's attributes of the same names)
G_ANCHOR, G_FIXED, G_EVIDENCE, G_FALLBACK, G_HOLD, G_REARM, G_SEEN = 0, 1, 2, 3, 4, 5, 6
G_DECISIONS, G_OVERRIDES, G_FALLBACK_WINDOWS = 7, 8, 9
G_ENTER, G_EXIT, G_ALPHA, G_HOLD_WINDOWS, G_REARM_WINDOWS, G_TOL = 10, 11, 12, 13, 14, 15
G_RISK, G_WORST_AT, G_WORST_N, G_RISK_CAP, G_REGIME = 16, 17, 18, 19, 20
N_GUARD = 21

_jit = nb.njit(cache=True, nogil=True)


class Slot:
    """An attribute kept in slot ``index`` of the float64 array ``obj.<array>`` (read back as
    ``kind``: float, int or bool), so the compiled step and the Python API share one state."""

    def __init__(self, array: str, index: int, kind: type = float) -> None:
        self.array, self.index, self.kind = array, index, kind

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return self.kind(getattr(obj, self.array)[self.index])

    def __set__(self, obj: Any, value: Any) -> None:
        getattr(obj, self.array)[self.index] = value


@nb.njit(cache=True, nogil=True, inline="always")
def _max(a: float, b: float) -> float:
    """Python's ``max(a, b)``."""
    return b if b > a else a


@nb.njit(cache=True, nogil=True, inline="always")
def _min(a: float, b: float) -> float:
    """Python's ``min(a, b)``."""
    return b if b < a else a


@nb.njit(cache=True, nogil=True, inline="always")
def _clip01(v: float) -> float:
    """``min(max(v, 0.0), 1.0)``."""
    return _min(_max(v, 0.0), 1.0)


@nb.njit(cache=True, nogil=True, inline="always")
def grid_k(r: float, n: int) -> int:
    """features._k: the grid point nearest ``r`` on an ``n``-point grid of [0, 1]."""
    return 0 if r <= 0.0 else n - 1 if r >= 1.0 else int(r * (n - 1) + 0.5)


@nb.njit(cache=True, nogil=True, inline="always")
def _argmax(a: np.ndarray) -> int:
    """numpy's argmax (the first maximum; the first NaN when there is one)."""
    k = 0
    best = a[0]
    if best != best:
        return 0
    for i in range(1, a.shape[0]):
        v = a[i]
        if v != v:
            return i
        if v > best:
            best, k = v, i
    return k


@nb.njit(cache=True, nogil=True, inline="always")
def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` as a plain loop (numba's slice assignment is general and ~10x the
    code: a cold decision pays for every cache line of code it runs)."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@_jit
def curve_update(c: np.ndarray, share: np.ndarray, keep: float) -> None:
    """``c <- (c − share)·keep + share`` in place: ``(1 − a)·c + a·share`` with ``keep = 1 − a``
    (numpy's ``c -= share; c *= keep; c += share``, element by element)."""
    for i in range(c.shape[0]):
        s = share[i]
        c[i] = (c[i] - s) * keep + s


@_jit
def curve_optimum(c: np.ndarray, seen: bool, tol: float, r: float) -> float:
    """``CurveState.optimum``: the curve's best ratio, or ``r`` when it is within ``tol``."""
    if not seen:
        return r
    n = c.shape[0]
    k = _argmax(c)
    if c[grid_k(r, n)] >= c[k] - tol:
        return r
    return k / (n - 1)


@_jit
def curve_fill(c: np.ndarray, seen: bool, tol: float, x: np.ndarray) -> None:
    """``CurveState.fill``: the curve features of observation ``x``, in place."""
    n = c.shape[0]
    r = x[RATIO_INDEX]
    k = _argmax(c)
    best = c[k]
    here = c[grid_k(r, n)]
    opt = r if (not seen or here >= best - tol) else k / (n - 1)
    g = 10.0 * (best - here) if opt != r else 0.0
    lo = c[0]
    for i in range(1, n):  # numpy's min (a NaN wins)
        v = c[i]
        if v != v:
            lo = v
            break
        if v < lo:
            lo = v
    span = 10.0 * (best - lo) if seen else 0.0
    x[CURVE_INDEX] = opt
    x[CURVE_INDEX + 1] = opt - r
    x[CURVE_INDEX + 2] = g if g < 3.0 else 3.0
    x[CURVE_INDEX + 3] = span if span < 3.0 else 3.0


def pack(Ws: list[np.ndarray], bs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The layers as one contiguous float64 array (each layer's W transposed, in × out, then
    its b) and their widths ``[inputs, units of layer 0, ...]`` (as float64)."""
    parts = [np.concatenate([np.ravel(np.asarray(W, np.float64).T), b])
             for W, b in zip(Ws, bs, strict=True)]  # fmt: skip
    w = np.ascontiguousarray(np.concatenate(parts), np.float64)
    dims = np.array([Ws[0].shape[1], *[W.shape[0] for W in Ws]], np.float64)
    return w, dims


def layout(
    n_curve: int, shifts: np.ndarray, Ws: list[np.ndarray], bs: list[np.ndarray]
) -> np.ndarray:
    """The controller's one float64 array: settings (with the offsets below), state, guard
    state, smoothed curve, the guard's mean and worst curves and losing runs, shifts, layer
    widths, the layers' outputs, the layers (:func:`pack`). One array so that a decision passes
    three arguments (the observation, the window's curve, this), the fewest a cold call can
    unpack."""
    w, dims = pack(Ws, bs)
    n_buf = int(dims[1:].sum())
    sizes = [N_CONFIG, N_STATE, N_GUARD, n_curve, n_curve, n_curve, n_curve, n_curve,
             len(shifts), len(dims), n_buf, len(w)]  # fmt: skip
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    mem = np.zeros(int(off[-1]))
    mem[OFF_ST], mem[OFF_G], mem[OFF_CURVE], mem[OFF_LONG] = off[1], off[2], off[3], off[4]
    mem[OFF_WORST], mem[OFF_RUN], mem[OFF_SHORTEST] = off[5], off[6], off[7]
    mem[N_CURVE] = n_curve
    mem[OFF_SHIFTS], mem[N_SHIFTS] = off[8], len(shifts)
    mem[OFF_DIMS], mem[N_DIMS] = off[9], len(dims)
    mem[OFF_BUF], mem[N_BUF], mem[OFF_W] = off[10], n_buf, off[11]
    mem[off[8] : off[9]] = shifts
    mem[off[9] : off[10]] = dims
    mem[off[11] :] = w
    return mem


def part(mem: np.ndarray, off: int, n: int) -> np.ndarray:
    """The view of ``mem`` whose offset and length sit in settings slots ``off`` and ``n``
    (``n`` < 0: a fixed length ``-n``)."""
    o = int(mem[off])
    return mem[o : o + (int(mem[n]) if n >= 0 else -n)]


@_jit
def forward(w: np.ndarray, dims: np.ndarray, x: np.ndarray, buf: np.ndarray, hold: int):
    """The actor on ``x``: (argmax of the logits, its logit minus the hold action's). Each unit
    sums ``W[i, j]·h[j]`` for j left to right, then adds ``b[i]``; hidden layers are tanh.
    ``buf`` holds every layer's output (the logits last)."""
    if x.shape[0] != int(dims[0]):
        raise ValueError("the observation's length is not the actor's number of inputs")
    off = 0  # into w
    src = 0  # where this layer's input starts in buf (layer 0 reads x)
    dst = 0
    n_layers = dims.shape[0] - 1
    for layer in range(n_layers):
        n_in, n_out = int(dims[layer]), int(dims[layer + 1])
        for i in range(n_out):
            buf[dst + i] = 0.0
        for j in range(n_in):  # outer over inputs: the units' sums run side by side (SIMD)
            h = x[j] if layer == 0 else buf[src + j]
            row = off + j * n_out
            for i in range(n_out):
                buf[dst + i] += w[row + i] * h
        bias = off + n_in * n_out
        for i in range(n_out):
            v = buf[dst + i] + w[bias + i]
            buf[dst + i] = math.tanh(v) if layer < n_layers - 1 else v
        off = bias + n_out
        src = dst
        dst += n_out
    k = _argmax(buf[src : src + int(dims[n_layers])])
    return k, buf[src + k] - buf[src + hold]


@_jit
def detect(st: np.ndarray, cf: np.ndarray, x: np.ndarray) -> bool:
    """Layer 3's detector (``Controller._detect``): update the EWMA band and the CUSUM in
    ``st``; whether a burst is on."""
    v0, v1 = x[BURST_INDEX], x[COLD_INDEX]  # log burst score, cold share
    if st[M0] != st[M0]:  # first window: the band starts here
        st[M0], st[M1] = v0, v1
        return False
    z0 = (v0 - st[M0]) / _max(math.sqrt(st[V0]), cf[MIN_SD])
    z1 = (v1 - st[M1]) / _max(math.sqrt(st[V1]), cf[MIN_SD])
    z = z0 if z0 > z1 else z1
    st[CUSUM] = _max(0.0, st[CUSUM] + z - cf[CUSUM_K])
    if st[IN_BURST] == 0.0:
        if z > cf[Z_ENTER] or st[CUSUM] > cf[CUSUM_H]:
            st[IN_BURST] = 1.0
            st[BURSTS] += 1.0
            st[CALM] = st[BURST_LEN] = 0.0
        else:  # the band learns only outside bursts: a burst must not become the baseline
            a = cf[EWMA_ALPHA]
            d0, d1 = v0 - st[M0], v1 - st[M1]
            st[M0] += a * d0
            st[M1] += a * d1
            st[V0] = (1 - a) * (st[V0] + a * d0 * d0)
            st[V1] = (1 - a) * (st[V1] + a * d1 * d1)
    else:
        st[BURST_LEN] += 1.0
        st[CALM] = st[CALM] + 1.0 if z < cf[Z_EXIT] else 0.0
        if st[CALM] >= cf[CALM_WINDOWS]:
            st[IN_BURST] = 0.0
            st[CUSUM] = 0.0
            st[RECOVER_LEFT] = cf[RECOVERY_WINDOWS]
        elif st[BURST_LEN] >= cf[MAX_BURST_WINDOWS]:  # a new level, not a burst
            st[IN_BURST] = 0.0
            st[CUSUM], st[V0], st[V1] = 0.0, 0.0, 0.0
            st[M0], st[M1] = v0, v1
            st[STABLE_RATIO] = st[RATIO]
    return st[IN_BURST] != 0.0


@_jit
def shift_of(
    st: np.ndarray, cf: np.ndarray, x: np.ndarray, shifts: np.ndarray, k: int, margin: float
) -> float:
    """Action ``k`` (its logit beats holding by ``margin``) as a shift of the base ratio (the
    NaN shift: to the curve's optimum)."""
    if cf[HOLD_MARGIN] > 0.0 and margin <= cf[HOLD_MARGIN]:
        return 0.0
    d = shifts[k]
    return x[OPT_INDEX] - st[BASE] if d != d else d


@_jit
def propose(
    st: np.ndarray, cf: np.ndarray, x: np.ndarray, shifts: np.ndarray, k: int, margin: float
) -> float:
    """Layers 1-3 (``Controller._propose``): the ratio to serve without the guard."""
    was_burst = st[IN_BURST] != 0.0
    burst = detect(st, cf, x) if cf[BURST] != 0.0 else False
    shift = shift_of(st, cf, x, shifts, k, margin)
    if burst:
        if not was_burst:
            st[STABLE_RATIO] = st[RATIO]
        shift = _min(_max(shift, -cf[BURST_MAX_SHIFT]), cf[BURST_MAX_SHIFT])
        st[BASE] = _clip01(st[BASE] + shift)
        st[RATIO] = _clip01(st[RATIO] + shift)
        return st[RATIO]
    if st[RECOVER_LEFT] > 0.0:
        # back to the last stable ratio in equal steps; the base policy resumes from there
        st[RATIO] += (st[STABLE_RATIO] - st[RATIO]) / st[RECOVER_LEFT]
        st[RECOVER_LEFT] -= 1.0
        st[BASE], st[CORRECTION] = st[RATIO], 0.0
        return st[RATIO]
    st[BASE] = _clip01(st[BASE] + shift)
    if cf[ADAPTER] != 0.0:
        g = math.tanh(x[NET_UP_INDEX] - x[NET_DOWN_INDEX])
        c = (1.0 - cf[ADAPTER_DECAY]) * st[CORRECTION] + cf[ADAPTER_LR] * g
        st[CORRECTION] = _min(_max(c, -cf[ADAPTER_CAP]), cf[ADAPTER_CAP])
    st[RATIO] = _clip01(st[BASE] + st[CORRECTION])
    st[STABLE_RATIO] = st[RATIO]
    return st[RATIO]


@_jit
def guard_reset(gs: np.ndarray, long: np.ndarray, start: float) -> None:
    """``Guard.reset``: no evidence, no worst curve or losing runs, the online anchor back at
    ``start``."""
    gs[G_ANCHOR] = gs[G_FIXED] if gs[G_FIXED] == gs[G_FIXED] else start
    gs[G_EVIDENCE] = gs[G_FALLBACK] = gs[G_HOLD] = gs[G_REARM] = gs[G_SEEN] = 0.0
    gs[G_WORST_N] = 0.0
    gs[G_DECISIONS] = gs[G_OVERRIDES] = gs[G_FALLBACK_WINDOWS] = 0.0
    for i in range(long.shape[0]):
        long[i] = 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def _risky(gs: np.ndarray, worst: np.ndarray, run: np.ndarray, shortest: np.ndarray,
           k: int) -> bool:  # fmt: skip
    """Whether grid ratio ``k`` is a risky move (guard.py's docstring): it lost more than the
    margin on a window since the anchor was set, and more than the cap, or it is losing now,
    or a run of windows in which it lost ended sooner than ``regime_windows``."""
    if gs[G_WORST_N] == 0.0 or not worst[k] < -gs[G_RISK]:  # NaN: no loss seen
        return False
    return worst[k] < -gs[G_RISK_CAP] or run[k] > 0.0 or shortest[k] < gs[G_REGIME]


@_jit
def guard_step(
    gs: np.ndarray,
    long: np.ndarray,
    worst: np.ndarray,
    run: np.ndarray,
    shortest: np.ndarray,
    proposal: float,
    served: float,
    gain: np.ndarray,
    has_gain: bool,
    curve: np.ndarray,
) -> float:
    """``Guard.step`` (guard.py's docstring): ``proposal`` or the anchor. ``curve`` is the
    smoothed curve (the prediction), ``long`` the mean curve of the online anchor, ``worst``
    each ratio's worst log P99 ratio against the anchor over the windows measured since the
    anchor was set (the risk), ``run`` each ratio's current run of windows losing more than the
    risk margin, ``shortest`` its shortest ended run (inf: none ended)."""
    n = curve.shape[0]
    if has_gain and gs[G_FIXED] != gs[G_FIXED]:  # the online anchor: the mean curve's best
        gs[G_SEEN] += 1.0
        if gs[G_SEEN] == 1.0:
            _copy(long, gain)
        else:
            curve_update(long, gain, 1.0 - 1.0 / gs[G_SEEN])
        gs[G_ANCHOR] = curve_optimum(long, True, gs[G_TOL], gs[G_ANCHOR])
    a = gs[G_ANCHOR]
    ka = grid_k(a, n)
    gs[G_DECISIONS] += 1.0
    if has_gain:
        # realised against the anchor's counterfactual on the same window: > 0 when the
        # anchor would have been faster (0 when the anchor was served)
        loss = gain[ka] - gain[grid_k(served, n)] if abs(served - a) > 1e-9 else 0.0
        gs[G_EVIDENCE] += gs[G_ALPHA] * (loss - gs[G_EVIDENCE])
        # gain[i] - gain[ka] = log(P99 at the anchor / P99 at i) on this window, whatever was
        # served; its minimum over the windows since the anchor was set (an online anchor
        # that moves starts it again)
        fresh = gs[G_WORST_N] == 0.0 or gs[G_WORST_AT] != a
        for i in range(n):
            d = gain[i] - gain[ka]
            if fresh:
                worst[i], run[i], shortest[i] = d, 0.0, math.inf
            else:
                worst[i] = _min(worst[i], d)
            # a run of windows in which ratio i loses more than the margin: how long the
            # regime that i cannot serve lasted, each time it ended
            if d < -gs[G_RISK]:
                run[i] += 1.0
            elif run[i] > 0.0:
                shortest[i] = _min(shortest[i], run[i])
                run[i] = 0.0
        if fresh:
            gs[G_WORST_AT], gs[G_WORST_N] = a, 1.0
        else:
            gs[G_WORST_N] += 1.0
    kp = grid_k(proposal, n)
    backed = curve[kp] - curve[ka] > gs[G_ENTER]  # the smoothed curve's prediction
    if gs[G_FALLBACK] == 0.0 and gs[G_EVIDENCE] > gs[G_EXIT]:
        gs[G_FALLBACK] = 1.0
        gs[G_HOLD], gs[G_REARM] = gs[G_HOLD_WINDOWS], 0.0
    if gs[G_FALLBACK] != 0.0:
        gs[G_REARM] = gs[G_REARM] + 1.0 if backed else 0.0
        if gs[G_HOLD] > 0.0 or gs[G_REARM] < gs[G_REARM_WINDOWS]:
            gs[G_HOLD] -= 1.0
            gs[G_FALLBACK_WINDOWS] += 1.0
            if abs(proposal - a) > 1e-9:
                gs[G_OVERRIDES] += 1.0
            return a
        gs[G_FALLBACK], gs[G_EVIDENCE] = 0.0, 0.0
    # a ratio that lost more than the cap on a window seen before is never served; one that
    # lost more than the margin only while it is not losing now and every run of windows in
    # which it lost lasted at least regime_windows (regimes that long pay for the move)
    if abs(proposal - a) <= 1e-9 or (backed and not _risky(gs, worst, run, shortest, kp)):
        return proposal
    gs[G_OVERRIDES] += 1.0
    if not backed:  # the curve does not back the move: none of it is served
        return a
    # backed but risky: the grid ratio nearest the proposal, on the way to the anchor, that
    # passes both tests (the safe part of the move); the anchor when none does
    step = 1 if ka > kp else -1
    for k in range(kp + step, ka, step):
        if curve[k] - curve[ka] > gs[G_ENTER] and not _risky(gs, worst, run, shortest, k):
            return k / (n - 1)
    return a


@_jit
def step(x: np.ndarray, gain: np.ndarray, mem: np.ndarray) -> float:
    """One decision (``Controller.step``): observation ``x`` and the window's measured curve
    ``gain`` (empty: not measured) in, the ratio to serve out; every layer's state updated in
    place in ``mem`` (:func:`layout`)."""
    # the array arrives cold (a window of serving ran since the last decision): read one word
    # of each cache line first, independent loads the CPU overlaps, instead of missing line
    # by line inside the dependent arithmetic below
    t = 0.0
    for i in range(0, mem.shape[0], 8):
        t += mem[i]
    mem[TOUCHED] = t
    cf = mem[:N_CONFIG]
    o = int(cf[OFF_ST])
    st = mem[o : o + N_STATE]
    o = int(cf[OFF_G])
    gs = mem[o : o + N_GUARD]
    n = int(cf[N_CURVE])
    o = int(cf[OFF_CURVE])
    curve = mem[o : o + n]
    o = int(cf[OFF_LONG])
    long = mem[o : o + n]
    o = int(cf[OFF_WORST])
    worst = mem[o : o + n]
    o = int(cf[OFF_RUN])
    run = mem[o : o + n]
    o = int(cf[OFF_SHORTEST])
    shortest = mem[o : o + n]
    o = int(cf[OFF_SHIFTS])
    shifts = mem[o : o + int(cf[N_SHIFTS])]
    o = int(cf[OFF_DIMS])
    dims = mem[o : o + int(cf[N_DIMS])]
    o = int(cf[OFF_BUF])
    buf = mem[o : o + int(cf[N_BUF])]
    w = mem[int(cf[OFF_W]) :]
    has_gain = gain.shape[0] > 0
    if has_gain and gain.shape[0] != n:
        raise ValueError("the measured curve's length is not the curve grid's")
    if x.shape[0] <= CURVE_INDEX + 3:
        raise ValueError("the observation is shorter than the feature vector")

    r_now = x[RATIO_INDEX]  # the ratio the node ran at
    if st[RATIO] != st[RATIO]:  # first decision: start from where the node is
        st[RATIO] = st[BASE] = st[STABLE_RATIO] = r_now
        if cf[GUARD_RESETS] != 0.0:
            guard_reset(gs, long, r_now)
    # layer 0: the measured curve, smoothed, and its features written into x
    if has_gain:
        if st[CURVE_SEEN] != 0.0:
            curve_update(curve, gain, cf[CURVE_KEEP])
        else:
            _copy(curve, gain)
            st[CURVE_SEEN] = 1.0
    curve_fill(curve, st[CURVE_SEEN] != 0.0, cf[CURVE_TOL], x)
    # layer 1's forward pass, then layers 1-3
    k, margin = forward(w, dims, x, buf, int(cf[HOLD_ACTION]))
    out = propose(st, cf, x, shifts, k, margin)
    if cf[GUARD] != 0.0:
        out = guard_step(gs, long, worst, run, shortest, out, r_now, gain, has_gain, curve)
        if out != st[RATIO]:  # overridden: the layers resume from what is served
            st[BASE], st[CORRECTION] = out, 0.0
    st[RATIO] = out
    return out
