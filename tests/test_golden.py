"""Refactors keep every figure: simulate, oracle labels and analyze --demo match pinned digests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import golden_runs  # noqa: E402


def test_outputs_match_golden_digests(tmp_path):
    want = json.loads(golden_runs.GOLDEN.read_text())
    got = golden_runs.digests(tmp_path)
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert not changed, (
        f"outputs changed: {changed} (a deliberate model change reruns golden_runs.py --write)"
    )
    assert set(got) == set(want)
