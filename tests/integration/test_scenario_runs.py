"""Graded runs of every scenario in the catalogue through the real loop.

Real Prometheus (Debian's binary), the real service builds, real dependencies, real
open-model load on 127.0.0.1. For every scenario (sreforge.catalogue.cases): each reference
fix must pass, the empty patch and each decoy must fail for a behavioural reason (the one a
decoy's `# expect:` header names, when it names one), and the healthy build must stay quiet
under the same load (the control window of the first fix).

The fast subset (per scenario: the first fix with its control window, the empty patch and
the first decoy) is marked `graded` and runs by default; the rest of the full validation
is also `slow`, deselected by default (`-m slow` runs it). With
SREFORGE_SCENARIOS_MD=<path> the rows of the cases that ran (in any xdist worker) are
written there as the SCENARIOS.md table when the session ends (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runs import ROOT, agent_args, cli_env, sreforge_run

from sreforge import catalogue
from sreforge.scenarios import discover

SUSTAIN = "30"
CONTROL = "15"
STAMPEDE = ROOT / "scenarios" / "latency-cache-stampede"

pytestmark = [
    pytest.mark.graded,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="needs Debian's prometheus: bash scripts/setup.sh",
    ),
]


def _params() -> list[Any]:
    out = []
    for scenario in discover(ROOT / "scenarios"):
        for case in catalogue.cases(scenario):
            marks = () if case.fast else (pytest.mark.slow,)
            out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def _keep(row: dict[str, Any]) -> None:
    """Append the row for SCENARIOS.md (tests/conftest.py writes the table at session end)."""
    target = os.environ.get("SREFORGE_SCENARIOS_MD")
    if target:
        with Path(f"{target}.rows.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


@pytest.mark.parametrize("case", _params())
def test_case(tmp_path: Path, case: catalogue.Case) -> None:
    extra = ["--control-seconds", CONTROL] if case.control else []
    started = time.monotonic()
    run = sreforge_run(
        tmp_path / "runs",
        case.scenario.directory,
        "--fix",
        str(case.patch_file(tmp_path)),
        "--sustain-seconds",
        SUSTAIN,
        *extra,
    )
    _keep(catalogue.row(case, run.record, time.monotonic() - started))
    record = run.record
    _, mismatch = catalogue.judged(case, record)
    assert mismatch is None, run.output
    bar = case.scenario.verify.pass_threshold
    signals = record["signals"]
    if case.expected == "pass":
        assert run.code == 0, run.output
        assert float(record["score"]) >= bar
        for name in ("ci_green", "alert_cleared", "sustained_clear", "no_new_alerts"):
            assert signals[name]["value"] is True, (name, signals[name], run.output)
        stamps = record["timestamps"]
        assert stamps["injected"] < stamps["fired"] < stamps["redeployed"] < stamps["cleared"]
        load = record["load"]
        assert load["verifyAchievedRateMean"] >= 0.9 * load["targetRate"]
    else:
        assert run.code == 1, run.output
        assert float(record["score"]) < bar
        assert record["failingSignals"], run.output
        for name in record["failingSignals"]:
            assert signals[name]["credit"] < 1.0
    if case.control:
        assert record["control"] == {"seconds": int(CONTROL), "targetFired": False}, run.output


def test_agent_command_edits_the_workspace_and_its_diff_is_graded(tmp_path: Path) -> None:
    run = sreforge_run(
        tmp_path,
        STAMPEDE,
        *agent_args("patch_agent.py", STAMPEDE / "fixes" / "memoize-query.patch"),
        "--sustain-seconds",
        "20",
        env=cli_env(RCA_JUDGE_URL=""),
    )
    record, run_dir = run.record, run.run_dir
    assert record["passed"] is True, run.output
    assert record["submission"]["kind"] == "agent"
    assert record["submission"]["sandboxed"] is True
    assert record["submission"]["rca"] == "rca.txt"
    assert record["submission"]["filesChanged"] == ["catalog/db.py"]
    assert "rca.txt" not in (run_dir / "submission.patch").read_text()
    assert (run_dir / "rca.txt").read_text().startswith("The product cache")
    assert not (run_dir / "diagnosis.json").exists()  # no judge configured: best-effort


def test_known_answers_fail_a_brownout_that_answers_fast_with_other_pages(tmp_path: Path) -> None:
    """A decoy that, under load, serves product pages without their reviews: fast, the
    right status and id, and the service's own tests (one request at a time) pass. It
    passed the oracle, score 0.98, before the load checked known answers; the healthy
    build's answers, learned before the injection, make each such page an invalid
    response, so the load is not delivered."""
    run = sreforge_run(
        tmp_path,
        STAMPEDE,
        "--fix",
        str(STAMPEDE / "decoys" / "brownout-without-reviews.patch"),
        "--sustain-seconds",
        SUSTAIN,
    )
    record = run.record
    assert run.code == 1, run.output
    assert record["signals"]["ci_green"]["value"] is True  # the tests cannot see it
    assert record["reason"] in {"LoadNotDelivered", "NewAlerts", "NotCleared"}, run.output
    generator = record["load"]["generator"]
    assert generator["known_answers"] == 300  # the whole id range, from the healthy build
    # How it fails varies with the machine: in one measured run its made-up pages were
    # invalid (LoadNotDelivered); in another, on a busier machine, it never caught up with
    # its backlog (NotCleared, 3425 timeouts, no page answered in time to be judged).
    # tests/integration/test_load_generator.py proves the check itself deterministically.
    outcomes = generator["outcomes"]
    if record["reason"] == "LoadNotDelivered":
        assert outcomes["invalid"] + outcomes["timeout"] + outcomes["http_error"] > 0, generator
