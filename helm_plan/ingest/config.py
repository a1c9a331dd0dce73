"""Options and report of `ingest`: the frozen config and what a conversion did."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helm_plan.config import fix_for, require_int, require_positive
from helm_plan.errors import ConfigError, IngestError
from helm_plan.mixshift import MixShift, shares
from helm_plan.regimes import RegimeSpan, parse_regime
from helm_plan.trace import MAX_N_CANDIDATES

#: Source kinds `ingest` converts, in the order the CLI lists them.
KINDS: tuple[str, ...] = ("movielens", "amazon", "taobao", "mooncake", "csv")
#: Taobao UserBehavior behaviour codes.
TAOBAO_BEHAVIORS: tuple[str, ...] = ("pv", "buy", "cart", "fav")
#: Default candidates per request: the shipped gr-small model profile's ``n_candidates``.
DEFAULT_N_CANDIDATES = 512
#: Default serving rate when a log is re-timed and neither --qps nor --duration-s is given.
DEFAULT_QPS = 100.0
#: Default session gap (DESIGN.md: 30 minutes).
DEFAULT_SESSION_GAP_S = 1800.0


def check_kind(kind: str) -> str:
    """Return ``kind`` if it is a known source kind, else raise IngestError listing them."""
    if kind not in KINDS:
        raise IngestError(f"unknown kind {kind!r}", hint=f"use one of {', '.join(KINDS)}")
    return kind


@dataclass(frozen=True)
class IngestConfig:
    """How to turn one source log into a canonical request trace."""

    kind: str
    """Source kind: movielens, amazon, taobao, mooncake or csv."""
    session_gap_s: float = DEFAULT_SESSION_GAP_S
    """A user's interactions closer than this form one request, seconds."""
    n_candidates: int = DEFAULT_N_CANDIDATES
    """Candidates scored per request (default: gr-small's 512)."""
    qps: float | None = None
    """Target arrival rate of the re-timed trace, requests per second."""
    duration_s: float | None = None
    """Target length of the re-timed trace, seconds."""
    regime: str | None = None
    """Re-time with this rate regime (steady, trend, burst, mixed)."""
    arrivals: Path | None = None
    """Re-time from this real arrival trace (Azure CSV, ServeGen file or folder, Mooncake JSONL)."""
    replicate: int = 1
    """Clone every user this many times in all (1 = no clones), with id offsets and time shifts."""
    seed: int = 0
    """Seed for every random choice (interleaving, regime shape, arrival draws)."""
    user_col: str | None = None
    """csv kind: column holding the user id."""
    item_col: str | None = None
    """csv kind: column holding the item id."""
    ts_col: str | None = None
    """csv kind: column holding the timestamp in seconds (absent: keep file order)."""
    behaviors: tuple[str, ...] = TAOBAO_BEHAVIORS
    """taobao kind: behaviours kept as interactions; other rows are dropped."""
    drop_duplicates: bool = True
    """Drop rows repeating an earlier (user, item, timestamp) exactly (logs with timestamps)."""
    interleave_grouped: bool = True
    """Logs without timestamps whose users are contiguous blocks get a seeded random merge."""
    block_tokens: int = 512
    """mooncake kind: tokens per KV hash block (a partial last block is re-hashed when extended)."""
    shifts: tuple[MixShift, ...] = ()
    """Mix shifts injected into the bursts of the re-timing regime (helm_plan.mixshift)."""

    def __post_init__(self) -> None:
        check_kind(self.kind)
        require_positive("session_gap_s", self.session_gap_s)
        require_int("n_candidates", self.n_candidates, 0, MAX_N_CANDIDATES)
        if self.qps is not None:
            require_positive("qps", self.qps)
        if self.duration_s is not None:
            require_positive("duration_s", self.duration_s)
        if self.regime is not None:
            parse_regime(self.regime)
            if self.arrivals is not None:
                raise ConfigError(
                    "give either arrivals or regime, not both",
                    hint="--arrivals re-times from a real trace, --regime from a rate shape",
                )
        if self.replicate < 1:
            raise ConfigError(
                f"replicate must be >= 1, got {self.replicate}", hint=fix_for("replicate", ">= 1")
            )
        require_positive("block_tokens", self.block_tokens)
        bad = [b for b in self.behaviors if b not in TAOBAO_BEHAVIORS]
        if bad or not self.behaviors:
            raise ConfigError(
                f"unknown taobao behavior {bad[0]!r}" if bad else "behaviors is empty",
                hint=f"use a comma list of {', '.join(TAOBAO_BEHAVIORS)}",
            )
        if self.shifts:
            shares(self.shifts)
            if self.regime not in ("burst", "mixed"):
                raise ConfigError(
                    "--shift changes the mix inside the bursts of the re-timing regime",
                    hint="add --regime burst (or mixed)",
                )
        if self.kind == "csv" and (self.user_col is None or self.item_col is None):
            raise ConfigError(
                "csv kind needs a column map with user and item",
                hint="pass --map user=COL,item=COL[,ts=COL]",
            )

    @property
    def retime_requested(self) -> bool:
        """Whether any re-timing option was given."""
        return any(v is not None for v in (self.qps, self.duration_s, self.regime, self.arrivals))


def parse_column_map(text: str) -> dict[str, str]:
    """Parse ``user=COL,item=COL[,ts=COL]`` into {'user_col': .., 'item_col': .., 'ts_col': ..}."""
    out: dict[str, str] = {}
    roles = {"user": "user_col", "item": "item_col", "ts": "ts_col"}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        role, sep, col = part.partition("=")
        role = role.strip().lower()
        if not sep or not col.strip():
            raise ConfigError(f"column map entry {part!r} is not ROLE=COLUMN", hint=_MAP_HINT)
        if role not in roles:
            raise ConfigError(f"unknown column role {role!r} in {text!r}", hint=_MAP_HINT)
        if roles[role] in out:
            raise ConfigError(f"column role {role!r} given twice in {text!r}", hint=_MAP_HINT)
        out[roles[role]] = col.strip()
    return out


_MAP_HINT = "use --map user=COL,item=COL[,ts=COL]"


@dataclass(frozen=True)
class IngestReport:
    """What one conversion read, dropped and produced."""

    kind: str
    """Source kind."""
    variant: str
    """Detected format variant inside the kind (e.g. 'recbole-inter', 'pairs')."""
    source: str
    """Path of the source log."""
    rows_read: int
    """Data rows (lines, records) read from the source, blank lines excluded."""
    dropped: tuple[tuple[str, int], ...]
    """Rows dropped, as (reason, count)."""
    requests_truncated: int
    """Requests cut because they fall beyond --duration-s at --qps."""
    requests: int
    """Requests in the output trace."""
    users: int
    """Distinct users in the output trace (clones included)."""
    items: int
    """Distinct items in the output trace."""
    new_items: int
    """Total history tokens (sum of new_items lengths) in the output trace."""
    span_s: float
    """Time from the first to the last request of the output, seconds."""
    timing: str
    """How arrival times were set (kept, regime, arrival trace)."""
    notes: tuple[str, ...] = ()
    """Other things worth knowing (interleaving, rate adjustments)."""
    out: str | None = None
    """Path of the written trace, if any."""
    spans: tuple[RegimeSpan, ...] = ()
    """Regime spans of the re-timing regime (recorded in the trace's metadata)."""
    shift_bursts: tuple[dict[str, Any], ...] = ()
    """Per burst, what the mix shifts injected and the shares reached (helm_plan.ingest.shifts)."""

    @property
    def rows_dropped(self) -> int:
        """Total rows dropped."""
        return sum(c for _, c in self.dropped)

    @property
    def qps(self) -> float:
        """Mean arrival rate of the output, requests per second."""
        return self.requests / self.span_s if self.span_s > 0 else float("nan")
