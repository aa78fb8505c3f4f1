"""Fixes must last: the soak after the sustained window, graded on real runs.

Two decoys of latency-cache-stampede hold through a short sustained window and give way
after it, the two classes the soak exists for:

- `decoys/warm-once-read-through.patch` gives way: it warms the product cache at startup,
  its entries all expire together 60 s later and nothing refills them, so the stampede
  returns (Refired, or NotCleared when the stalled service fails its own scrape first, in
  the soak);
- `decoys/recycle-worker.patch` is a time bomb: the reference fix, plus a worker that
  stops itself 60 s after it starts. The harness starts it again, as a kubelet would, and
  counts the restart: a restart of the patched service after the rollout fails the run
  (NotCleared), whatever the alert says.

Both run on ONE warm session (`sreforge campaign`) with a 15 s window and a soak drawn
from 50-60 s, so each gives way inside the soak, never inside the window. That the
reference fixes hold through the soak is shown on the real node
(tests/integration/node) and by `sreforge scenarios validate` (SCENARIOS.md), at the
scenarios' own soak.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.reliability_cases import case
from tests.runs import ROOT, cli_env

pytestmark = pytest.mark.graded

SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
GIVES_WAY = "warm-once-read-through.patch"
TIME_BOMB = "recycle-worker.patch"
SUSTAIN = 15
SOAK = (50, 60)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    runs = tmp_path_factory.mktemp("soak")
    argv = [
        sys.executable, "-m", "sreforge.cli", "campaign", str(SCENARIO),
        "--fix", str(SCENARIO / "decoys" / GIVES_WAY),
        "--fix", str(SCENARIO / "decoys" / TIME_BOMB),
        "--sustain-seconds", str(SUSTAIN), "--soak-seconds", "{}:{}".format(*SOAK),
        "--runs-dir", str(runs),
    ]  # fmt: skip
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
        env=cli_env(RCA_JUDGE_URL=""),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, dict[str, Any]] = {}
    for path in runs.glob("*/record.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        out[Path(record["session"]["label"]).name] = record
    assert set(out) == {GIVES_WAY, TIME_BOMB}, proc.stdout + proc.stderr
    return out


def _held_the_window(record: dict[str, Any]) -> float:
    """The decoy cleared and held the whole window: it failed after it. Returns how long
    after the clear it failed, from its last sample."""
    assert record["signals"]["alert_cleared"]["value"] is True, record["message"]
    soak = record["soak"]
    assert soak["rangeSeconds"] == list(SOAK)
    assert SOAK[0] <= soak["seconds"] <= SOAK[1]
    assert len(soak["seed"]) == 64
    cleared = record["verdict"]["cleared_at"]
    failed = record["timeline"][-1]["t"]
    assert failed - cleared > SUSTAIN, "it gave way inside the window, not the soak"
    assert failed - cleared < SUSTAIN + soak["seconds"]
    return failed - cleared


def test_a_fix_that_gives_way_after_the_window_refires_in_the_soak(
    records: dict[str, dict[str, Any]],
) -> None:
    with case("grading: a fix that gives way after the window fails in the soak"):
        record = records[GIVES_WAY]
        assert record["passed"] is False
        if record["reason"] == "Inconclusive":  # only other work starving the run excuses it
            assert "starved the run" in record["message"], record["message"]
            return
        # the stampede is back: the alert refires, or the service stalls so that its own
        # scrape fails (service-down), whichever the samples see first
        assert record["reason"] in ("Refired", "NotCleared"), record["message"]
        _held_the_window(record)
        assert "into the" in record["message"], record["message"]
        assert "soak after the 15s window" in record["message"], record["message"]
        assert record["restarts"] == 0


def test_a_time_bomb_is_a_restart_and_fails_the_fix(records: dict[str, dict[str, Any]]) -> None:
    with case("grading: a fix whose process exits after the window fails (restart counted)"):
        record = records[TIME_BOMB]
        assert record["passed"] is False
        assert record["reason"] == "NotCleared", record["message"]
        _held_the_window(record)
        assert record["restarts"] == 1
        assert "restarted 1 time after the rollout" in record["message"], record["message"]
        # the alert itself never came back: only the restart failed it
        assert all("CatalogLatencyHigh" not in (s["firing"] or []) for s in record["timeline"][-5:])
