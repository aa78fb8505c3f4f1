"""A warm session's case records count the load generator from the case's start."""

from __future__ import annotations

from pathlib import Path

import pytest

from sreforge.cli import build_parser
from sreforge.runtime.local import CaseSpec, RunOptions, _since


def test_counters_are_counted_from_the_case_start_and_gauges_kept() -> None:
    base = {
        "completed": 100,
        "started": 110,
        "scheduled": 110,
        "elapsed_seconds": 10.0,
        "outcomes": {"success": 90, "timeout": 10},
        "known_answers": 300,
        "target_rate": 10,
    }
    now = {
        "completed": 400,
        "started": 410,
        "scheduled": 410,
        "elapsed_seconds": 40.0,
        "outcomes": {"success": 380, "timeout": 10, "invalid": 10},
        "known_answers": 300,
        "target_rate": 10,
    }
    got = _since(now, base)
    assert got is not None
    assert (got["completed"], got["started"], got["elapsed_seconds"]) == (300, 300, 30.0)
    assert got["outcomes"] == {"success": 290, "timeout": 0, "invalid": 10}
    assert got["achieved_rate_total"] == 10.0
    assert (got["known_answers"], got["target_rate"]) == (300, 10)  # gauges as they are
    assert got["since_case_began"] is True
    assert _since(now, None) is now  # the first case: counted from the start
    assert _since(None, base) is None


def test_a_case_is_a_patch_or_an_agent_never_both() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        CaseSpec("x")
    with pytest.raises(ValueError, match="exactly one"):
        CaseSpec("x", fix=Path("a.patch"), agent="true")
    one = CaseSpec.of(RunOptions(runs_dir=Path("runs"), fix=Path("fixes/a.patch")))
    assert (one.label, one.trial) == ("a.patch", 1)


def test_a_case_can_wait_for_an_mcp_submission_instead() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        CaseSpec("x", agent="true", mcp=True)
    by_hand = CaseSpec.of(RunOptions(runs_dir=Path("runs"), mcp=True))
    assert (by_hand.label, by_hand.mcp, by_hand.fix, by_hand.agent) == ("mcp", True, None, None)
    args = build_parser().parse_args(["run", "latency-cache-stampede", "--mcp"])
    assert (args.mcp, args.fix, args.agent) == (True, None, None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "s", "--mcp", "--fix", "a.patch"])
