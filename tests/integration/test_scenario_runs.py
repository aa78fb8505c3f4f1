"""Graded runs of every scenario in the catalogue through the real loop.

Real Prometheus (Debian's binary), the real service builds, real dependencies, real
open-model load on 127.0.0.1. For every scenario (sreforge.catalogue.cases): each reference
fix must pass, the empty patch and each decoy must fail for a behavioural reason (the one a
decoy's `# expect:` header names, when it names one), and the healthy build must stay quiet
under the same load (the control window at the start of the session).

Each scenario's selected cases are graded on ONE warm session, the way `sreforge campaign`
runs them (a real subprocess): the environment is injected once, and each case is handed
off, graded and restored in turn. By default this runs the first reference fix of the
scenarios in DEFAULT_FIXES, and the stampede's whole fast subset (its first fix, the empty
patch, its first decoy, the brownout and an agent's run: the tests at the end); the rest of
the full validation is also `slow`, deselected by default (`-m slow` runs it; `sreforge
scenarios validate` grades the same cases for SCENARIOS.md). With
SREFORGE_SCENARIOS_MD=<path> the rows of the cases that ran are written there as the
SCENARIOS.md table when the session ends (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.runs import AGENTS, NO_SOAK, ROOT, cli_env

from sreforge import catalogue
from sreforge.scenarios import discover, load_scenario

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


# The scenarios whose first reference fix runs by default besides the stampede: one of
# two causes, and one on each real service (Kinto, I Hate Money). Every other scenario's
# first fix is `slow` (each is a warm session of ~100-160 s: seven of them took ~810 s of
# a 3878 s default suite, 2026-12-04); `sreforge scenarios validate` grades them all for
# SCENARIOS.md.
DEFAULT_FIXES = {
    "compound-cache-and-index",
    "latency-kinto-credentials-cache",
    "latency-ihatemoney-n-plus-one",
}


def _default(case: catalogue.Case) -> bool:
    """Whether the case runs by default: the stampede's fast subset (whose session also
    grades the agent and the brownout below), and the first reference fix of the scenarios
    in DEFAULT_FIXES. The rest is `slow` with the full validation: each failing case waits
    out its scenario's clear budget, and five of them cost the default suite about 17
    minutes (CI of 2026-12-03)."""
    if not case.fast:
        return False
    if case.scenario.directory == STAMPEDE:
        return True
    return case.expected == "pass" and case.scenario.name in DEFAULT_FIXES


def _params() -> list[Any]:
    out = []
    for scenario in discover(ROOT / "scenarios"):
        for case in catalogue.cases(scenario):
            marks = () if _default(case) else (pytest.mark.slow,)
            out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def _keep(row: dict[str, Any]) -> None:
    """Append the row for SCENARIOS.md (tests/conftest.py writes the table at session end)."""
    target = os.environ.get("SREFORGE_SCENARIOS_MD")
    if target:
        with Path(f"{target}.rows.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


# Cases of the stampede's session beyond the catalogue's, for the tests at the end.
BROWNOUT = STAMPEDE / "decoys" / "brownout-without-reviews.patch"
AGENT_FIX = STAMPEDE / "fixes" / "memoize-query.patch"
AGENT = f"python3 {AGENTS / 'patch_agent.py'} {AGENT_FIX}"
EXTRA = {
    "test_known_answers_fail_a_brownout_that_answers_fast_with_other_pages": [
        "--fix",
        str(BROWNOUT),
    ],
    "test_agent_command_edits_the_workspace_and_its_diff_is_graded": [
        "--agent",
        AGENT,
        *("--agent-share", str(AGENTS), "--agent-share", str(AGENT_FIX)),
    ],
}
_SESSIONS: dict[str, dict[str, dict[str, Any]]] = {}


def _session(request: pytest.FixtureRequest, scenario: Path) -> dict[str, dict[str, Any]]:
    """The records of `scenario`'s warm session by case label, graded on first use: every
    selected case of this module on that scenario, in one `sreforge campaign`."""
    name = scenario.name
    if name in _SESSIONS:
        return _SESSIONS[name]
    args: list[str] = []
    labels: list[str] = []
    for item in request.session.items:
        if item.module is not request.module:
            continue
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if isinstance(case, catalogue.Case) and case.scenario.name == name:
            args += ["--fix", catalogue.EMPTY if case.patch is None else str(case.patch)]
            labels.append(case.label)
        elif name == STAMPEDE.name and item.originalname in EXTRA:
            args += EXTRA[item.originalname]
    runs = Path(request.config._tmp_path_factory.mktemp(f"session-{name}"))  # type: ignore[attr-defined]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sreforge.cli",
            "campaign",
            str(scenario),
            *args,
            "--sustain-seconds",
            SUSTAIN,
            "--soak-seconds",
            NO_SOAK,
            "--control-seconds",
            CONTROL,
            "--runs-dir",
            str(runs),
        ],
        capture_output=True,
        text=True,
        timeout=300 + 240 * len(labels),
        check=False,
        cwd=ROOT,
        env=cli_env(RCA_JUDGE_URL=""),
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    records = {}
    for path in runs.glob("*/record.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        record["_dir"] = str(path.parent)
        records[record["session"]["label"]] = record
    _SESSIONS[name] = records
    return records


@pytest.mark.parametrize("case", _params())
def test_case(request: pytest.FixtureRequest, case: catalogue.Case) -> None:
    record = _session(request, case.scenario.directory).get(case.label)
    assert record is not None, f"{case.label} was not graded in its session"
    _keep(catalogue.row(case, record, record["wallTimeSeconds"].get("total", 0.0)))
    _, mismatch = catalogue.judged(case, record)
    assert mismatch is None, record["message"]
    bar = case.scenario.verify.pass_threshold
    signals = record["signals"]
    if case.expected == "pass":
        assert record["passed"] is True, record["message"]
        assert float(record["score"]) >= bar
        for name in ("ci_green", "alert_cleared", "sustained_clear", "no_new_alerts"):
            assert signals[name]["value"] is True, (name, signals[name])
        stamps = record["timestamps"]
        assert stamps["injected"] < stamps["fired"] < stamps["redeployed"] < stamps["cleared"]
        load = record["load"]
        assert load["verifyAchievedRateMean"] >= 0.9 * load["targetRate"]
    else:
        assert record["passed"] is False, record["message"]
        assert float(record["score"]) < bar
        assert record["failingSignals"], record["message"]
        for name in record["failingSignals"]:
            assert signals[name]["credit"] < 1.0
    if case.control:
        assert record["session"]["case"] == 1
        control = dict(record["control"])
        p95 = control.pop("p95ByRoute")
        assert control == {
            "seconds": int(CONTROL),
            "targetFired": False,
            "pagesFired": [],
            "restarts": 0,
        }
        # the healthy build's highest p95 per route, read back from the run's Prometheus
        routes = {r.label for r in case.scenario.load.mix()}
        assert p95["load"], p95
        assert set(p95["load"]) | set(p95["probe"]) <= routes, p95
        assert all(v > 0 for v in (*p95["load"].values(), *p95["probe"].values())), p95
    else:
        assert record["control"] is None  # the control window belongs to the first case


def test_agent_command_edits_the_workspace_and_its_diff_is_graded(
    request: pytest.FixtureRequest,
) -> None:
    record = _session(request, STAMPEDE)[AGENT]
    run_dir = Path(record["_dir"])
    assert record["passed"] is True, record["message"]
    assert record["submission"]["kind"] == "agent"
    assert record["submission"]["sandboxed"] is True
    assert record["submission"]["rca"] == "rca.txt"
    assert record["submission"]["filesChanged"] == ["catalog/db.py"]
    assert "rca.txt" not in (run_dir / "submission.patch").read_text()
    assert (run_dir / "rca.txt").read_text().startswith("The product cache")
    assert not (run_dir / "diagnosis.json").exists()  # no judge configured: best-effort


def test_known_answers_fail_a_brownout_that_answers_fast_with_other_pages(
    request: pytest.FixtureRequest,
) -> None:
    """A decoy that, under load, serves product pages without their reviews: fast, the
    right status and id, and the service's own tests (one request at a time) pass. It
    passed the oracle, score 0.98, before the load checked known answers; the healthy
    build's answers, learned before the injection, make each such page an invalid
    response, so the load is not delivered."""
    record = _session(request, STAMPEDE)["decoys/brownout-without-reviews.patch"]
    assert record["passed"] is False, record["message"]
    assert record["signals"]["ci_green"]["value"] is True  # the tests cannot see it
    assert record["reason"] in {"LoadNotDelivered", "NewAlerts", "NotCleared"}, record["message"]
    generator = record["load"]["generator"]
    # every id of every route of the mix, learned from the healthy build
    wanted = sum(r.known_answers for r in load_scenario(STAMPEDE).load.mix())
    assert wanted == 600  # two routes of 300 ids (scenario.toml)
    assert generator["known_answers"] == wanted
    # How it fails varies with the machine: in one measured run its made-up pages were
    # invalid (LoadNotDelivered); in another, on a busier machine, it never caught up with
    # its backlog (NotCleared, 3425 timeouts, no page answered in time to be judged).
    # tests/integration/test_load_generator.py proves the check itself deterministically.
    outcomes = generator["outcomes"]
    if record["reason"] == "LoadNotDelivered":
        assert outcomes["invalid"] + outcomes["timeout"] + outcomes["http_error"] > 0, generator
