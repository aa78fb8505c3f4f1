"""The chart's bundled Prometheus loads the scenarios' own alert rules, not a drifted copy.

Helm reads only files inside the chart, so charts/sreforge/files/rules/<scenario>.yml is a
copy of scenarios/<scenario>/rules.yml: one per scenario, byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sreforge.scenarios import discover

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "charts" / "sreforge" / "files" / "rules"


def test_every_scenario_has_its_rules_bundled_in_the_chart() -> None:
    scenarios = {s.name: s.rules_path for s in discover(REPO / "scenarios") if "kube" in s.runtimes}
    bundled = {p.stem: p for p in BUNDLED.glob("*.yml")}
    assert len(scenarios) >= 6
    assert sorted(bundled) == sorted(scenarios), "bundle = one file per scenario, no strays"
    for name, source in scenarios.items():
        assert bundled[name].read_bytes() == source.read_bytes(), (
            f"{bundled[name]} differs from {source}; copy it: cp {source} {bundled[name]}"
        )


def test_the_bundled_prometheus_loads_every_bundled_scenario_by_default() -> None:
    """Incidents of any bundled scenario share the chart's Prometheus unless told otherwise:
    the default prometheus.scenarios lists every file in files/rules/."""
    values = yaml.safe_load((REPO / "charts" / "sreforge" / "values.yaml").read_text())
    assert values["prometheus"]["scenarios"] == sorted(p.stem for p in BUNDLED.glob("*.yml"))
    assert "scenario" not in values["prometheus"]  # replaced by the list; the chart refuses it
