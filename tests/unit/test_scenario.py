"""Scenario loading: the real catalogue validates; broken ones say file, field and problem."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sreforge.api import ScenarioError
from sreforge.api.resources import IncidentSpec
from sreforge.scenarios import decoys, discover, fixes, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def test_every_scenario_in_the_catalogue_loads() -> None:
    scenarios = discover(SCENARIOS)
    assert [s.name for s in scenarios] == sorted(
        p.parent.name for p in SCENARIOS.glob("*/scenario.toml")
    )
    for s in scenarios:
        assert fixes(s), f"{s.name} has no fixes"
        assert decoys(s), f"{s.name} has no decoys"
        assert (ROOT / s.service.source).is_dir()
        for up in s.service.upstreams:
            assert (ROOT / up.source).is_dir(), f"{s.name}: upstream {up.name} has no source"


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
        ("rate = 60 ", "rate = -3 ", "load.rate", "greater than or equal to 1"),
        ('family = "latency"', 'family = "vibes"', "family", "Input should be"),
        ("id_range = [1, 300]", "id_range = [300, 1]", "load", "low <= high"),
        (
            'target_alert = "CatalogLatencyHigh"',
            'target_alert = "no spaces allowed"',
            "target_alert",
            "pattern",
        ),
        (
            'dependencies = ["redis"]',
            'dependencies = ["redis"]\nenv = { DB = "{postgresql_url}" }',
            "service",
            "env: {postgresql_url} needs `postgresql` in dependencies",
        ),
        (
            'dependencies = ["redis"]',
            'dependencies = ["redis"]\nenv = { DB = "{secret}" }',
            "service",
            "env: {secret} is not one of {host}, {port}, {data_dir}, {redis_url}, {postgresql_url}",
        ),
        (
            'dependencies = ["redis"]',
            'dependencies = ["redis"]\nenv = { POSTGRESQL_URL = "x" }',
            "service",
            "are set by the runtime",
        ),
        (
            'dependencies = ["redis"]',
            'dependencies = ["mysql"]',
            "service.dependencies.0",
            "'redis' or 'postgresql'",
        ),
        (
            "known_answers = 300       # every id: each answer is checked against the healthy"
            " build's\n\n[[load.routes]]",
            'known_answers = 300\nbasic_auth = ["user:{id}", "x"]\n\n[[load.routes]]',
            "load.routes.0.basic_auth.0",
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


UPSTREAM = """
[[service.upstreams]]
name = "supplier"
source = "substrate/supplier"
command = ["python", "-m", "supplier"]
url_env = "SUPPLIER_URL"
env = { SUPPLIER_WORKERS = "6" }
"""


def with_upstreams(tmp_path: Path, *tables: str) -> Path:
    """latency-cache-stampede with `[[service.upstreams]]` tables added to its [service]."""
    d = copy_scenario(tmp_path)
    toml = d / "scenario.toml"
    text = toml.read_text()
    assert "\n[load]" in text
    toml.write_text(text.replace("\n[load]", "".join(tables) + "\n[load]", 1))
    return d


def test_upstreams_load_and_redis_still_does(tmp_path: Path) -> None:
    s = load_scenario(with_upstreams(tmp_path, UPSTREAM))
    assert s.service.dependencies == ["redis"]
    (up,) = s.service.upstreams
    assert (up.name, up.url_env, up.health_path) == ("supplier", "SUPPLIER_URL", "/healthz")
    assert up.command == ["python", "-m", "supplier"]
    assert up.env == {"SUPPLIER_WORKERS": "6"}


def test_a_scenario_without_upstreams_has_none() -> None:
    assert load_scenario(SCENARIOS / "latency-cache-stampede").service.upstreams == []


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        ('url_env = "SUPPLIER_URL"', 'url_env = "supplier-url"', "url_env", "pattern"),
        ('url_env = "SUPPLIER_URL"', 'url_env = "PORT"', "service.upstreams.0", "reserved"),
        ('name = "supplier"', 'name = "loadgen"', "service.upstreams.0", "reserved"),
        ('name = "supplier"', 'name = "Supplier!"', "service.upstreams.0.name", "pattern"),
        ('name = "supplier"', 'name = "catalog"', "service", "distinct"),
        ('command = ["python", "-m", "supplier"]', "command = []", "command", "at least 1"),
        ('source = "substrate/supplier"', "", "service.upstreams.0.source", "Field required"),
        ('env = { SUPPLIER_WORKERS = "6" }', "env = { lower = 1 }", "env", "pattern"),
        ('env = { SUPPLIER_WORKERS = "6" }', "health_path = 3", "health_path", "string"),
        ('env = { SUPPLIER_WORKERS = "6" }', "surprise = 1", "surprise", "Extra inputs"),
    ],
)
def test_invalid_upstream_names_file_field_problem(
    tmp_path: Path, old: str, new: str, field: str, problem: str
) -> None:
    assert old in UPSTREAM
    d = with_upstreams(tmp_path, UPSTREAM.replace(old, new))
    with pytest.raises(ScenarioError) as err:
        load_scenario(d)
    msg = str(err.value)
    assert str(d / "scenario.toml") in msg
    assert field in msg
    assert problem in msg


def test_two_upstreams_need_distinct_names_and_url_envs(tmp_path: Path) -> None:
    other = UPSTREAM.replace('name = "supplier"', 'name = "ledger"')
    with pytest.raises(ScenarioError, match=r"service: .*url_env must be distinct.*SUPPLIER_URL"):
        load_scenario(with_upstreams(tmp_path / "a", UPSTREAM, other))
    same_name = UPSTREAM.replace("SUPPLIER_URL", "LEDGER_URL")
    with pytest.raises(ScenarioError, match=r"upstream names must be distinct.*supplier"):
        load_scenario(with_upstreams(tmp_path / "b", UPSTREAM, same_name))
    both = load_scenario(
        with_upstreams(tmp_path / "c", UPSTREAM, other.replace("SUPPLIER_URL", "LEDGER_URL"))
    )
    assert [u.name for u in both.service.upstreams] == ["supplier", "ledger"]


@pytest.mark.parametrize(
    "scenario", sorted(p.parent.name for p in SCENARIOS.glob("*/incident.yaml"))
)
def test_incident_manifest_is_a_valid_incident_of_its_scenario(scenario: str) -> None:
    doc = yaml.safe_load((SCENARIOS / scenario / "incident.yaml").read_text())
    assert doc["apiVersion"] == "sreforge.dev/v1alpha1"
    assert doc["kind"] == "Incident"
    spec = IncidentSpec.model_validate(doc["spec"])
    assert spec.scenario == scenario
    load_scenario(SCENARIOS / scenario)  # and the scenario it names loads


def with_verify_oracles(tmp_path: Path, table: str) -> Path:
    """latency-cache-stampede with a `[verify.oracles]` table after its [verify.weights]."""
    d = copy_scenario(tmp_path)
    toml = d / "scenario.toml"
    text = toml.read_text()
    assert "\n[verify.oracles]" not in text
    toml.write_text(text + "\n[verify.oracles]\n" + table)
    return d


def test_the_oracles_default_to_the_mitigation_alone() -> None:
    for s in discover(SCENARIOS):
        assert s.verify.oracles.model_dump() == {"mitigate": 1.0, "diagnose": 0.0}, s.name


def test_oracle_weights_come_from_verify_oracles(tmp_path: Path) -> None:
    s = load_scenario(with_verify_oracles(tmp_path, "mitigate = 0.8\ndiagnose = 0.2\n"))
    assert (s.verify.oracles.mitigate, s.verify.oracles.diagnose) == (0.8, 0.2)
    assert s.verify.weights.alert_cleared == 0.35  # still the mitigation's own weights


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        ("detect = 0.1\nmitigate = 0.9\n", "verify.oracles.detect", "Extra inputs"),
        ("mitigate = 0.8\n", "verify.oracles", "oracle weights must sum to 1.0, they sum to 0.8"),
        ("mitigate = 1.5\ndiagnose = -0.5\n", "verify.oracles.mitigate", "less than or equal"),
        ("mitigate = 0.0\ndiagnose = 1.0\n", "verify.oracles", "mitigate must weigh more than"),
        ('mitigate = "all"\n', "verify.oracles.mitigate", "valid number"),
    ],
    ids=["unknown-name", "not-summing-to-1", "out-of-range", "no-gate", "not-a-number"],
)
def test_invalid_oracle_weights_name_the_field(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    d = with_verify_oracles(tmp_path, table)
    with pytest.raises(ScenarioError) as err:
        load_scenario(d)
    msg = str(err.value)
    assert f"{d / 'scenario.toml'}: {field}: " in msg
    assert problem in msg
