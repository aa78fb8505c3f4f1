"""A scenario's Redis, PostgreSQL and upstreams in a cluster
(sreforge.runtime.kube.dependencies): one Deployment and one Service each, in the
Incident's namespace and owned by it, from the images hack/images.sh builds, locked down
like every pod the operator runs; the target's container is pointed at them (REDIS_URL,
POSTGRESQL_URL, each upstream's url_env, the scenario's own env filled) and given its own
entries back when the Incident goes; a scenario's data preparation runs once as a Job
against the Incident's own database."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sreforge.runtime.kube.config import INCIDENT_LABEL, SCENARIO_LABEL, OperatorConfig
from sreforge.runtime.kube.dependencies import (
    as_entries,
    case_database,
    dependencies,
    env_entries,
    needs_case_state,
    needs_prepare,
    pod_command,
    render_case_state_job,
    render_dependencies,
    render_prepare_job,
    target_env,
    with_env,
)
from sreforge.scenarios import load_scenario

REPO = Path(__file__).resolve().parents[2]
CFG = OperatorConfig(image_prefix="reg.local/sreforge/")


def incident(scenario: str, name: str = "inc", ns: str = "apps") -> dict[str, Any]:
    return {
        "apiVersion": "sreforge.dev/v1alpha1",
        "kind": "Incident",
        "metadata": {"name": name, "namespace": ns, "uid": "u-7"},
        "spec": {"scenario": scenario},
    }


def scenario(name: str) -> Any:
    return load_scenario(REPO / "scenarios" / name)


def test_each_scenario_gets_what_its_service_depends_on() -> None:
    names = [p.parent.name for p in sorted((REPO / "scenarios").glob("*/scenario.toml"))]
    found = {n: [(d.kind, d.env) for d in dependencies(incident(n), scenario(n))] for n in names}
    assert found["latency-cache-stampede"] == [("redis", "REDIS_URL")]
    assert found["configuration-retry-storm"] == [("supplier", "SUPPLIER_URL")]
    assert found["resources-unbounded-cache"] == [("supplier", "SUPPLIER_URL")]
    assert found["errors-connection-pool-leak"] == []
    assert found["latency-kinto-credentials-cache"] == [("postgresql", "POSTGRESQL_URL")]
    assert found["saturation-ihatemoney-sync-audit"] == [
        ("postgresql", "POSTGRESQL_URL"),
        ("audit", "BUDGET_AUDIT_URL"),
    ]
    stampede, storm = "latency-cache-stampede", "configuration-retry-storm"
    assert target_env(incident(stampede), scenario(stampede)) == {
        "REDIS_URL": "redis://inc-redis.apps.svc:6379/0"
    }
    assert target_env(incident(storm), scenario(storm)) == {
        "SUPPLIER_URL": "http://inc-supplier.apps.svc:8080"
    }


def _by_kind(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


@pytest.mark.parametrize(
    ("name", "kind", "image", "port"),
    [
        ("latency-cache-stampede", "redis", "reg.local/sreforge/redis:7", 6379),
        ("configuration-retry-storm", "supplier", "reg.local/sreforge/supplier:healthy", 8080),
        ("latency-kinto-credentials-cache", "postgresql", "reg.local/sreforge/postgresql:15", 5432),
    ],
)
def test_rendered_objects_are_owned_locked_down_and_found_by_their_service(
    name: str, kind: str, image: str, port: int
) -> None:
    inc = incident(name)
    objs = _by_kind(render_dependencies(inc, scenario(name), CFG))
    [dep], [svc] = objs["Deployment"], objs["Service"]
    for o in (dep, svc):
        assert o["metadata"]["name"] == f"inc-{kind}"
        assert o["metadata"]["namespace"] == "apps"  # the Incident's
        [owner] = o["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Incident", "inc", "u-7")
        assert owner["controller"] is True
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert labels[INCIDENT_LABEL] == "inc"
    assert labels[SCENARIO_LABEL] == name
    assert labels["app"] == kind  # its scrape job, as locally
    # the Service selects this pod and nothing of another Incident or dependency
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["selector"]["sreforge.dev/role"] == f"dependency-{kind}"
    assert svc["spec"]["ports"][0]["port"] == port
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    [box] = spec["containers"]
    assert box["image"] == image
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    assert box["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in box["volumeMounts"]
    assert box["readinessProbe"]


def test_an_upstream_runs_its_command_with_the_scenarios_settings() -> None:
    s = scenario("configuration-retry-storm")
    [up] = s.service.upstreams
    objs = _by_kind(render_dependencies(incident(s.name), s, CFG))
    [box] = objs["Deployment"][0]["spec"]["template"]["spec"]["containers"]
    assert box["command"] == list(up.command)
    env = {e["name"]: e["value"] for e in box["env"]}
    assert env["PORT"] == "8080"
    assert env["HOST"] == "0.0.0.0"
    assert {k: env[k] for k in up.env} == up.env  # e.g. SUPPLIER_SLOW_EVERY
    assert box["readinessProbe"]["httpGet"]["path"] == up.health_path


def test_the_scenarios_own_env_is_filled_with_the_incidents_database() -> None:
    """KINTO_STORAGE_URL = "{postgresql_url}" names the Incident's PostgreSQL, as locally it
    names the build's database; the command listens on the pod's address."""
    s = scenario("latency-kinto-credentials-cache")
    db = "postgresql://postgres@inc-postgresql.apps.svc:5432/case0"  # the first case's
    assert target_env(incident(s.name), s) == {
        "POSTGRESQL_URL": db,
        "KINTO_STORAGE_URL": db,
        "KINTO_PERMISSION_URL": db,
    }
    assert pod_command(s.service.command)[-2:] == ["http_host=0.0.0.0", "http_port=8080"]
    objs = _by_kind(render_dependencies(incident(s.name), s, CFG))
    [pod] = [d["spec"]["template"]["spec"] for d in objs["Deployment"]]
    [box] = pod["containers"]
    # the database lives in an emptyDir: the root filesystem stays read-only
    data = {m["mountPath"]: m["name"] for m in box["volumeMounts"]}
    assert {v["name"] for v in pod["volumes"]} >= set(data.values())
    assert "/var/lib/sreforge-pg" in data


def test_the_data_is_prepared_once_by_a_job_with_the_targets_env() -> None:
    s = scenario("latency-kinto-credentials-cache")
    assert needs_prepare(s)
    assert not needs_prepare(scenario("latency-cache-stampede"))  # seeded into its image
    job = render_prepare_job(incident(s.name), s, CFG)
    assert job["metadata"]["name"] == "inc-prepare"
    assert job["metadata"]["namespace"] == "apps"
    [owner] = job["metadata"]["ownerReferences"]
    assert owner["uid"] == "u-7"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    # first the `prepared` database is made (or found: a resumed operator runs it again)...
    [make] = pod["initContainers"]
    assert make["image"] == "reg.local/sreforge/postgresql:15"
    script = make["command"][-1]
    assert "createdb -h inc-postgresql.apps.svc -U postgres prepared" in script
    assert script.index("datname = 'prepared'") < script.index("||")
    # ...then the healthy code fills it, told so by the env it would serve with
    [box] = pod["containers"]
    assert box["image"] == "reg.local/sreforge/kinto:healthy"
    assert box["workingDir"] == CFG.source_dir
    assert box["command"] == list(s.service.prepare)
    env = {e["name"]: e["value"] for e in box["env"]}
    assert env["KINTO_STORAGE_URL"].endswith("inc-postgresql.apps.svc:5432/prepared")
    for c in (make, box):
        assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_every_case_gets_its_own_database_cloned_from_the_prepared_one() -> None:
    """As locally (runtime/postgres.py): nothing a graded case wrote reaches the next."""
    s = scenario("errors-kinto-pool-shedding")
    inc = incident(s.name)
    urls = {target_env(inc, s, case_database(n))["KINTO_STORAGE_URL"] for n in range(3)}
    assert len(urls) == 3
    job = render_case_state_job(inc, s, CFG, 2)
    assert job["metadata"]["name"] == "inc-state-2"
    [box] = job["spec"]["template"]["spec"]["containers"]
    assert "createdb -h inc-postgresql.apps.svc -U postgres -T prepared case2" in box["command"][-1]


def test_every_case_starts_on_an_empty_redis() -> None:
    """As locally (Environment.fresh_state): a page a fixed build cached in Redis never
    answers for the next case's regressed build; the Job fails unless Redis says OK."""
    s = scenario("latency-cache-stampede")
    job = render_case_state_job(incident(s.name), s, CFG, 1)
    assert job["metadata"]["name"] == "inc-state-1"
    assert job["spec"]["backoffLimit"] == 1
    [box] = job["spec"]["template"]["spec"]["containers"]
    assert box["image"] == "reg.local/sreforge/redis:7"
    assert (
        box["command"][-1] == 'test "$(redis-cli -u redis://inc-redis.apps.svc:6379 FLUSHALL)" = OK'
    )
    assert box["securityContext"]["readOnlyRootFilesystem"] is True


def test_only_a_scenario_with_state_gets_a_job_per_case() -> None:
    names = [p.parent.name for p in sorted((REPO / "scenarios").glob("*/scenario.toml"))]
    with_state = {n for n in names if needs_case_state(scenario(n))}
    assert "latency-cache-stampede" in with_state  # Redis
    assert "latency-kinto-credentials-cache" in with_state  # PostgreSQL
    assert "errors-connection-pool-leak" not in with_state  # neither
    for n in with_state:
        s = scenario(n)
        kinds = {d.kind for d in dependencies(incident(n), s)} & {"redis", "postgresql"}
        boxes = render_case_state_job(incident(n), s, CFG, 0)["spec"]["template"]["spec"]
        assert len(boxes["containers"]) == len(kinds), n


def test_no_dependencies_no_objects() -> None:
    s = scenario("errors-connection-pool-leak")
    assert render_dependencies(incident(s.name), s, CFG) == []


def _deployment(env: list[dict[str, Any]] | None) -> dict[str, Any]:
    box: dict[str, Any] = {"name": "pricing", "image": "pricing:healthy"}
    if env is not None:
        box["env"] = env
    side = {"name": "sidecar", "image": "x", "env": [{"name": "SUPPLIER_URL", "value": "keep"}]}
    return {"spec": {"template": {"spec": {"containers": [side, box]}}}}


@pytest.mark.parametrize(
    "env",
    [
        None,
        [{"name": "A", "value": "1"}],
        [{"name": "SUPPLIER_URL", "value": "http://users-own:80"}, {"name": "B", "value": "2"}],
        [{"name": "SUPPLIER_URL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
    ],
)
def test_the_target_is_pointed_at_them_and_given_its_own_back(
    env: list[dict[str, Any]] | None,
) -> None:
    s = scenario("configuration-retry-storm")
    original = _deployment(env)
    before = copy.deepcopy(original)
    wanted = as_entries(target_env(incident(s.name), s))
    baseline = env_entries(original, "pricing", list(wanted))
    running = with_env(original, "pricing", wanted)
    assert original == before  # the input is not changed
    side, box = running["spec"]["template"]["spec"]["containers"]
    assert {"name": "SUPPLIER_URL", "value": "http://inc-supplier.apps.svc:8080"} in box["env"]
    assert side["env"] == [{"name": "SUPPLIER_URL", "value": "keep"}]  # only the target's
    # applied twice, the same (the restore compares templates)
    assert with_env(running, "pricing", wanted) == running
    # deleted: exactly what was there before, valueFrom included
    assert with_env(running, "pricing", baseline) == original
