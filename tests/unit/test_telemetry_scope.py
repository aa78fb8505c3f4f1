"""Telemetry's scope: the label matchers that keep an Incident's reads to its own series.

The matchers are checked as PromQL by promtool (Debian's prometheus package), which
evaluates them over series of two namespaces; the reads of a real Prometheus shared by
two Incidents are in tests/integration/kube/test_incident_scope.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sreforge.scenarios import discover
from sreforge.telemetry import label_matchers, scoped

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_matchers_are_sorted_equalities_or_one_regex_of_literal_values() -> None:
    assert label_matchers(None) == ""
    assert label_matchers({}) == ""
    assert label_matchers({"namespace": "team-a", "incident": "inc-1"}) == (
        'incident="inc-1",namespace="team-a"'
    )
    # one value given as a list is an equality; duplicates collapse
    assert label_matchers({"namespace": ["team-a", "team-a"]}) == 'namespace="team-a"'
    # several: an alternation in which every value matches literally
    assert label_matchers({"namespace": ["b", "a.x"]}) == 'namespace=~"a\\\\.x|b"'
    assert label_matchers({"incident": 'say "hi"\\'}) == 'incident="say \\"hi\\"\\\\"'


@pytest.mark.parametrize(
    ("scope", "problem"),
    [({"bad-label": "x"}, "not a label name"), ({"namespace": []}, "has no value")],
)
def test_matchers_refuse_what_is_no_matcher(
    scope: dict[str, list[str] | str], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        label_matchers(scope)


def test_scoping_adds_matchers_to_a_plain_selector() -> None:
    m = 'incident="i"'
    assert scoped('up{job="a"}', m) == 'up{job="a",incident="i"}'
    assert scoped('up{job="a",}', m) == 'up{job="a",incident="i"}'
    assert scoped("up", m) == 'up{incident="i"}'
    assert scoped("up{}", m) == 'up{incident="i"}'
    assert scoped('{__name__="up"}', m) == '{__name__="up",incident="i"}'
    assert scoped('up{path="/{id}"}', m) == 'up{path="/{id}",incident="i"}'
    # no scope: the selector as it was, whatever it is (a local run)
    assert scoped("rate(up[1m])", "") == "rate(up[1m])"
    for expr in ("rate(up[1m])", "up[1m]", "sum(up)", "up offset 1m", ""):
        with pytest.raises(ValueError, match="not a plain series selector"):
            scoped(expr, m)


def test_every_scenarios_target_series_can_be_scoped() -> None:
    """The operator scopes `target_series`; a scenario whose selector could not be scoped
    would fail every Incident of it on a cluster."""
    found = discover(SCENARIOS)
    assert len(found) >= 6
    for s in found:
        out = scoped(s.target_series, 'incident="i"')
        assert out.endswith(',incident="i"}') or out.endswith('{incident="i"}'), s.name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_matchers_select_exactly_the_scope_in_promql(tmp_path: Path) -> None:
    """promtool evaluates the matchers: a regex metacharacter in a value matches only
    itself, another namespace or another Incident of the same name is not selected."""
    (tmp_path / "rules.yml").write_text("groups: []\n")
    both = scoped("x", label_matchers({"namespace": ["a.x", "b"], "incident": "inc"}))
    one = scoped("x", label_matchers({"namespace": "b", "incident": "inc"}))
    series = [
        ("a.x", "inc", 1),
        ("b", "inc", 2),
        ("aax", "inc", 4),  # `.` taken as a regex would select it
        ("c", "inc", 8),
        ("a.x", "other", 16),
    ]
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [
                    {"series": f'x{{namespace="{ns}",incident="{inc}"}}', "values": f"{v}x5"}
                    for ns, inc, v in series
                ],
                "promql_expr_test": [
                    {"expr": f"sum({both})", "eval_time": "2s", "exp_samples": [{"value": 3}]},
                    {"expr": f"sum({one})", "eval_time": "2s", "exp_samples": [{"value": 2}]},
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run(
        ["promtool", "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
