"""Every Incident the project ships can fire its alert as shipped.

Each scenario's incident.yaml and every Incident of manifests/examples/ names a scenario
that exists, and a load runner whose series that scenario's rules read: an Incident whose
load no rule reads never sees its alert fire (AlertNeverFired) and its delivered load is
unknown to the oracle. The built-in generator's series are scraped; a k6 Job's are written
to Prometheus by k6's remote-write output and become the generator's names through the
chart's k6 recording rules (sreforge.load.k6series), so a rule reading one of those reads
either runner.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from sreforge.api.resources import IncidentSpec, LoadRunner
from sreforge.load import k6series
from sreforge.load.metrics import LoadMetrics
from sreforge.scenarios import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
MANIFESTS = [
    *sorted(SCENARIOS.glob("*/incident.yaml")),
    *sorted((REPO / "manifests" / "examples").glob("*.yaml")),
]
# k6's Prometheus remote-write output names every metric k6_<metric>
K6_PREFIX = "k6_"
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def builtin_series() -> set[str]:
    """Every series name the built-in generator exports (its own registry, as scraped)."""
    return {s.name for family in LoadMetrics().registry.collect() for s in family.samples}


def k6_recorded() -> set[str]:
    """The series a k6 Job's results become: the k6 recording rules' outputs."""
    groups = k6series.recording_rules()["groups"]
    return {r["record"] for g in groups for r in g["rules"]}


def names_in_rules(rules_file: Path) -> set[str]:
    """Every name in the expressions of `rules_file` (series, functions, labels alike)."""
    rules = yaml.safe_load(rules_file.read_text())
    return {
        n
        for group in rules["groups"]
        for rule in group["rules"]
        for n in _NAME.findall(str(rule["expr"]))
    }


def series_read(runner: str, rules_file: Path) -> set[str]:
    """The series of `runner` that the rules of `rules_file` read."""
    names = names_in_rules(rules_file)
    if runner == "builtin":
        return names & builtin_series()
    if runner == "k6":
        return (names & k6_recorded()) | {n for n in names if n.startswith(K6_PREFIX)}
    raise AssertionError(f"a runner this test does not know: {runner}")


def shipped_incidents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS:
        for i, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            if doc.get("kind") == "Incident":
                found.append((f"{path.relative_to(REPO)}#{i}", doc))
    return found


def test_every_runner_is_known_and_there_are_manifests_to_check() -> None:
    assert set(get_args(LoadRunner)) == {"builtin", "k6"}  # series_read knows each
    where = [w for w, _ in shipped_incidents()]
    assert len(where) >= 7, where
    assert any(w.startswith("manifests/examples/") for w in where), where


@pytest.mark.parametrize(
    ("where", "doc"), [pytest.param(w, d, id=w) for w, d in shipped_incidents()]
)
def test_shipped_incident_names_a_scenario_and_a_runner_its_rules_read(
    where: str, doc: dict[str, Any]
) -> None:
    spec = IncidentSpec.model_validate(doc["spec"])
    scenario_dir = SCENARIOS / spec.scenario
    assert (scenario_dir / "scenario.toml").is_file(), f"{where}: no scenario {spec.scenario}"
    scenario = load_scenario(scenario_dir)
    read = series_read(spec.load_runner, scenario.rules_path)
    assert read, (
        f"{where}: loadRunner {spec.load_runner}: no rule of {scenario.name} reads its series"
    )
    # ... and every generator series the rules name is one it exports (a misspelt name
    # would leave an alert silent)
    load_named = {n for n in names_in_rules(scenario.rules_path) if n.startswith("sreforge_load_")}
    assert load_named <= builtin_series(), load_named - builtin_series()


def _rules(tmp_path: Path, expr: str) -> Path:
    path = tmp_path / "rules.yml"
    rule = {"record": "x:y", "expr": expr}
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    return path


def test_the_check_tells_the_runners_apart(tmp_path: Path) -> None:
    """A rule on k6's own remote-write names reads k6 only; one on a generator series the
    k6 rules do not record (its in-flight gauge) reads the generator only; the shipped
    rules read both (the k6 recording rules give k6 the generator's names)."""
    k6_rules = _rules(tmp_path, "sum(rate(k6_http_reqs_total[10s]))")
    assert series_read("k6", k6_rules) == {"k6_http_reqs_total"}
    assert series_read("builtin", k6_rules) == set()
    gauge_rules = _rules(tmp_path, "max(sreforge_load_in_flight) > 10")
    assert series_read("builtin", gauge_rules) == {"sreforge_load_in_flight"}
    assert series_read("k6", gauge_rules) == set()
    shipped = SCENARIOS / "latency-cache-stampede" / "rules.yml"
    assert "sreforge_load_request_duration_seconds_bucket" in series_read("builtin", shipped)
    assert "sreforge_load_request_duration_seconds_bucket" in series_read("k6", shipped)


def test_every_scenario_reads_load_series_the_k6_rules_record() -> None:
    """Each bundled scenario's rules read at least one series the k6 runner's recording
    rules give it: an Incident of any of them may choose loadRunner k6."""
    for rules in sorted(SCENARIOS.glob("*/rules.yml")):
        assert series_read("k6", rules), f"{rules}: reads no series a k6 Job's results become"
