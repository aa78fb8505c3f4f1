"""Graded runs of latency-cache-stampede through the real loop.

Real Prometheus (Debian's binary), real catalog processes, real Redis, real open-model
load on 127.0.0.1. Every reference fix must pass; the empty patch and every decoy must fail
and record.json must name the signal that failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
SUSTAIN = "30"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="needs Debian's prometheus: bash scripts/setup.sh",
    ),
]


def run(tmp_path: Path, patch: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sreforge.cli",
            "run",
            str(SCENARIO),
            "--fix",
            str(patch),
            "--sustain-seconds",
            SUSTAIN,
            "--runs-dir",
            str(tmp_path),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    records = list(tmp_path.glob("*/record.json"))
    assert len(records) == 1, proc.stdout + proc.stderr
    return proc.returncode, json.loads(records[0].read_text()), proc.stdout + proc.stderr


@pytest.mark.parametrize("fix", sorted(p.name for p in (SCENARIO / "fixes").glob("*.patch")))
def test_reference_fix_passes(tmp_path: Path, fix: str) -> None:
    # One fix also runs the control window: the healthy build under the same load is quiet.
    control = ("--control-seconds", "15") if fix == "restore-simplecache.patch" else ()
    code, record, out = run(tmp_path, SCENARIO / "fixes" / fix, *control)
    assert record["passed"] is True, out
    if control:
        assert record["control"] == {"seconds": 15, "targetFired": False}, out
    assert code == 0
    assert record["reason"] == "Passed"
    assert float(record["score"]) >= 0.85  # type: ignore[arg-type]
    signals = record["signals"]
    assert isinstance(signals, dict)
    assert all(
        signals[s]["value"] is True
        for s in ("ci_green", "alert_cleared", "sustained_clear", "no_new_alerts")
    )
    stamps = record["timestamps"]
    assert isinstance(stamps, dict)
    assert stamps["injected"] < stamps["fired"] < stamps["redeployed"] < stamps["cleared"]
    load = record["load"]
    assert isinstance(load, dict)
    assert load["verifyAchievedRateMean"] >= 0.9 * load["targetRate"]


# (patch, the signal that must fail, the reasons accepted)
FAILING = [
    ("empty", "alert_cleared", {"NotCleared"}),
    ("break-tests.patch", "ci_green", {"CIRed"}),
    ("short-ttl.patch", "sustained_clear", {"Refired", "NotCleared"}),
    ("shed-load.patch", "alert_cleared", {"LoadNotDelivered"}),
    ("background-refresh.patch", "alert_cleared", {"NotCleared", "Refired"}),
    ("fake-metrics.patch", "alert_cleared", {"NotCleared"}),
]


@pytest.mark.parametrize(("patch", "signal", "reasons"), FAILING, ids=[f[0] for f in FAILING])
def test_empty_patch_and_decoys_fail(
    tmp_path: Path, patch: str, signal: str, reasons: set[str]
) -> None:
    if patch == "empty":
        path = tmp_path / "empty.patch"
        path.write_text("")
    else:
        path = SCENARIO / "decoys" / patch
    runs = tmp_path / "runs"
    code, record, out = run(runs, path)
    assert record["passed"] is False, out
    assert code == 1, out
    assert record["reason"] in reasons, out
    signals = record["signals"]
    assert isinstance(signals, dict)
    assert signals[signal]["credit"] < 1.0, out
    assert float(record["score"]) < 0.85  # type: ignore[arg-type]


def test_agent_command_edits_the_workspace_and_its_diff_is_graded(tmp_path: Path) -> None:
    agent = (
        f"{sys.executable} {ROOT / 'tests' / 'agents' / 'patch_agent.py'} "
        f"{SCENARIO / 'fixes' / 'memoize-query.patch'}"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sreforge.cli",
            "run",
            str(SCENARIO),
            "--agent",
            agent,
            "--sustain-seconds",
            "20",
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "RCA_JUDGE_URL": ""},
    )
    (run_dir,) = [p.parent for p in tmp_path.glob("*/record.json")]
    record = json.loads((run_dir / "record.json").read_text())
    assert record["passed"] is True, proc.stdout + proc.stderr
    assert record["submission"]["kind"] == "agent"
    assert record["submission"]["rca"] == "rca.txt"
    assert record["submission"]["filesChanged"] == ["catalog/db.py"]
    assert "rca.txt" not in (run_dir / "submission.patch").read_text()
    assert (run_dir / "rca.txt").read_text().startswith("The product cache")
    assert not (run_dir / "diagnosis.json").exists()  # no judge configured: best-effort
