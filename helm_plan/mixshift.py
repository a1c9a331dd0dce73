"""Mix shifts: what a real regime change brings besides a rate spike (``--shift KIND=SHARE``).

Re-timing a log (``ingest --regime``) or scaling it (``synth --like``) changes
when requests arrive, never *which* users and items arrive, so it never moves
the balance between the caches. A mix shift changes the mix inside the bursts
of the regime, where real regime changes bring it:

- ``flash-crowd=S``: a flash crowd of cold users: ``S`` of the requests in a
  burst are a user's first (their initial histories are like the log's first
  requests);
- ``new-items=S``: a drop of new content: ``S`` of the history items in a
  burst are new items, never seen before that burst;
- ``returning-wave=S``: a wave of returning users: ``S`` of the requests in a
  burst come from users who were away (``ingest``: users seen before the burst;
  ``synth --like``: users active before the trace, carrying their history).

Each kind is given once, with a share in [0, 1); ``flash-crowd`` and
``returning-wave`` together stay below 1. ``ingest`` injects them into the log
(:mod:`helm_plan.ingest.shifts`), ``synth --like`` sets its burst knobs
(:func:`helm_plan.synth.like.like_config`). Both record the shifts and the seed
in the provenance and the bursts as regime spans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from helm_plan.errors import ConfigError

KINDS = ("flash-crowd", "new-items", "returning-wave")
"""Mix-shift kinds, in the order they are applied."""
_HINT = "write --shift KIND=SHARE with KIND one of flash-crowd, new-items, returning-wave"


@dataclass(frozen=True)
class MixShift:
    """One mix shift: its kind and its share of a burst's requests (or items)."""

    kind: str
    """flash-crowd, new-items or returning-wave."""
    share: float
    """Target share in each burst, in [0, 1)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown mix shift {self.kind!r}", hint=_HINT)
        if not 0.0 <= self.share < 1.0:
            raise ConfigError(f"--shift {self.kind} share must be in [0, 1), got {self.share}",
                              hint="e.g. --shift flash-crowd=0.8")  # fmt: skip

    def text(self) -> str:
        return f"{self.kind}={self.share:g}"


def parse_shift(text: str) -> MixShift:
    """``KIND=SHARE`` as a MixShift, with a precise error."""
    kind, sep, raw = str(text).partition("=")
    if not sep:
        raise ConfigError(f"--shift {text!r} is not KIND=SHARE", hint=_HINT)
    try:
        share = float(raw)
    except ValueError:
        raise ConfigError(f"--shift {text!r}: {raw!r} is not a number", hint=_HINT) from None
    return MixShift(kind.strip(), share)


def shares(shifts: Iterable[MixShift]) -> dict[str, float]:
    """Kind -> share, checking each kind is given once and the user shares stay below 1."""
    out: dict[str, float] = {}
    for s in shifts:
        if s.kind in out:
            raise ConfigError(f"--shift {s.kind} is given twice", hint="give each kind once")
        out[s.kind] = s.share
    users = out.get("flash-crowd", 0.0) + out.get("returning-wave", 0.0)
    if users >= 1.0:
        raise ConfigError(
            f"flash-crowd + returning-wave shares must stay below 1, got {users:g}",
            hint="lower one of them: the rest of a burst is the log's own traffic",
        )
    return out


__all__ = ["KINDS", "MixShift", "parse_shift", "shares"]
