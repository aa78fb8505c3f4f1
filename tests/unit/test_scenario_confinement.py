"""A scenario whose service needs what the confinement forbids is refused when it is loaded.

Every substrate process runs confined (sreforge.runtime.confine): as nobody, without
capabilities, seeing the OS, its own tree and its data directory. A scenario declares
what else its service needs (`reads`, `capabilities`, an absolute `command`); a need the
confinement cannot meet is refused with the scenario's file, the field, the path and the
reason, before anything starts, never at the first deploy.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tests.reliability_cases import case

from sreforge.api.scenario import CONFINED_HOST_PATHS
from sreforge.runtime import sandbox
from sreforge.scenarios import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[2]
STAMPEDE = ROOT / "scenarios" / "latency-cache-stampede"
RETRY = ROOT / "scenarios" / "configuration-retry-storm"


def _copy(tmp_path: Path, scenario: Path, old: str, new: str) -> Path:
    dest = tmp_path / scenario.name
    shutil.copytree(scenario, dest)
    toml = dest / "scenario.toml"
    text = toml.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    toml.write_text(text.replace(old, new), encoding="utf-8")
    return dest


SERVICE = 'name = "catalog"\n'
REFUSED = [
    # (what is declared, the field named, the path or name named, the reason)
    (f'{SERVICE}reads = ["/var/lib/geoip/city.mmdb"]\n', "service.reads.0",
     "/var/lib/geoip/city.mmdb", "not readable where the service runs"),
    (f'{SERVICE}reads = ["/root/.aws/credentials"]\n', "service.reads.0",
     "/root/.aws/credentials", "not readable where the service runs"),
    (f'{SERVICE}reads = ["/usr/share/zoneinfo", "/home/ops/certs"]\n', "service.reads.1",
     "/home/ops/certs", "not readable where the service runs"),
    (f'{SERVICE}reads = ["/usr/../root/x"]\n', "service.reads.0", "/usr/../root/x",
     "absolute, normalised"),
    (f'{SERVICE}reads = ["data/extra.db"]\n', "service.reads.0", "data/extra.db",
     "absolute, normalised"),
    (f'{SERVICE}capabilities = ["NET_BIND_SERVICE"]\n', "service.capabilities.0",
     "NET_BIND_SERVICE", "without capabilities"),
    (f'{SERVICE}capabilities = ["SYS_PTRACE"]\n', "service.capabilities.0", "SYS_PTRACE",
     "without capabilities"),
]  # fmt: skip
COMMAND = 'command = ["python", "-m", "catalog"]\n'
SOURCE = 'source = "substrate/catalog"\n'
REFUSED_LINES = [
    (COMMAND, 'command = ["/opt/catalog/bin/serve"]\n', "service.command", "/opt/catalog/bin/serve",
     "not visible where the service runs"),
    (SOURCE, 'source = "scenarios/latency-cache-stampede"\n', "service.source",
     "scenarios/latency-cache-stampede", "holds the scenarios"),
    (SOURCE, 'source = "."\n', "service.source", ".", "holds the scenarios"),
    (SOURCE, 'source = "../elsewhere"\n', "service.source", "../elsewhere",
     "inside the repository"),
]  # fmt: skip


@pytest.mark.parametrize(("declared", "field", "named", "reason"), REFUSED)
def test_a_need_the_confinement_forbids_is_refused_naming_scenario_path_and_reason(
    tmp_path: Path, declared: str, field: str, named: str, reason: str
) -> None:
    with case("scenario.toml: a need the confinement forbids (path, capability, command)"):
        scenario = _copy(tmp_path, STAMPEDE, SERVICE, declared)
        with pytest.raises(ScenarioError) as refused:
            load_scenario(scenario)
        message = str(refused.value)
        assert str(scenario / "scenario.toml") in message
        assert f"{field}:" in message
        assert named in message
        assert reason in message


@pytest.mark.parametrize("refusal", REFUSED_LINES)
def test_a_command_or_tree_outside_the_view_is_refused(
    tmp_path: Path, refusal: tuple[str, str, str, str, str]
) -> None:
    old, new, field, named, reason = refusal
    with case("scenario.toml: a need the confinement forbids (path, capability, command)"):
        scenario = _copy(tmp_path, STAMPEDE, old, new)
        with pytest.raises(ScenarioError) as refused:
            load_scenario(scenario)
        message = str(refused.value)
        assert str(scenario / "scenario.toml") in message
        assert re.search(rf"{re.escape(field)}(\.\d+)?:", message), message
        assert named in message
        assert reason in message


def test_an_upstream_is_held_to_the_same_confinement(tmp_path: Path) -> None:
    with case("scenario.toml: a need the confinement forbids (path, capability, command)"):
        scenario = _copy(
            tmp_path,
            RETRY,
            'url_env = "SUPPLIER_URL"\n',
            'url_env = "SUPPLIER_URL"\nreads = ["/srv/warehouse"]\ncapabilities = ["NET_RAW"]\n',
        )
        with pytest.raises(ScenarioError) as refused:
            load_scenario(scenario)
        message = str(refused.value)
        assert "service.upstreams.0.reads.0:" in message
        assert "/srv/warehouse" in message
        assert "service.upstreams.0.capabilities.0:" in message
        assert "NET_RAW" in message


def test_what_the_os_provides_is_granted_and_the_catalogue_needs_nothing_more(
    tmp_path: Path,
) -> None:
    scenario = _copy(
        tmp_path,
        STAMPEDE,
        SERVICE,
        f'{SERVICE}reads = ["/usr/share/zoneinfo", "/etc/ssl/certs"]\n',
    )
    assert load_scenario(scenario).service.reads == ["/usr/share/zoneinfo", "/etc/ssl/certs"]
    scenario = _copy(tmp_path / "b", STAMPEDE, COMMAND, 'command = ["/usr/bin/python3"]\n')
    assert load_scenario(scenario).service.command == ["/usr/bin/python3"]
    for toml in sorted((ROOT / "scenarios").glob("*/scenario.toml")):
        service = load_scenario(toml.parent).service
        assert (service.reads, service.capabilities) == ([], [])


def test_the_model_knows_what_the_sandbox_shows() -> None:
    shown = {f"/{d}" for d in (*sandbox.SYSTEM_DIRS, *sandbox.SYSTEM_LINKS)}
    assert set(CONFINED_HOST_PATHS) == shown
