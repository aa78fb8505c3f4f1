"""A scenario validated on a cluster, as a user runs it: the healthy service deployed in a
namespace of its own, the scenario's Incident, the empty patch then the first fix as
Submissions to the operator installed there, each graded by it; the rows SCENARIOS.md
shows (`sreforge scenarios validate --runtime kube`, tests/integration/node).

The cluster must run the operator and a Prometheus with the scenario's rules (the chart
with `prometheus.enabled`), and have the scenario's images (hack/images.sh).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from sreforge import catalogue
from sreforge.api.resources import (
    DAY_SECONDS,
    GROUP,
    INCIDENT_PLURAL,
    SUBMISSION_PLURAL,
    VERSION,
)
from sreforge.api.scenario import Scenario, UpstreamSpec
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.runtime.kube.dependencies import (
    POSTGRESQL_DATA,
    POSTGRESQL_ENV,
    POSTGRESQL_PORT,
    UPSTREAM_PORT,
    pod_command,
    postgresql_container,
    prepare_container,
    service_env,
    upstream_container,
)
from sreforge.runtime.kube.render import container_security, pod_security

SERVICE_PORT = 8080
INCIDENT = "validate"
#: Where the bundled incident.yaml files expect the service (docs/kubernetes.md).
SHIPPED_NAMESPACE = "sreforge-demo"
#: Retries of the user's prepare Job: its database may not listen yet when it starts.
PREPARE_RETRIES = 4
#: How SCENARIOS.md names the runtime of these rows (their sections' headings).
RUNTIME = "on Kubernetes (operator, real pods)"


def healthy_target(scenario: Scenario, ns: str, cfg: OperatorConfig) -> list[dict[str, Any]]:
    """The scenario's service, healthy, as a user deploys it: a Deployment (scraped,
    readiness on its health path, hardened, an emptyDir /tmp) and a Service of its name.
    A service on PostgreSQL gets the user's own database, prepared once by a Job (a seed
    need not be idempotent), before the Deployment; a fetched third-party service, the
    scenario's command. In creation order: validate_scenario waits for each Deployment's
    rollout and each Job's completion before the next object."""
    svc = scenario.service
    labels = {"app": svc.name}
    # the user's own upstreams and database (the Incident points the service at its own)
    upstreams = [obj for up in svc.upstreams for obj in _user_upstream(up, ns, cfg)]
    urls = {up.url_env: f"http://{up.name}.{ns}.svc:{UPSTREAM_PORT}" for up in svc.upstreams}
    if "postgresql" in svc.dependencies:
        db = f"{svc.name}-postgresql"
        upstreams += _user_postgresql(db, ns, cfg)
        urls[POSTGRESQL_ENV] = f"postgresql://postgres@{db}.{ns}.svc:{POSTGRESQL_PORT}/postgres"
    values = service_env(scenario, urls)
    env = [{"name": k, "value": v} for k, v in values.items()]
    if svc.prepare and "postgresql" in svc.dependencies:  # else: nothing to run
        upstreams.append(_user_prepare(scenario, ns, cfg, values))
    fetched = (scenario.source_path(scenario.directory.parents[1]) / "source.toml").is_file()
    box = {
        "name": svc.name,
        "image": cfg.image(svc.name, "healthy"),
        "imagePullPolicy": "IfNotPresent",
        **({"command": pod_command(svc.command, values)} if fetched else {}),
        "ports": [{"name": "http", "containerPort": SERVICE_PORT}],
        "readinessProbe": {
            "httpGet": {"path": svc.health_path, "port": "http"},
            "periodSeconds": 2,
        },
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        **({"env": env} if env else {}),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": svc.name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(SERVICE_PORT),
                        "prometheus.io/path": svc.metrics_path,
                    },
                },
                "spec": {
                    "securityContext": pod_security(),
                    "containers": [box],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": svc.name, "namespace": ns},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http"}],
        },
    }
    return [*upstreams, deployment, service]


def shipped_namespace(scenario: Scenario) -> str:
    """The namespace the scenario's own incident.yaml names (where a user who applies it
    as shipped has deployed the service), else SHIPPED_NAMESPACE."""
    path = scenario.directory / "incident.yaml"
    if not path.is_file():
        return SHIPPED_NAMESPACE
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return str((doc.get("metadata") or {}).get("namespace") or SHIPPED_NAMESPACE)


def _user_prepare(
    scenario: Scenario, ns: str, cfg: OperatorConfig, env: dict[str, str]
) -> dict[str, Any]:
    """The user's data preparation: the scenario's prepare, once, as a Job. Applied with
    everything else at once (`sreforge scenarios target | kubectl apply -f -`), its first
    pods may start before the database listens: they fail before the seed writes anything,
    and the Job's backoff retries them."""
    box = prepare_container(scenario, cfg, env)
    svc = scenario.service
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{svc.name}-prepare", "namespace": ns},
        "spec": {
            "backoffLimit": PREPARE_RETRIES,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": pod_security(),
                    "containers": [box],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                }
            },
        },
    }


def _user_postgresql(name: str, ns: str, cfg: OperatorConfig) -> list[dict[str, Any]]:
    """The user's own PostgreSQL (the operator's recipe for an Incident's), empty at start."""
    box = {
        **postgresql_container(cfg),
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [{"name": "data", "mountPath": POSTGRESQL_DATA}],
    }
    return _user_workload(name, ns, box, POSTGRESQL_PORT, ["data"])


def _user_upstream(up: UpstreamSpec, ns: str, cfg: OperatorConfig) -> list[dict[str, Any]]:
    return _user_workload(up.name, ns, upstream_container(up, cfg), UPSTREAM_PORT)


def _user_workload(
    name: str, ns: str, box: dict[str, Any], port: int, volumes: list[str] | None = None
) -> list[dict[str, Any]]:
    """A Deployment of one hardened container (an emptyDir /tmp and `volumes`) and its
    Service on `port`, labelled `app: <name>`."""
    labels = {"app": name}
    box = {
        **box,
        "securityContext": container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *box.get("volumeMounts", [])],
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": pod_security(),
                        "containers": [box],
                        "volumes": [{"name": v, "emptyDir": {}} for v in ["tmp", *(volumes or [])]],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "selector": labels,
                "ports": [{"name": "main", "port": port, "targetPort": port}],
            },
        },
    ]


#: The longest validation waits for one Submission's verdict.
CASE_WAIT_SECONDS = 900


def fire_wait_seconds(scenario: Scenario) -> int:
    """The longest validation waits for the alert to fire: after the injection, or again
    after a verdict before the next case (the scenario's fire timeout and 5 minutes)."""
    return scenario.verify.fire_timeout_seconds + 300


def load_seconds(scenario: Scenario, cases: int, control: int = 0) -> int:
    """How long the validation Incident's load must last: as long as validation may wait on
    it, the control window, then every case graded on the one Incident (its verdict, then
    the alert firing again before the next), within the longest load an Incident takes.
    The scenario's own duration (30 minutes) would end the load under a run of a dozen
    cases, and every case after that would be Inconclusive: graded blind."""
    rearm = fire_wait_seconds(scenario)
    wanted = control + rearm + cases * (CASE_WAIT_SECONDS + rearm)
    return min(DAY_SECONDS, max(scenario.load.duration_seconds, wanted))


def incident_body(
    scenario: Scenario,
    ns: str,
    prometheus_url: str,
    sustain_seconds: int | None,
    load_duration_seconds: int | None = None,
    *,
    control_seconds: int | None = None,
) -> dict[str, Any]:
    verify: dict[str, Any] = {}
    if sustain_seconds is not None:
        verify["sustainSeconds"] = sustain_seconds
    load = {"durationSeconds": load_duration_seconds} if load_duration_seconds else None
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Incident",
        "metadata": {"name": INCIDENT, "namespace": ns},
        "spec": {
            "scenario": scenario.name,
            "targetDeployment": scenario.service.name,
            "prometheusURL": prometheus_url,
            "loadRunner": "builtin",
            **({"load": load} if load else {}),
            **({"verify": verify} if verify else {}),
            **({"controlSeconds": control_seconds} if control_seconds else {}),
        },
    }


def submission_body(ns: str, name: str, patch: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Submission",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"incidentRef": {"name": INCIDENT}, "patch": {"inline": patch}},
    }


def record_of(
    status: dict[str, Any],
    fired_seconds: float | None,
    control: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A graded Submission's status as the run record fields catalogue.row reads, with
    the Incident's control window (its status.control) for the case that shows it."""
    signals = status.get("signals") or {}
    failing = [n for n, s in signals.items() if float(s.get("credit", 0.0)) < 1.0]
    stamps: dict[str, str] = {}
    if fired_seconds is not None:  # row() wants two instants: the delay is what it shows
        stamps = {"injected": "1970-01-01T00:00:00+00:00"}
        stamps["fired"] = datetime.fromtimestamp(fired_seconds, tz=UTC).isoformat()
    return {
        "passed": bool(status.get("passed")),
        "reason": status.get("reason"),
        "score": status.get("score"),
        "message": _verdict_message(status)[:200],
        "failingSignals": failing,
        "timestamps": stamps,
        # the soak drawn for it, published with the verdict (none if never rolled out)
        "soak": status.get("soak"),
        "control": control,
    }


def _verdict_message(status: dict[str, Any]) -> str:
    """What the verdict says (its Verified condition's message), else the CI's feedback."""
    for c in status.get("conditions") or []:
        if c.get("type") == "Verified" and c.get("message"):
            return str(c["message"])
    return str(status.get("ciFeedback") or "")


def kube_cases(
    scenario: Scenario, *, fast: bool = True, control: bool = True
) -> list[catalogue.Case]:
    """The empty patch first, then (unless `fast`) every decoy, then the first fix (fast)
    or every fix: what fails is graded on one Incident, and a passing fix finishes it, so
    the case after a fix starts on a new Incident (validate_scenario). With `control`, the
    empty patch's row carries the first Incident's control window (judged quiet or not)."""
    all_cases = catalogue.cases(scenario)
    empty = next(c for c in all_cases if c.patch is None)
    empty = dataclasses.replace(empty, control=control)
    fixes = [catalogue.Case(scenario, c.patch, "pass") for c in all_cases if c.expected == "pass"]
    if fast:
        return [empty, fixes[0]]
    decoys = [c for c in all_cases if c.expected == "fail" and c.patch is not None]
    return [empty, *decoys, *fixes]


class Cluster:
    """The calls validation makes, on the operator's client (Kube)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def create_namespace(self, ns: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        try:
            self.kube.core.create_namespace(body)
        except self.kube._exc as exc:
            if self.kube._status(exc) != 409:
                raise

    def create_incident(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        self.kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, INCIDENT_PLURAL, body)

    def create_submission(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        self.kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, ns, SUBMISSION_PLURAL, body
        )

    def delete_incident(self, ns: str, name: str) -> None:
        self.kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, INCIDENT_PLURAL, name)


def _wait(what: str, probe: Callable[[], Any], timeout: float, interval: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def validate_scenario(
    kube: Kube,
    scenario: Scenario,
    cfg: OperatorConfig,
    prometheus_url: str,
    ns: str,
    *,
    sustain_seconds: int | None = 30,
    fast: bool = True,
    control_seconds: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Deploy the healthy service in `ns`, create the Incident, submit the cases of
    kube_cases (fast: the empty patch and the first fix) one after another, and return
    their rows (catalogue.row) once the operator graded them. The first Incident holds
    its load on the healthy build for a control window before the injection
    (`control_seconds`; None: as long as a fix is held, 0: none), which the empty
    patch's row shows. A case that finds the Incident finished (a fix passed it, or a
    harness fault ended it) gets a new one, without a control window: the old one
    deleted (its finalizer gives the Deployment its healthy image back) and made again,
    its alert firing again, before the Submission."""
    cluster = Cluster(kube)
    cluster.create_namespace(ns)
    for obj in healthy_target(scenario, ns, cfg):
        kube.create(obj)
        if obj["kind"] == "Deployment":
            kube.wait_rollout(ns, obj["metadata"]["name"], 180, threading.Event())
        if obj["kind"] == "Job":
            ok, details = kube.wait_job(ns, obj["metadata"]["name"], 600, threading.Event())
            if not ok:
                raise RuntimeError(f"Job {ns}/{obj['metadata']['name']} failed: {details}")
    t0 = time.monotonic()
    if control_seconds is None:
        control_seconds = catalogue.held_seconds(scenario, sustain_seconds)
    cases = kube_cases(scenario, fast=fast, control=control_seconds > 0)
    length = load_seconds(scenario, len(cases), control_seconds)
    body = incident_body(scenario, ns, prometheus_url, sustain_seconds, length)
    fire_timeout = fire_wait_seconds(scenario)
    first = incident_body(
        scenario, ns, prometheus_url, sustain_seconds, length, control_seconds=control_seconds
    )
    if control_seconds:
        say(f"{scenario.name}: a {control_seconds}s control window on the healthy build first")
    fired = _start_incident(kube, first, fire_timeout + control_seconds, say)
    control = ((kube.get_incident(ns, INCIDENT) or {}).get("status") or {}).get("control")
    if control_seconds:
        say(f"{scenario.name}: control window: {control}")
    rows = []
    for i, case in enumerate(cases):
        if i > 0 and _settled(kube, ns, fire_timeout) in TERMINAL:
            say(f"{scenario.name}: the Incident finished; a new one for {case.label}")
            cluster.delete_incident(ns, INCIDENT)
            _wait(
                "the finished Incident to be deleted",
                lambda: not kube.get_incident(ns, INCIDENT),
                300,
            )
            _start_incident(kube, body, fire_timeout, say)
        name = f"case-{i}-{'empty' if case.patch is None else case.patch.stem}"[:63].rstrip("-.")
        patch = "" if case.patch is None else case.patch.read_text(encoding="utf-8")
        started = time.monotonic()
        cluster.create_submission(submission_body(ns, name, patch))

        def graded(name: str = name) -> dict[str, Any] | None:
            sub = kube.get_submission(ns, name) or {}
            status = sub.get("status") or {}
            return status if status.get("passed") is not None else None

        status = _wait(f"Submission {name}", graded, CASE_WAIT_SECONDS)
        seconds = time.monotonic() - (t0 if i == 0 else started)
        record = record_of(status, fired if i == 0 else None, control if i == 0 else None)
        row = catalogue.row(case, record, seconds)
        say(f"{scenario.name}: {case.label}: {row['got']} ({row['reason']}, {row['score']})")
        rows.append(row)
    if not incident_finished(kube.get_incident(ns, INCIDENT)):
        # its load was given hours (load_seconds): it stops with the Incident
        say(f"{scenario.name}: deleting the unfinished Incident; its load stops with it")
        cluster.delete_incident(ns, INCIDENT)
    return rows


#: An Incident's phases once it takes no more Submissions.
TERMINAL = ("Succeeded", "Failed")


def incident_finished(incident: dict[str, Any] | None) -> bool:
    """Whether the Incident takes no more Submissions (its phase is terminal)."""
    return ((incident or {}).get("status") or {}).get("phase") in TERMINAL


def _settled(kube: Kube, ns: str, timeout: float) -> str:
    """The Incident's phase once the last verdict has settled: finished, or awaiting the
    next Submission (its baseline restored, its alert firing again)."""

    def phase() -> str | None:
        got = ((kube.get_incident(ns, INCIDENT) or {}).get("status") or {}).get("phase")
        return got if got in (*TERMINAL, "AwaitingSubmission") else None

    return str(_wait("the Incident to settle after its verdict", phase, timeout))


def _start_incident(
    kube: Kube, body: dict[str, Any], timeout: float, say: Callable[[str], None]
) -> float | None:
    """Create the Incident and wait until it awaits a Submission; the seconds from its
    injection to its alert firing, as the operator recorded them."""
    ns, name = body["metadata"]["namespace"], body["spec"]["scenario"]
    Cluster(kube).create_incident(body)
    say(f"{name}: Incident created in {ns}")

    def phase() -> str | None:
        inc = kube.get_incident(ns, INCIDENT) or {}
        got = (inc.get("status") or {}).get("phase")
        if incident_finished(inc):
            raise RuntimeError(f"Incident ended {got} before a Submission: {inc.get('status')}")
        return got if got == "AwaitingSubmission" else None

    _wait(f"{name}'s alert to fire", phase, timeout)
    state = ((kube.get_incident(ns, INCIDENT) or {}).get("status") or {}).get("loop") or {}
    st = state.get("state") or {}
    fired = (
        round(st["fired_at"] - st["injected_at"], 1)
        if st.get("fired_at") and st.get("injected_at")
        else None
    )
    say(f"{name}: alert firing {fired}s after the injection")
    return fired


def write_rows(path: Path, rows: list[dict[str, Any]], command: str) -> None:
    """Each scenario's rows in its own section of `path`, named by the runtime."""
    catalogue.write_markdown(path, rows, command, catalogue.when(), runtime=RUNTIME)
