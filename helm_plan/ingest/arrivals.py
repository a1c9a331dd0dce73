"""Real arrival traces as rate series, and seeded arrival draws from them.

Every source becomes a piecewise-constant rate series with a per-window
inter-arrival CV:

- Azure LLM CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``) and Mooncake
  JSONL (``timestamp`` in ms): arrivals binned into 1 s windows (CV 1 inside a bin);
- ServeGen (``window_start_s, rate_rps, cv, dist, p1, p2``, no header): its
  windows, rates and CVs. A folder of per-client files is their superposition:
  rates add, and the CV is the rate-weighted root mean square (the index of
  dispersion of a superposition). ``dist``, ``p1`` and ``p2`` are not used.

Scaling to a target rate multiplies the rate (the time axis and burst lengths
stay real). Arrivals are gamma gaps of the window's CV in operational time
(the integral of the rate), mapped back to real time; the series is repeated
when more arrivals are needed than it holds. The draw is conditioned on its
count: exactly the requested arrivals fall in the span used (the gaps are
normalised to it), so the written trace covers that span and its mean rate is
the one asked for -- an unconditioned draw that runs short would put its last
arrivals after the next idle gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from helm_plan.errors import IngestError, InputFileError
from helm_plan.ingest.readers import check_readable, head_line, read_lines, split_fields, to_float

_CV_MIN, _CV_MAX = 0.05, 30.0


@dataclass(frozen=True)
class RateSeries:
    """A piecewise-constant arrival rate."""

    edges_s: np.ndarray
    """Window edges, seconds from the start (len = windows + 1)."""
    rate_rps: np.ndarray
    """Mean rate in each window, requests per second."""
    cv: np.ndarray
    """Inter-arrival coefficient of variation in each window (1 = Poisson)."""
    source: str
    """What the series was read from."""

    @property
    def duration_s(self) -> float:
        return float(self.edges_s[-1] - self.edges_s[0])

    @property
    def mean_rps(self) -> float:
        return float(np.sum(self.rate_rps * np.diff(self.edges_s)) / self.duration_s)


def from_times(times_s: np.ndarray, source: str, bin_s: float = 1.0) -> RateSeries:
    """Bin arrival times into a rate series of ``bin_s`` windows."""
    t = np.sort(np.asarray(times_s, np.float64))
    t = t - t[0]
    n_bins = max(int(np.floor(t[-1] / bin_s)) + 1, 1)
    counts = np.bincount(np.minimum((t / bin_s).astype(np.int64), n_bins - 1), minlength=n_bins)
    edges = np.arange(n_bins + 1, dtype=np.float64) * bin_s
    return RateSeries(edges, counts / bin_s, np.ones(n_bins), source)


def load(path: str | Path) -> RateSeries:
    """Read an arrival trace, detecting Azure CSV, ServeGen file or folder, or Mooncake JSONL."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.csv"))
        if not files:
            raise InputFileError(f"{p} holds no .csv files", hint="pass a ServeGen trace folder")
        return _servegen(files, str(p))
    check_readable(p)
    _, head = head_line(p)
    if head.lstrip().startswith("{"):
        from helm_plan.ingest.mooncake import read_records

        ms = read_records(p)["timestamp"].cast(pl.Float64).to_numpy()
        return _checked(from_times(ms / 1000.0, f"mooncake:{p}"), p)
    if head.split(",")[0].strip().upper() == "TIMESTAMP":
        return _azure(p)
    if len(head.split(",")) == 6:
        return _servegen([p], str(p))
    raise IngestError(
        f"{p} line 1: not a known arrival trace: {head[:60]!r}",
        hint="use an Azure LLM CSV (TIMESTAMP,...), a ServeGen rate CSV or folder, or a Mooncake JSONL",
    )


def _azure(p: Path) -> RateSeries:
    try:
        df = pl.read_csv(p, infer_schema=False, encoding="utf8-lossy")
    except pl.exceptions.PolarsError as e:
        raise IngestError(
            f"{p}: cannot parse the Azure CSV: {str(e).splitlines()[0]}",
            hint="check that every line has as many fields as the header",
        ) from e
    col = df.columns[0]
    if df.height == 0:
        raise IngestError(
            f"{p} has a header but no arrivals",
            hint="pass an arrival trace with at least two arrivals at different times",
        )
    ts = df[col].str.strip_chars().str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False)
    if ts.null_count():
        i = int(ts.is_null().arg_true()[0])
        raise IngestError(
            f"{p} line {i + 2}: unparseable TIMESTAMP {df[col][i]!r}",
            hint="Azure traces use 'YYYY-MM-DD HH:MM:SS.fffffff'",
        )
    secs = (ts - ts.min()).dt.total_microseconds().to_numpy() / 1e6
    return _checked(from_times(secs, f"azure:{p}"), p)


def _servegen(files: list[Path], source: str) -> RateSeries:
    names = ["start", "rate", "cv", "dist", "p1", "p2"]
    starts = None
    num = None
    wsum = None
    for f in files:
        check_readable(f)
        df = split_fields(read_lines(f), ",", names, path=f, variant="ServeGen rate series")
        start = to_float(df, "start", path=f, what="window start")
        rate = to_float(df, "rate", path=f, what="rate")
        cv = to_float(df, "cv", path=f, what="cv")
        if starts is None:
            starts, num, wsum = start, np.zeros(len(start)), np.zeros(len(start))
        elif len(start) != len(starts) or not np.array_equal(start, starts):
            raise IngestError(
                f"{f}: windows differ from {files[0].name}",
                hint="a ServeGen folder must hold series over the same windows",
            )
        if (rate < 0).any():
            i = int(np.argmax(rate < 0))
            raise IngestError(
                f"{f} line {df['lineno'][i]}: negative rate {rate[i]}",
                hint="rates are requests per second >= 0; fix the line",
            )
        num += rate * cv**2
        wsum += rate
    assert starts is not None and num is not None and wsum is not None
    if len(starts) > 1 and np.any(np.diff(starts) <= 0):
        raise IngestError(
            f"{files[0]}: window starts are not increasing", hint="sort the file by window start"
        )
    width = float(np.median(np.diff(starts))) if len(starts) > 1 else 600.0
    edges = np.append(starts, starts[-1] + width) - starts[0]
    cv = np.sqrt(np.divide(num, wsum, out=np.ones_like(num), where=wsum > 0))
    return _checked(
        RateSeries(edges, wsum, cv, f"servegen:{source} ({len(files)} files)"), files[0]
    )


def _checked(s: RateSeries, p: Path) -> RateSeries:
    if not (s.duration_s > 0 and s.mean_rps > 0):
        raise IngestError(
            f"{p}: the arrival trace has no arrivals over a positive span",
            hint="pass a trace with at least two arrivals at different times",
        )
    return s


def draw(
    s: RateSeries,
    n: int,
    *,
    seed: int,
    qps: float | None = None,
    duration_s: float | None = None,
) -> tuple[np.ndarray, float]:
    """Up to ``n`` sorted arrival times following ``s`` scaled, and the scale factor used.

    With ``qps`` the written times have mean rate ``qps`` over a span ``T``
    (``n / qps``, or ``duration_s`` when that is shorter: then only
    ``qps * duration_s`` arrivals come back). The series is read from the first
    busy window after which ``T`` also ends in a busy window, and the rate of
    that part ``[o, o + T]`` is scaled to ``qps``. With only ``duration_s`` it
    is scaled so ``n`` arrivals fill it; with neither the native rate is kept.
    """
    if n == 0:
        return np.zeros(0), 1.0
    offset = 0.0
    if qps is not None:
        span = n / qps if duration_s is None else min(duration_s, n / qps)
        m = n if span == n / qps else min(n, int(round(qps * span)))
        offset = float(s.edges_s[_start_window(s, span)] - s.edges_s[0])
        used = _native_mass(s, offset + span) - _native_mass(s, offset)
        scale = qps * span / _positive(s, used, offset + span)
    elif duration_s is not None:
        span, m = duration_s, n
        scale = n / _positive(s, _native_mass(s, duration_s), duration_s)
    else:
        span, m, scale = _native_time(s, n), n, 1.0
    if m == 0:
        return np.zeros(0), scale
    rng = np.random.default_rng(seed)
    lo = _native_mass(s, offset)
    total = _native_mass(s, offset + span) - lo  # native mass the m arrivals share
    # Gap i takes the CV of the window where it is expected to fall.
    expect = lo + (np.arange(m + 1) + 0.5) * total / (m + 1)
    win = _window_at(s, expect)
    k = 1.0 / np.clip(s.cv[win % len(s.cv)], _CV_MIN, _CV_MAX) ** 2
    g = rng.gamma(k, 1.0 / k)
    # stationary start: the first gap is a uniform share of a length-biased gap
    g[0] = rng.gamma(k[0] + 1.0, 1.0 / k[0]) * rng.random()
    pos = lo + total * np.cumsum(g)[:m] / g.sum()
    return _time_at(s, pos) - offset, scale


def _edges(s: RateSeries, mass: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cumulative native mass, time) at window edges, and widths, repeated past ``mass``."""
    width = np.diff(s.edges_s)
    per_rep = float(np.sum(s.rate_rps * width))
    reps = max(int(np.ceil(mass / per_rep)) + 1, 1)
    cum = np.concatenate([[0.0], np.cumsum(np.tile(s.rate_rps * width, reps))])
    t = np.concatenate([[0.0], np.cumsum(np.tile(width, reps))])
    return cum, t, np.tile(width, reps)


def _window_at(s: RateSeries, mass: np.ndarray) -> np.ndarray:
    """Index (in the repeated series) of the busy window holding each native mass position."""
    cum, _, _ = _edges(s, float(np.max(mass)))
    return np.searchsorted(cum, mass, side="right") - 1


def _time_at(s: RateSeries, mass: np.ndarray) -> np.ndarray:
    """Time at which the native cumulative mass reaches ``mass`` (idle windows skipped)."""
    cum, t, width = _edges(s, float(np.max(mass)))
    w = np.searchsorted(cum, mass, side="right") - 1
    return t[w] + (mass - cum[w]) / (cum[w + 1] - cum[w]) * width[w]


def _native_time(s: RateSeries, n: int) -> float:
    """Time at which the unscaled (repeated) series has delivered ``n`` expected arrivals."""
    return float(_time_at(s, np.array([float(n)]))[0])


def _start_window(s: RateSeries, span_s: float) -> int:
    """First window with arrivals whose start plus ``span_s`` also falls in one (0 if none)."""
    starts = s.edges_s[:-1] - s.edges_s[0]
    busy = s.rate_rps > 0
    end = (starts + span_s) % s.duration_s
    end_win = np.clip(np.searchsorted(starts, end, side="right") - 1, 0, len(starts) - 1)
    ok = np.flatnonzero(busy & busy[end_win])
    return int(ok[0]) if len(ok) else 0


def _native_mass(s: RateSeries, t_s: float) -> float:
    """Expected arrivals of the unscaled series, repeated as needed, over [0, t_s]."""
    width = np.diff(s.edges_s)
    reps = max(int(np.ceil(t_s / s.duration_s)), 1)
    cum = np.concatenate([[0.0], np.cumsum(np.tile(s.rate_rps * width, reps))])
    edges = np.concatenate([[0.0], np.cumsum(np.tile(width, reps))])
    return float(np.interp(t_s, edges, cum))


def _positive(s: RateSeries, mass: float, t_s: float) -> float:
    if not mass > 0:
        raise IngestError(
            f"{s.source}: no arrivals in its first {t_s:.4g} s",
            hint="pass --duration-s long enough to reach the trace's arrivals, or another trace",
        )
    return mass
