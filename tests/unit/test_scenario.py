"""Scenario loading: the real catalogue validates; broken ones say file, field and problem."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sreforge.api import ScenarioError, discover, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def test_every_scenario_in_the_catalogue_loads() -> None:
    scenarios = discover(SCENARIOS)
    assert [s.name for s in scenarios] == sorted(
        p.parent.name for p in SCENARIOS.glob("*/scenario.toml")
    )
    for s in scenarios:
        assert s.fixes(), f"{s.name} has no fixes"
        assert s.decoys(), f"{s.name} has no decoys"
        assert (ROOT / s.service.source).is_dir()


def copy_scenario(tmp_path: Path) -> Path:
    dest = tmp_path / "s"
    shutil.copytree(SCENARIOS / "latency-cache-stampede", dest)
    return dest


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        (
            "pass_threshold = 0.85",
            "pass_threshold = 1.5",
            "verify.pass_threshold",
            "less than or equal to 1",
        ),
        ("ci_green = 0.25", "ci_green = 0.5", "verify.weights", "sum to 1.0"),
        ("rate = 50 ", "rate = -3 ", "load.rate", "greater than or equal to 1"),
        ('family = "latency"', 'family = "vibes"', "family", "Input should be"),
        ("id_range = [1, 300]", "id_range = [300, 1]", "load", "low <= high"),
        (
            'target_alert = "CatalogLatencyHigh"',
            'target_alert = "no spaces allowed"',
            "target_alert",
            "pattern",
        ),
    ],
)
def test_invalid_scenario_names_file_field_problem(
    tmp_path: Path, old: str, new: str, field: str, problem: str
) -> None:
    d = copy_scenario(tmp_path)
    toml = d / "scenario.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(text.replace(old, new))
    with pytest.raises(ScenarioError) as err:
        load_scenario(d)
    msg = str(err.value)
    assert str(toml) in msg
    assert field in msg
    assert problem in msg


def test_unknown_field_and_bad_toml_and_missing_file(tmp_path: Path) -> None:
    d = copy_scenario(tmp_path)
    toml = d / "scenario.toml"
    toml.write_text(toml.read_text() + "\nsurprise = 1\n")
    with pytest.raises(ScenarioError, match="surprise: Extra inputs are not permitted"):
        load_scenario(d)
    toml.write_text("name = [")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(d)
    toml.unlink()
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(d)


def test_missing_root_cause_is_named(tmp_path: Path) -> None:
    d = copy_scenario(tmp_path)
    (d / "root_cause.md").unlink()
    with pytest.raises(ScenarioError, match=r"root_cause\.md is missing"):
        load_scenario(d)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
@pytest.mark.parametrize(
    "scenario", sorted(p.parent.name for p in SCENARIOS.glob("*/rules_test.yml"))
)
def test_alert_rules_pass_promtool(scenario: str) -> None:
    proc = subprocess.run(
        ["promtool", "test", "rules", "rules_test.yml"],
        cwd=SCENARIOS / scenario,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
