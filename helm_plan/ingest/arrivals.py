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
stay real). Arrivals are a renewal process with gamma gaps of the window's CV
in operational time (the integral of the rate), mapped back to real time; the
series is repeated when more arrivals are needed than it holds.
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
    df = pl.read_csv(p, infer_schema=False, encoding="utf8-lossy")
    col = df.columns[0]
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
            raise IngestError(f"{f} line {df['lineno'][i]}: negative rate {rate[i]}")
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

    With ``qps`` the rate is scaled to mean ``qps``; with only ``duration_s``
    it is scaled so ``n`` arrivals are expected within it; with neither the
    native rate is kept. With both, arrivals past ``duration_s`` are cut, so
    fewer than ``n`` may come back.
    """
    if n == 0:
        return np.zeros(0), 1.0
    width = np.diff(s.edges_s)
    if qps is not None:
        scale = qps / s.mean_rps
    elif duration_s is not None:
        reps = int(np.ceil(duration_s / s.duration_s))
        cum = np.concatenate([[0.0], np.cumsum(np.tile(s.rate_rps * width, reps))])
        edges = np.concatenate([[0.0], np.cumsum(np.tile(width, reps))])
        scale = n / float(np.interp(duration_s, edges, cum))
    else:
        scale = 1.0
    rng = np.random.default_rng(seed)
    n_win = len(width)
    mass = s.rate_rps * width * scale  # expected arrivals per window
    cum = np.cumsum(mass)
    per_rep = float(cum[-1])
    limit = np.inf
    if duration_s is not None and qps is not None:
        reps = int(np.ceil(duration_s / s.duration_s))
        limit = reps * n_win
    parts: list[np.ndarray] = []
    got, lo = 0, 0
    while got < n and lo < limit:
        # windows until the expected count covers what is missing, with margin
        want = 1.2 * (n - got) + 8.0 * np.sqrt(n - got) + 8.0
        base = (lo // n_win) * per_rep - (cum[lo % n_win - 1] if lo % n_win else 0.0)
        target = base + want  # cumulative mass (from the start of rep lo//n_win) to reach
        reps_ahead = int(target // per_rep)
        hi = (
            (lo // n_win + reps_ahead) * n_win
            + int(np.searchsorted(cum, target - reps_ahead * per_rep))
            + 1
        )
        hi = int(min(max(hi, lo + 1), limit))
        t = _renewal(s, mass, lo, hi, rng)
        parts.append(t)
        got += len(t)
        lo = hi
    t = np.concatenate(parts)[:n]
    if duration_s is not None and qps is not None:
        t = t[t < duration_s]
    return t, scale


def _renewal(
    s: RateSeries, mass_rep: np.ndarray, lo: int, hi: int, rng: np.random.Generator
) -> np.ndarray:
    """Gamma-renewal arrivals in windows ``lo..hi`` of the repeated series (sorted)."""
    n_win = len(s.rate_rps)
    idx = np.arange(lo, hi)
    w0 = idx % n_win
    width = np.diff(s.edges_s)[w0]
    start = (idx // n_win) * s.duration_s + s.edges_s[w0] - s.edges_s[0]
    mass = mass_rep[w0]
    shape = 1.0 / np.clip(s.cv[w0], _CV_MIN, _CV_MAX) ** 2
    live = np.flatnonzero(mass > 0)
    out_w, out_u = [], []
    pos = np.zeros(len(mass))  # operational time already covered in each window
    first = np.ones(len(mass), bool)
    while len(live):
        m, k = mass[live] - pos[live], shape[live]
        cv = 1.0 / np.sqrt(k)
        draws = np.ceil(m + 8.0 * cv * np.sqrt(m) + 8.0).astype(np.int64)
        w = np.repeat(live, draws)
        g = rng.gamma(np.repeat(k, draws), 1.0 / np.repeat(k, draws))
        heads = np.concatenate([[0], np.cumsum(draws)[:-1]])
        # stationary start: the first gap is a uniform share of a length-biased gap
        lb = rng.gamma(k + 1.0, 1.0 / k) * rng.random(len(live))
        g[heads] = np.where(first[live], lb, g[heads])
        cs = np.cumsum(g)
        base = np.repeat(cs[heads] - g[heads], draws)
        u = np.repeat(pos[live], draws) + cs - base
        inside = u < mass[w]
        out_w.append(w[inside])
        out_u.append(u[inside])
        last = u[np.cumsum(draws) - 1]
        pos[live] = last
        first[live] = False
        live = live[last < mass[live]]
    if not out_w:
        return np.zeros(0)
    w = np.concatenate(out_w)
    u = np.concatenate(out_u)
    return np.sort(start[w] + u / mass[w] * width[w])
