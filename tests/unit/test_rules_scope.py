"""Each scenario's rules read only their own scenario's series on a shared Prometheus.

The chart's Prometheus loads every bundled scenario's rules, and several alert names repeat
across scenarios (CatalogLoadDropped in four): without a scenario matcher one scenario's
rules fire on another's Incidents. Every selector of every rule carries
``scenario=~"<its scenario>|"`` (series of no scenario, as in local runs, still match), and
promtool shows it: each scenario's own rules_test.yml, re-run with every input series
labelled with another scenario, fires nothing; labelled with its own, it gives the same
alerts as written (the rules aggregate the label away, so alerts do not carry it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.scenario_rules import (
    BUNDLED,
    SCENARIOS_DIR,
    matchers,
    relabelled_test,
    rule_exprs,
    scenario_matcher,
    selectors,
    with_label,
    write_relabelled_test,
)


def test_selectors_are_found_in_promql_as_written() -> None:
    expr = """
      histogram_quantile(0.95, sum by (namespace, le) (rate(a_bucket{job="x",p="}{"}[10s])))
        > 0.25
      or sum(rate(b_total[1m] offset 5m)) by (incident) / on (namespace) group_left (pod)
        max without (le) ({__name__="c", q=~"a|b"}) and bool up # d{e="f"}
      unless label_replace(d:rec{l!="1"}, "x", "$1", "y", "(.*)") > Inf
    """
    assert selectors(expr) == [
        'a_bucket{job="x",p="}{"}',
        "b_total",
        '{__name__="c", q=~"a|b"}',
        "up",
        'd:rec{l!="1"}',
    ]
    assert matchers('a{job="x",scenario=~"s|"}') == [
        ("job", "=", '"x"'),
        ("scenario", "=~", '"s|"'),
    ]
    assert matchers("b_total") == []


def test_every_selector_of_every_rule_carries_its_scenarios_matcher() -> None:
    """Every rule of every scenario (recording rules too), so rules added later are held
    to it: one ``scenario=~"<name>|"`` matcher in each selector."""
    assert len(BUNDLED) >= 6
    checked = 0
    for scenario in BUNDLED:
        wanted = scenario_matcher(scenario)
        label, op, value = "scenario", "=~", f'"{scenario}|"'
        assert f"{label}{op}{value}" == wanted
        for rule, expr in rule_exprs(SCENARIOS_DIR / scenario / "rules.yml"):
            found = selectors(expr)
            assert found, f"{scenario}: {rule} selects nothing?"
            for sel in found:
                checked += 1
                own = [m for m in matchers(sel) if m[0] == label]
                assert own == [(label, op, value)], (
                    f"{scenario}: rule {rule}: selector {sel} must carry {wanted} (and no "
                    "other scenario matcher), or on a shared Prometheus it reads other "
                    "scenarios' series"
                )
    assert checked >= 30


def test_an_input_series_gets_one_more_label() -> None:
    assert with_label('a{job="x"}', "scenario", "s") == 'a{job="x",scenario="s"}'
    assert with_label("a", "scenario", "s") == 'a{scenario="s"}'
    assert with_label("a{}", "scenario", "s") == 'a{scenario="s"}'


def test_relabelled_test_expects_nothing_of_another_scenario() -> None:
    own, other = "latency-cache-stampede", "errors-connection-pool-leak"
    original = yaml.safe_load((SCENARIOS_DIR / own / "rules_test.yml").read_text())
    test = relabelled_test(own, [own, other])
    assert len(test["tests"]) == 2 * len(original["tests"])
    mine, theirs = test["tests"][0], test["tests"][len(original["tests"])]
    assert mine["alert_rule_test"] == original["tests"][0]["alert_rule_test"]
    assert all('scenario="latency-cache-stampede"}' in s["series"] for s in mine["input_series"])
    assert all(f'scenario="{other}"}}' in s["series"] for s in theirs["input_series"])
    fired = [t for t in theirs["alert_rule_test"] if t["exp_alerts"]]
    assert fired == []
    # every alert of the rules, at every time the original looks
    assert {t["alertname"] for t in theirs["alert_rule_test"]} == {
        "CatalogLatencyHigh",
        "CatalogErrorRateHigh",
        "CatalogLoadDropped",
        "CatalogRouteLatencyHigh",
        "CatalogRouteErrorsHigh",
        "CatalogProbeFailing",
    }
    assert {t["eval_time"] for t in theirs["alert_rule_test"]} == {"3s", "20s"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
@pytest.mark.parametrize("labelled", ["itself", "another"])
@pytest.mark.parametrize("scenario", BUNDLED)
def test_rules_fire_only_on_their_own_scenarios_series(
    scenario: str, labelled: str, tmp_path: Path
) -> None:
    """promtool (Debian's, as local runs use; test_install.py runs the chart's)."""
    # any other scenario's name: the matcher is an anchored regex (and the test above holds
    # every selector to it); the next one, whose alert names often repeat this one's
    other = BUNDLED[(BUNDLED.index(scenario) + 1) % len(BUNDLED)]
    labels = [scenario if labelled == "itself" else other]
    path = write_relabelled_test(scenario, labels, tmp_path)
    proc = subprocess.run(
        ["promtool", "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    what = (
        "its own series labelled with its scenario must give the alerts of rules_test.yml"
        if labelled == "itself"
        else f"series of {other} must fire none of its alerts"
    )
    assert proc.returncode == 0, f"{scenario}: {what}\n{proc.stdout}{proc.stderr}"
