"""RELIABILITY.md's table: faults and hostile input, every figure counted from a test run.

Runs the reliability test selections with `--junitxml` and SREFORGE_RELIABILITY_LOG set;
each case (a hypothesis example, an apiserver request, a fault run) logs its class, whether
it survived (every assertion held) and the data it lost as measured (tests/
reliability_cases.py). Tests that log no cases count as one case each, from the JUnit XML.
Writes the `## Results` section of RELIABILITY.md.

    python benchmarks/reliability.py            # everything, ~20 min (graded faults, exploits)
    python benchmarks/reliability.py --no-faults   # input, security and apiserver only, ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmd import write_section

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Results"
PYTEST = ".venv/bin/python -m pytest -p no:cacheprovider"

# (selection, is it a graded fault run)
SELECTIONS = [
    ("tests/unit/test_hostile_input.py", False),
    ("tests/integration/test_agent_view.py", False),
    ("tests/integration/test_agent_sandbox.py", False),
    ("tests/integration/test_substrate_confinement.py", False),
    ("tests/unit/test_scenario_confinement.py", False),
    ("tests/integration/kube/test_crd_refusals.py", False),
    # tests that predate this table and log no cases: counted from the JUnit XML
    (
        "tests/integration/kube/test_install.py::test_agent_role_grants_submissions_and_nothing_else",
        False,
    ),
    ("tests/unit/test_load_k6.py", False),
    ("tests/unit/test_ci_gate.py", False),
    ("tests/integration/test_faults.py", True),
    ("tests/integration/test_confinement_exploits.py", True),  # five graded exploit decoys
    ("tests/integration/test_soak.py", True),  # two decoys that give way in the soak
    # the operator against a real control plane (kwok, and the pod stand-in for real pods)
    ("tests/integration/kube/test_operator.py", True),
    ("tests/integration/kube/test_operator_graded.py", True),
]
# classes of tests without their own case log, by test-name fragment
JUNIT_CLASSES = {
    "test_agent_role_grants_submissions_and_nothing_else": (
        "security: agent Role (kubectl auth can-i, real apiserver)"
    ),
    "test_k6_job_mounts_the_script_and_is_locked_down": (
        "security: load Job manifests non-root, read-only root, no escalation, caps dropped"
    ),
    "test_generator_job_runs_the_builtin_generator": (
        "security: load Job manifests non-root, read-only root, no escalation, caps dropped"
    ),
    "test_unsafe_patches_are_rejected": "patch: CI gate unit cases (test_ci_gate.py)",
    "test_killed_operator_resumes_the_same_run": (
        "fault: operator SIGKILLed and restarted (after injection; mid-verification)"
    ),
    "test_graded_submissions": (
        "fault: operator SIGKILLed and restarted at every phase (failpoints) and mid-verification"
    ),
    "test_submissions_wait_queued_before_the_hand_off": (
        "input: Submissions while another is graded or before the hand-off wait (Queued)"
    ),
    "test_submission_for_unknown_incident_is_refused": (
        "input: Submission for an unknown or finished Incident gets a condition"
    ),
    "test_fire_timeout_finishes_and_refuses_late_submissions": (
        "input: Submission for an unknown or finished Incident gets a condition"
    ),
    "test_bad_patch_is_red_ci_with_the_reason": "patch: refused through the operator (red CI)",
    "test_operator_recovers_when_the_control_plane_restarts_mid_run": (
        "fault: kube-apiserver or etcd restarted mid-run (operator reconnects, one verdict)"
    ),
    "test_deleting_the_incident_collects_its_children": (
        "input: Incident deleted mid-run: children collected, image restored"
    ),
}
NOT_YET_RUN: list[str] = []


def run_selection(selection: str, tmp: Path, i: int) -> tuple[Path, Path, int]:
    junit = tmp / f"junit-{i}.xml"
    log = tmp / f"cases-{i}.jsonl"
    argv = [
        str(ROOT / ".venv" / "bin" / "python"),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={junit}",
        selection,
    ]
    proc = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, "SREFORGE_RELIABILITY_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:])
    return junit, log, proc.returncode


def junit_cases(junit: Path) -> list[tuple[str, str, bool]]:
    """(file::name, name, passed) of every test case that ran (skips are not passes)."""
    if not junit.exists():
        return []
    out = []
    for tc in ET.parse(junit).getroot().iter("testcase"):
        if tc.find("skipped") is not None:
            continue
        failed = tc.find("failure") is not None or tc.find("error") is not None
        file = tc.get("classname", "").replace(".", "/") + ".py"
        out.append((f"{file}::{tc.get('name', '')}", tc.get("name", ""), not failed))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-faults", action="store_true", help="skip the graded fault runs")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    tried: dict[str, int] = defaultdict(int)
    survived: dict[str, int] = defaultdict(int)
    lost: dict[str, int] = {}  # only classes that measure a loss
    command: dict[str, str] = {}
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sreforge-reliability-") as tmp:
        for i, (selection, fault) in enumerate(SELECTIONS):
            if fault and args.no_faults:
                skipped.append(selection)
                continue
            print(f"running {selection}")
            junit, log, _rc = run_selection(selection, Path(tmp), i)
            logged_tests = set()
            if log.exists():
                for line in log.read_text(encoding="utf-8").splitlines():
                    e = json.loads(line)
                    cls = e["class"]
                    tried[cls] += 1
                    survived[cls] += int(e["survived"])
                    if e["lost"] is not None:
                        lost[cls] = lost.get(cls, 0) + int(e["lost"])
                    logged_tests.add(e["test"])
                    command.setdefault(cls, f"{PYTEST} '{e['test']}'")
            for nodeid, name, passed in junit_cases(junit):
                base = nodeid.split("[")[0]
                if base in logged_tests:
                    continue
                cls = next((c for frag, c in JUNIT_CLASSES.items() if frag in name), None)
                if cls is None:
                    continue
                tried[cls] += 1
                survived[cls] += int(passed)
                frags = " or ".join(f for f, c in JUNIT_CLASSES.items() if c == cls)
                command.setdefault(cls, f"{PYTEST} {base.split('::')[0]} -k '{frags}'")
    rows = [
        "| fault or input class | cases tried | survived | data lost | reproduce |",
        "|---|---|---|---|---|",
    ]
    for cls in sorted(tried):
        shown = lost.get(cls, "n/a")
        rows.append(f"| {cls} | {tried[cls]} | {survived[cls]} | {shown} | `{command[cls]}` |")
    for cls in NOT_YET_RUN:
        rows.append(f"| {cls} | not yet run | - | - | no test yet |")
    for selection in skipped:
        rows.append(
            f"| {selection} | not run this time (--no-faults) | - | - | `{PYTEST} {selection}` |"
        )
    total_t, total_s, total_l = sum(tried.values()), sum(survived.values()), sum(lost.values())
    body = "\n".join(
        [
            "Generated by `.venv/bin/python benchmarks/reliability.py"
            + (" --no-faults" if args.no_faults else "")
            + f"`: {total_t} cases, {total_s} survived, {total_l} data lost.",
            "Data lost is measured where a class writes something: the pristine tree (patches), "
            "record.json (fault runs), stored objects (apiserver); n/a where nothing is written.",
            "",
            *rows,
        ]
    )
    print(body)
    if not args.no_write:
        write_section(ROOT / "RELIABILITY.md", HEADING, body)
    return 0 if total_t == total_s and total_l == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
