"""Two runs of different scenarios at once on one machine do not disturb each other.

Each `sreforge run` starts its own Prometheus, service builds, dependencies and load
generator on free loopback ports with its own data directory. Both runs here grade a
reference fix concurrently; both must pass, and neither run's Prometheus may have scraped
anything of the other's (their file_sd targets are disjoint, and neither load generator
aimed at the other's service).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runs import NO_SOAK, ROOT, cli_env

from sreforge.api.scenario import Scenario
from sreforge.scenarios import discover, fixes

pytestmark = [
    pytest.mark.graded,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="needs Debian's prometheus: bash scripts/setup.sh",
    ),
]


def _two_scenarios() -> list[Scenario]:
    catalogue = discover(ROOT / "scenarios")
    first = next(s for s in catalogue if s.name == "latency-cache-stampede")
    other = [s for s in catalogue if s.name != first.name and fixes(s)]
    if not other:
        pytest.skip("needs a second scenario with a reference fix")
    return [first, other[0]]


def _targets(run_dir: Path) -> set[str]:
    found: set[str] = set()
    for f in (run_dir / "prometheus").glob("targets-*.json"):
        for group in json.loads(f.read_text(encoding="utf-8")):
            found.update(group["targets"])
    return found


# slow (~130 s): two whole graded runs side by side; the default suite keeps its 60-minute budget
@pytest.mark.slow
def test_two_scenarios_at_once_both_pass_with_their_own_ports(tmp_path: Path) -> None:
    scenarios = _two_scenarios()
    procs = []
    for s in scenarios:
        runs = tmp_path / s.name
        runs.mkdir()
        log = (tmp_path / f"{s.name}.out").open("w")  # a file, not a pipe: nothing blocks
        argv = [
            sys.executable, "-m", "sreforge.cli", "run", str(s.directory),
            "--fix", str(fixes(s)[0]), "--sustain-seconds", "20",
            "--soak-seconds", NO_SOAK, "--runs-dir", str(runs),
        ]  # fmt: skip
        procs.append(
            (
                s,
                runs,
                subprocess.Popen(
                    argv,
                    cwd=ROOT,
                    env=cli_env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
            )
        )
    results = []
    for s, runs, proc in procs:
        proc.wait(timeout=900)
        out = (tmp_path / f"{s.name}.out").read_text()
        (record_file,) = runs.glob("*/record.json")
        results.append((s, record_file.parent, json.loads(record_file.read_text()), out))
    for s, _, record, out in results:
        assert record["passed"] is True, f"{s.name}: {out}"
        assert record["scenario"]["name"] == s.name
    (_, dir_a, rec_a, _), (_, dir_b, rec_b, _) = results
    targets_a, targets_b = _targets(dir_a), _targets(dir_b)
    assert targets_a
    assert targets_b
    assert not targets_a & targets_b
    assert rec_a["load"]["generator"]["target"] != rec_b["load"]["generator"]["target"]
    # record.json is written before the baseline is restored, so the generator's last target
    # (the patched build) is no longer in the file_sd targets; it must not be the other's.
    assert rec_a["load"]["generator"]["target"].removeprefix("http://") not in targets_b
    assert rec_b["load"]["generator"]["target"].removeprefix("http://") not in targets_a
