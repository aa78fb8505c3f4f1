"""A scenario's dependencies in a cluster: Redis and PostgreSQL (``dependencies``) and the
upstream services its service calls (``[[service.upstreams]]``), each a Deployment and a
Service in the Incident's namespace, owned by the Incident (the garbage collector removes
them with it), and the environment that points the target's container at them:
``REDIS_URL``, ``POSTGRESQL_URL``, each upstream's ``url_env`` and the scenario's own
``[service] env`` with its placeholders filled, as the local runtime sets them.

PostgreSQL's state per case is the local runtime's (runtime/postgres.py): a Job
(render_prepare_job) creates the database ``prepared`` and runs the scenario's
``prepare``, if any, into it with the healthy image, once; every case then gets a
database of its own cloned from it (``CREATE DATABASE case<n> TEMPLATE prepared``) before
its baseline is rolled out, and the patched build of that case uses the same one; so
nothing a graded case wrote (a migration, an index) reaches the next. Redis is emptied
(FLUSHALL) at the same point, as the local runtime's fresh_state does: a page a fixed
build cached never answers for the next case's regressed one. Both are one Job per case
(render_case_state_job), made once: the patched build finds it done.

Pure: manifests and Deployment edits as dicts. Images are hack/images.sh's:
``<prefix>redis:7``, ``<prefix>postgresql:15`` and ``<prefix><upstream>:healthy``
(OperatorConfig.image).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from sreforge.api.scenario import Scenario, UpstreamSpec
from sreforge.runtime.kube.config import (
    INCIDENT_LABEL,
    MANAGED,
    ROLE_LABEL,
    SCENARIO_LABEL,
    OperatorConfig,
)
from sreforge.runtime.kube.render import (
    child_name,
    container_security,
    owner_reference,
    pod_security,
    target_container,
)

REDIS_PORT = 6379
REDIS_TAG = "7"
POSTGRESQL_PORT = 5432
POSTGRESQL_TAG = "15"
POSTGRESQL_ENV = "POSTGRESQL_URL"
POSTGRESQL_DATA = "/var/lib/sreforge-pg"  # hack/images/postgresql.Dockerfile's PGDATA parent
POSTGRESQL_BIN = "/usr/local/lib/pgbin"  # the image's server and client programs
PREPARED_DATABASE = "prepared"  # what every case's database is cloned from
PREPARE_TIMEOUT_SECONDS = 600
#: What a pod's command and env mean by the scenario's placeholders (hack/images.sh's
#: POD: the image's CMD is filled the same way); the URLs come from the dependencies.
POD_PLACEHOLDERS = {"host": "0.0.0.0", "port": "8080", "data_dir": "/tmp"}
UPSTREAM_PORT = 8080
DEPENDENCY_UID = 10001  # the images' own non-root user (hack/images, substrate Dockerfiles)
REDIS_ENV = "REDIS_URL"

#: A container env entry (``{"name": ..., "value": ...}`` or ``valueFrom``), or None: absent.
EnvEntry = dict[str, Any] | None


@dataclass(frozen=True)
class Dependency:
    """One dependency of an Incident: its objects' name, what it is, and where it answers."""

    name: str  # of its Deployment and Service
    kind: str  # "redis", "postgresql" or the upstream's name
    env: str  # the target's environment variable that names it
    host: str  # its Service's name in the cluster's DNS
    url: str


def _role(kind: str) -> str:
    return f"dependency-{kind}"


def case_database(case: int) -> str:
    """The database of the Incident's case `case` (0: the first baseline's)."""
    return f"case{case}"


def dependencies(
    incident: dict[str, Any], scenario: Scenario, database: str = case_database(0)
) -> list[Dependency]:
    """The scenario's dependencies for this Incident (in its namespace), in start order;
    PostgreSQL's URL names `database`."""
    name = incident["metadata"]["name"]
    ns = incident["metadata"]["namespace"]
    svc = scenario.service
    out = []
    if "redis" in svc.dependencies:
        obj = child_name(name, "redis")
        host = f"{obj}.{ns}.svc"
        out.append(Dependency(obj, "redis", REDIS_ENV, host, f"redis://{host}:{REDIS_PORT}/0"))
    if "postgresql" in svc.dependencies:
        obj = child_name(name, "postgresql")
        host = f"{obj}.{ns}.svc"
        url = f"postgresql://postgres@{host}:{POSTGRESQL_PORT}/{database}"
        out.append(Dependency(obj, "postgresql", POSTGRESQL_ENV, host, url))
    for up in svc.upstreams:
        obj = child_name(name, up.name)
        host = f"{obj}.{ns}.svc"
        out.append(Dependency(obj, up.name, up.url_env, host, f"http://{host}:{UPSTREAM_PORT}"))
    return out


def fill(value: str, urls: dict[str, str]) -> str:
    """A scenario's placeholders in a pod: {host}, {port}, {data_dir} (POD_PLACEHOLDERS),
    {redis_url} and {postgresql_url} from `urls` (REDIS_URL, POSTGRESQL_URL)."""
    given = {
        **POD_PLACEHOLDERS,
        "redis_url": urls.get(REDIS_ENV, ""),
        "postgresql_url": urls.get(POSTGRESQL_ENV, ""),
    }
    for key, text in given.items():
        value = value.replace(f"{{{key}}}", text)
    return value


def service_env(scenario: Scenario, urls: dict[str, str]) -> dict[str, str]:
    """The dependencies' URLs and the scenario's own `[service] env`, filled."""
    return {**urls, **{k: fill(v, urls) for k, v in scenario.service.env.items()}}


def target_env(
    incident: dict[str, Any], scenario: Scenario, database: str = case_database(0)
) -> dict[str, str]:
    """What the target's container gets while the Incident runs: each dependency's URL and
    the scenario's own environment (service_env); PostgreSQL's names `database`."""
    deps = dependencies(incident, scenario, database)
    return service_env(scenario, {d.env: d.url for d in deps})


def pod_command(argv: list[str], urls: dict[str, str] | None = None) -> list[str]:
    """The scenario's command (or prepare) as a pod runs it (fill)."""
    return [fill(a, urls or {}) for a in argv]


def _meta(dep: Dependency, incident: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": dep.name,
        "namespace": incident["metadata"]["namespace"],
        "labels": _labels(dep, incident),
        "ownerReferences": [owner_reference(incident)],
    }


def _labels(dep: Dependency, incident: dict[str, Any]) -> dict[str, str]:
    return {
        **MANAGED,
        INCIDENT_LABEL: incident["metadata"]["name"],
        ROLE_LABEL: _role(dep.kind),
    }


def _deployment(
    dep: Dependency, incident: dict[str, Any], box: dict[str, Any], annotations: dict[str, str]
) -> dict[str, Any]:
    selector = _labels(dep, incident)
    pod_labels = {**selector, SCENARIO_LABEL: incident["spec"]["scenario"], "app": dep.kind}
    box = {
        **box,
        "imagePullPolicy": "IfNotPresent",
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(dep, incident),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": pod_security(DEPENDENCY_UID),
                    "containers": [box],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


def _service(dep: Dependency, incident: dict[str, Any], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(dep, incident),
        "spec": {
            "selector": _labels(dep, incident),
            "ports": [{"name": "main", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _redis_box(cfg: OperatorConfig) -> dict[str, Any]:
    # the image's own command (hack/images/redis.Dockerfile): no persistence, port 6379
    return {
        "name": "redis",
        "image": cfg.image("redis", REDIS_TAG),
        "ports": [{"name": "main", "containerPort": REDIS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
    }


def postgresql_container(cfg: OperatorConfig) -> dict[str, Any]:
    # the image's own command: initdb into the emptyDir at POSTGRESQL_DATA, then the server
    return {
        "name": "postgresql",
        "image": cfg.image("postgresql", POSTGRESQL_TAG),
        "ports": [{"name": "main", "containerPort": POSTGRESQL_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": POSTGRESQL_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
    }


def needs_prepare(scenario: Scenario) -> bool:
    """Whether the Incident prepares its own data: a database (its `prepared` one, filled
    by the scenario's prepare if it has one; a scenario without a database prepares into
    its image, as substrate/catalog does)."""
    return "postgresql" in scenario.service.dependencies


def prepare_job_name(incident: str) -> str:
    return child_name(incident, "prepare")


def prepare_container(
    scenario: Scenario, cfg: OperatorConfig, env: dict[str, str]
) -> dict[str, Any]:
    """The scenario's `prepare` in its healthy image, in the tree (cfg.source_dir), with
    `env` (the service's), a writable /tmp (the volume `tmp`) and its log as its
    termination message."""
    return {
        "name": "prepare",
        "image": cfg.image(scenario.service.name, "healthy"),
        "imagePullPolicy": "IfNotPresent",
        "workingDir": cfg.source_dir,
        "command": pod_command(scenario.service.prepare, env),
        "env": [{"name": k, "value": v} for k, v in {"HOME": "/tmp", **env}.items()],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def case_state_job_name(incident: str, case: int) -> str:
    return child_name(incident, "state", str(case))


def needs_case_state(scenario: Scenario) -> bool:
    """Whether each case needs its fresh state made first (render_case_state_job)."""
    return bool({"postgresql", "redis"} & set(scenario.service.dependencies))


def _createdb(
    cfg: OperatorConfig, host: str, database: str, template: str | None
) -> dict[str, Any]:
    """A container of the PostgreSQL image that creates `database` (from `template`) on
    `host`, or finds it made already (a resumed operator runs it again)."""
    args = f"-h {host} -U postgres"
    clone = f" -T {template}" if template else ""
    exists = (
        f"{POSTGRESQL_BIN}/psql {args} -d postgres -tAc "
        f"\"select 1 from pg_database where datname = '{database}'\" | grep -qx 1"
    )
    script = f"{exists} || {POSTGRESQL_BIN}/createdb {args}{clone} {database}"
    return _shell_box(f"createdb-{database}", cfg.image("postgresql", POSTGRESQL_TAG), script)


def _shell_box(name: str, image: str, script: str) -> dict[str, Any]:
    """A harness Job's container running `script` with sh in `image`, locked down, its
    log as its termination message."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def _harness_job(
    incident: dict[str, Any],
    name: str,
    role: str,
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    labels = {**MANAGED, INCIDENT_LABEL: incident["metadata"]["name"], ROLE_LABEL: role}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": incident["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(incident)],
        },
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": PREPARE_TIMEOUT_SECONDS,
            "template": {
                "metadata": {"labels": {**labels, SCENARIO_LABEL: incident["spec"]["scenario"]}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": pod_security(),
                    **({"initContainers": init} if init else {}),
                    "containers": containers,
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


def render_prepare_job(
    incident: dict[str, Any], scenario: Scenario, cfg: OperatorConfig
) -> dict[str, Any]:
    """The data preparation as a Job: the `prepared` database created, then the scenario's
    `prepare` (if any) in its healthy image (the tree in cfg.source_dir) with the target's
    environment naming it. Owned by the Incident; the harness's (its failure is a harness
    fault)."""
    db = next(d for d in dependencies(incident, scenario) if d.kind == "postgresql")
    make = _createdb(cfg, db.host, PREPARED_DATABASE, None)
    name = prepare_job_name(incident["metadata"]["name"])
    if not scenario.service.prepare:
        return _harness_job(incident, name, "prepare", [make])
    env = target_env(incident, scenario, PREPARED_DATABASE)
    return _harness_job(
        incident, name, "prepare", [prepare_container(scenario, cfg, env)], init=[make]
    )


def _flushall(cfg: OperatorConfig, host: str) -> dict[str, Any]:
    """A container of the Redis image that empties the Incident's Redis (redis-cli says
    OK; anything else fails the Job). The server as one host:port URL, as every other
    address a pod of the run is given (the kubelet stand-in of tests/standin maps those)."""
    script = f'test "$(redis-cli -u redis://{host}:{REDIS_PORT} FLUSHALL)" = OK'
    return _shell_box("redis-flushall", cfg.image("redis", REDIS_TAG), script)


def render_case_state_job(
    incident: dict[str, Any], scenario: Scenario, cfg: OperatorConfig, case: int
) -> dict[str, Any]:
    """The Job that gives case `case` fresh state: its database cloned from the prepared
    one, and Redis emptied, whichever of the two the scenario depends on
    (needs_case_state)."""
    name = case_state_job_name(incident["metadata"]["name"], case)
    boxes = []
    for dep in dependencies(incident, scenario):
        if dep.kind == "postgresql":
            boxes.append(_createdb(cfg, dep.host, case_database(case), PREPARED_DATABASE))
        elif dep.kind == "redis":
            boxes.append(_flushall(cfg, dep.host))
    return _harness_job(incident, name, "case-state", boxes)


def upstream_container(up: UpstreamSpec, cfg: OperatorConfig) -> dict[str, Any]:
    """An upstream's container: its healthy image, its command, its scenario's env."""
    env = {"HOST": "0.0.0.0", "PORT": str(UPSTREAM_PORT), "DATA_DIR": "/tmp", **up.env}
    return {
        "name": up.name,
        "image": cfg.image(up.name, "healthy"),
        "command": list(up.command),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "main", "containerPort": UPSTREAM_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": up.health_path, "port": UPSTREAM_PORT},
            "periodSeconds": 2,
        },
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
    }


def render_dependencies(
    incident: dict[str, Any], scenario: Scenario, cfg: OperatorConfig
) -> list[dict[str, Any]]:
    """Each dependency's Deployment then its Service, owned by the Incident. Upstreams are
    scraped as `job=<name>` (their pods' `app`), as locally."""
    ups = {u.name: u for u in scenario.service.upstreams}
    out: list[dict[str, Any]] = []
    for dep in dependencies(incident, scenario):
        if dep.kind == "redis":
            out.append(_deployment(dep, incident, _redis_box(cfg), {}))
            out.append(_service(dep, incident, REDIS_PORT))
            continue
        if dep.kind == "postgresql":
            out.append(_with_data(_deployment(dep, incident, postgresql_container(cfg), {})))
            out.append(_service(dep, incident, POSTGRESQL_PORT))
            continue
        scrape = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(UPSTREAM_PORT),
            "prometheus.io/path": "/metrics",
        }
        out.append(_deployment(dep, incident, upstream_container(ups[dep.kind], cfg), scrape))
        out.append(_service(dep, incident, UPSTREAM_PORT))
    return out


def _with_data(deployment: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL's data directory: an emptyDir (the database starts empty, as locally)."""
    spec = deployment["spec"]["template"]["spec"]
    spec["volumes"].append({"name": "data", "emptyDir": {"sizeLimit": "2Gi"}})
    spec["containers"][0]["volumeMounts"].append({"name": "data", "mountPath": POSTGRESQL_DATA})
    return deployment


def env_entries(deployment: dict[str, Any], service: str, names: list[str]) -> dict[str, EnvEntry]:
    """The target container's current entries of `names` (None: not set): what to give back
    when the Incident is deleted."""
    box = target_container(deployment, service)
    have = {e["name"]: e for e in box.get("env") or []}
    return {n: copy.deepcopy(have.get(n)) for n in names}


def with_env(deployment: dict[str, Any], service: str, env: dict[str, EnvEntry]) -> dict[str, Any]:
    """The Deployment with the target container's `env` entries set (None: removed): an
    existing entry replaced where it is, a new one appended; the input is not changed."""
    d = copy.deepcopy(deployment)
    main = target_container(d, service)["name"]
    for box in d["spec"]["template"]["spec"]["containers"]:
        if box["name"] != main:
            continue
        kept = []
        for e in box.get("env") or []:  # in place: given back, the list is as it was
            if e["name"] not in env:
                kept.append(e)
            elif env[e["name"]] is not None:
                kept.append(copy.deepcopy(env[e["name"]]))
        have = {e["name"] for e in kept}
        kept += [copy.deepcopy(v) for k, v in env.items() if v is not None and k not in have]
        if kept:
            box["env"] = kept
        else:
            box.pop("env", None)
    return d


def as_entries(values: dict[str, str]) -> dict[str, EnvEntry]:
    """Plain values as env entries."""
    return {k: {"name": k, "value": v} for k, v in values.items()}
