"""The Kubernetes runtime: all Kubernetes I/O of the operator, and the driver of the loop.

`IncidentRun` drives `sreforge.loop.step` for one Incident the way `runtime.local.LocalRun`
drives it for a local run: the decisions are the loop's and the oracle's, this module only
observes (Prometheus through `Telemetry`, rollouts and Jobs through the API) and acts
(image swap, load Job, CI Job, patch overlay, status writes). The loop's state lives in
the Incident's `status.loop`, so a restarted operator resumes the same run.

Configuration (environment of the operator):

    SREFORGE_SCENARIOS_DIR     scenarios directory (default: the checkout's scenarios/, in
                               the image /opt/sreforge/scenarios)
    SREFORGE_IMAGE_PREFIX      service images are <prefix><service>:healthy|regressed
                               (default "sreforge/")
    SREFORGE_OPERATOR_IMAGE    image of the built-in load generator and the patch init
                               container (default "sreforge/operator:dev")
    SREFORGE_SOURCE_DIR        where a service image holds its source tree (default "/app")
    SREFORGE_PROMETHEUS_URL    Prometheus to read when an Incident sets no prometheusURL

`python -m sreforge.runtime.kube apply-patch TREE PATCH [--protected P ...]` is the entry
point of the init container that lays a Submission's patch over a copy of the image's
source (no image registry needed).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sreforge import judge, loop, oracle
from sreforge.api.observation import CIResult, CIStatus
from sreforge.api.resources import (
    GROUP,
    INCIDENT_PLURAL,
    SUBMISSION_PLURAL,
    VERSION,
    IncidentSpec,
    SubmissionSpec,
)
from sreforge.api.scenario import LoadProfile, Scenario, ScenarioError, VerifySpec, load_scenario
from sreforge.api.verdict import Verdict
from sreforge.errors import SreforgeError
from sreforge.load import k6
from sreforge.loop import Action, Phase, RunState
from sreforge.runtime import ci, failpoint
from sreforge.runtime.local import SAMPLED_PHASES
from sreforge.telemetry import Telemetry

REPO_SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
IMAGE_SCENARIOS = Path("/opt/sreforge/scenarios")  # the root Dockerfile copies them there
MANAGED = {"app.kubernetes.io/managed-by": "sreforge"}
INCIDENT_LABEL = "sreforge.dev/incident"
ROLE_LABEL = "sreforge.dev/role"
OVERLAY_ANNOTATION = "sreforge.dev/overlay"
# Seconds between status writes while nothing but samples changes.
PERSIST_EVERY_SECONDS = 5.0
# Samples kept while waiting for a Submission (the oracle reads only post-redeploy ones).
WAITING_SAMPLES_KEPT = 5
CI_MARGIN_SECONDS = 120
PATCH_KEY = "patch.diff"
TERMINATION_LOG = "/dev/termination-log"
SRC_VOLUME = "sreforge-src"
PATCH_VOLUME = "sreforge-patch"
OVERLAY_SRC = "/sreforge/src"
OVERLAY_PATCH = "/sreforge/patch"


class KubeError(SreforgeError, RuntimeError):
    """A Kubernetes interaction that failed; the message is for a condition or a Fault."""


# ------------------------------------------------------------------ configuration
def default_scenarios_dir() -> Path:
    """The checkout's scenarios/ (editable install), else the image's /opt/sreforge/scenarios
    (a wheel install has no checkout around it), else ./scenarios."""
    for candidate in (REPO_SCENARIOS, IMAGE_SCENARIOS):
        if candidate.is_dir():
            return candidate
    return Path.cwd() / "scenarios"


@dataclass(frozen=True)
class OperatorConfig:
    scenarios_dir: Path = field(default_factory=default_scenarios_dir)
    image_prefix: str = "sreforge/"
    operator_image: str = "sreforge/operator:dev"
    source_dir: str = "/app"
    prometheus_url: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorConfig:
        e = dict(os.environ) if env is None else env
        return cls(
            scenarios_dir=Path(e.get("SREFORGE_SCENARIOS_DIR") or default_scenarios_dir()),
            image_prefix=e.get("SREFORGE_IMAGE_PREFIX", "sreforge/"),
            operator_image=e.get("SREFORGE_OPERATOR_IMAGE") or "sreforge/operator:dev",
            source_dir=e.get("SREFORGE_SOURCE_DIR") or "/app",
            prometheus_url=e.get("SREFORGE_PROMETHEUS_URL") or None,
        )

    def image(self, service: str, variant: str) -> str:
        return f"{self.image_prefix}{service}:{variant}"

    def scenario(self, name: str) -> Scenario:
        return load_scenario(self.scenarios_dir / name)


def now_iso() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def child_name(*parts: str) -> str:
    """A DNS-1123 label from parts, shortened with a hash when it would exceed 63 chars."""
    name = "-".join(parts)
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def set_condition(  # noqa: PLR0917 (the condition's fields, in metav1.Condition order)
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Conditions with `type_` upserted (lastTransitionTime kept unless the status changed)."""
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == type_:
            if c.get("status") != status:
                c["lastTransitionTime"] = now_iso()
            c.update(status=status, reason=reason, message=message[:32_000])
            if generation is not None:
                c["observedGeneration"] = generation
            return out
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32_000],
        "lastTransitionTime": now_iso(),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    out.append(new)
    return out


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def effective_verify(scenario: Scenario, spec: IncidentSpec) -> VerifySpec:
    v = scenario.verify
    o = spec.verify
    if o is None:
        return v
    update: dict[str, Any] = {}
    for name in ("sustain_seconds", "fire_timeout_seconds", "clear_budget_seconds"):
        if getattr(o, name) is not None:
            update[name] = getattr(o, name)
    if o.pass_threshold_percent is not None:
        update["pass_threshold"] = o.pass_threshold_percent / 100
    return v.model_copy(update=update)


def effective_load(scenario: Scenario, spec: IncidentSpec) -> LoadProfile:
    o = spec.load
    if o is None:
        return scenario.load
    update = {
        k: getattr(o, k)
        for k in ("rate", "duration_seconds", "max_in_flight")
        if getattr(o, k) is not None
    }
    return scenario.load.model_copy(update=update)


# ------------------------------------------------------------------ pod specs
def container_security() -> dict[str, Any]:
    """Non-root, read-only root, no escalation, no capabilities, seccomp RuntimeDefault
    (the load Jobs' own, from sreforge.load.k6: one definition for every pod we run)."""
    return k6._container_security()


def pod_security(uid: int = 10001) -> dict[str, Any]:
    return k6._pod_security(uid)


def owner_reference(incident: dict[str, Any]) -> dict[str, Any]:
    meta = incident["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Incident",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels_for(incident: str, role: str) -> dict[str, str]:
    return {**MANAGED, INCIDENT_LABEL: incident, ROLE_LABEL: role}


def _adopt(obj: dict[str, Any], incident: dict[str, Any], role: str) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {}).update(labels_for(incident["metadata"]["name"], role))
    meta["ownerReferences"] = [owner_reference(incident)]
    return obj


def patch_configmap(
    name: str, namespace: str, patch: str, incident: dict[str, Any] | None, role: str
) -> dict[str, Any]:
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED)},
        "data": {PATCH_KEY: patch},
    }
    if incident is not None:
        _adopt(cm, incident, role)
    return cm


def render_load(
    incident: dict[str, Any],
    profile: LoadProfile,
    target_url: str,
    runner: str,
    cfg: OperatorConfig,
) -> list[dict[str, Any]]:
    """The load's objects: [Job] for the built-in generator, [ConfigMap, Job] for k6.

    The pods carry `app: loadgen` and Prometheus scrape annotations; the built-in generator
    listens on $PORT when the node sets it (contract.md item 3), else on 9100.
    """
    name = incident["metadata"]["name"]
    ns = incident["metadata"]["namespace"]
    job_name = child_name(name, "load")
    objs: list[dict[str, Any]] = []
    if runner == "k6":
        cm_name = child_name(name, "k6-script")
        objs.append(
            _adopt(k6.render_k6_configmap(cm_name, ns, profile, target_url), incident, "load")
        )
        job = k6.render_k6_job(job_name, ns, profile, target_url, cm_name)
    else:
        job = k6.render_generator_job(job_name, ns, profile, target_url, cfg.operator_image)
        box = job["spec"]["template"]["spec"]["containers"][0]
        argv = list(box["command"])
        i = argv.index("--listen")
        argv[i + 1] = "LISTEN"
        shell = shlex.join(argv).replace(
            "LISTEN", f'"${{HOST:-0.0.0.0}}:${{PORT:-{k6.METRICS_PORT}}}"'
        )
        box["command"] = ["sh", "-c", "exec " + shell]
        job["spec"]["template"]["metadata"]["annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(k6.METRICS_PORT),
            "prometheus.io/path": "/metrics",
        }
    _adopt(job, incident, "load")
    tmpl_labels = job["spec"]["template"]["metadata"].setdefault("labels", {})
    tmpl_labels.update(labels_for(name, "load"))
    tmpl_labels["app"] = "loadgen"
    objs.append(job)
    return objs


def overlay_init_containers(  # noqa: PLR0917 (private to this module's renderers)
    prefix: str,
    cfg: OperatorConfig,
    image: str,
    src: str,
    mounts: list[dict[str, Any]],
    patch_file: str,
    patch_mount: dict[str, Any],
    protected: list[str],
    env: list[dict[str, str]],
) -> list[dict[str, Any]]:
    """Two init containers: copy the service image's source to `src` (an emptyDir), then
    apply the patch there with the operator image (vetted again: protected paths)."""
    flags: list[str] = []
    for p in protected:
        flags += ["--protected", p]
    apply = ["python", "-m", "sreforge.runtime.kube", "apply-patch", src, patch_file, *flags]
    return [
        {
            "name": f"{prefix}source",
            "image": image,
            "command": ["cp", "-R", f"{cfg.source_dir}/.", src],
            "securityContext": container_security(),
            "volumeMounts": mounts,
        },
        {
            "name": f"{prefix}patch",
            "image": cfg.operator_image,
            "command": apply,
            "env": env,
            "securityContext": container_security(),
            "volumeMounts": [*mounts, patch_mount],
        },
    ]


def render_ci_job(
    incident: dict[str, Any],
    submission: str,
    scenario: Scenario,
    cfg: OperatorConfig,
    patch_cm: str,
) -> dict[str, Any]:
    """The CI gate as a Job: copy the regressed image's source into an emptyDir, lay the
    patch over it (operator image), run the pristine tests (substrate image). The result
    is the exit code; the test output's tail is the termination message."""
    name = incident["metadata"]["name"]
    svc = scenario.service
    regressed = cfg.image(svc.name, "regressed")
    tests = (
        shlex.join(["python", "-m", "compileall", "-q", "."])
        + " && "
        + shlex.join(svc.test_command)
    )
    script = (
        f'{{ {tests}; }} >"$CI_LOG" 2>&1; rc=$?; '
        'tail -c 3500 "$CI_LOG" >"$TERMINATION_LOG"; exit $rc'
    )
    mounts = [{"name": "work", "mountPath": "/work"}, {"name": "tmp", "mountPath": "/tmp"}]
    common_env = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "TERMINATION_LOG", "value": TERMINATION_LOG},
    ]
    pod = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "initContainers": overlay_init_containers(
            "",
            cfg,
            regressed,
            "/work/src",
            mounts,
            f"/patch/{PATCH_KEY}",
            {"name": "patch", "mountPath": "/patch"},
            scenario.protected,
            common_env,
        ),
        "containers": [
            {
                "name": "test",
                "image": regressed,
                "workingDir": "/work/src",
                "command": ["sh", "-c", script],
                "env": [*common_env, {"name": "CI_LOG", "value": "/tmp/ci.log"}],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": container_security(),
                "volumeMounts": mounts,
            }
        ],
        "volumes": [
            {"name": "work", "emptyDir": {"sizeLimit": "512Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": "patch", "configMap": {"name": patch_cm}},
        ],
    }
    job_labels = labels_for(name, "ci")
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": child_name(name, "ci", submission),
            "namespace": incident["metadata"]["namespace"],
            "labels": {**job_labels, "sreforge.dev/submission": submission[:63]},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": svc.test_timeout_seconds + CI_MARGIN_SECONDS,
            "template": {"metadata": {"labels": job_labels}, "spec": pod},
        },
    }
    return _adopt(job, incident, "ci")


def target_container(dep: dict[str, Any], service: str) -> dict[str, Any]:
    boxes = dep["spec"]["template"]["spec"]["containers"]
    for c in boxes:
        if c.get("name") == service:
            return dict(c)
    return dict(boxes[0])


def overlay_template(  # noqa: PLR0917 (private to this module's driver)
    dep: dict[str, Any],
    service: str,
    cfg: OperatorConfig,
    patch_cm: str | None,
    baseline_workdir: str | None,
    submission: str | None,
    protected: list[str],
) -> dict[str, Any]:
    """The Deployment with the regressed image and, when `patch_cm` is set, the patch overlay:
    init containers copy the image's source into an emptyDir and apply the patch there, the
    main container runs from it. With `patch_cm=None` it is the baseline (no overlay)."""
    d = copy.deepcopy(dep)
    tmpl = d["spec"]["template"]
    spec = tmpl["spec"]
    regressed = cfg.image(service, "regressed")
    main = target_container(d, service)["name"]
    spec["initContainers"] = [
        c for c in spec.get("initContainers") or [] if not c["name"].startswith("sreforge-")
    ]
    spec["volumes"] = [
        v for v in spec.get("volumes") or [] if v["name"] not in (SRC_VOLUME, PATCH_VOLUME)
    ]
    annotations = tmpl.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(OVERLAY_ANNOTATION, None)
    for c in spec["containers"]:
        if c["name"] != main:
            continue
        c["image"] = regressed
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m["name"] != SRC_VOLUME]
        if baseline_workdir is None:
            c.pop("workingDir", None)
        else:
            c["workingDir"] = baseline_workdir
        if patch_cm is not None:
            c["workingDir"] = OVERLAY_SRC
            c["volumeMounts"].append({"name": SRC_VOLUME, "mountPath": "/sreforge/src"})
    if not spec["initContainers"]:
        spec.pop("initContainers")
    if patch_cm is None:
        if not spec["volumes"]:
            spec.pop("volumes")
        return d
    annotations[OVERLAY_ANNOTATION] = submission or patch_cm
    src_mount = {"name": SRC_VOLUME, "mountPath": "/sreforge/src"}
    spec["volumes"] += [
        {"name": SRC_VOLUME, "emptyDir": {"sizeLimit": "512Mi"}},
        {"name": PATCH_VOLUME, "configMap": {"name": patch_cm}},
    ]
    spec.setdefault("initContainers", []).extend(
        overlay_init_containers(
            "sreforge-",
            cfg,
            regressed,
            OVERLAY_SRC,
            [src_mount],
            f"{OVERLAY_PATCH}/{PATCH_KEY}",
            {"name": PATCH_VOLUME, "mountPath": OVERLAY_PATCH},
            protected,
            [{"name": "HOME", "value": "/tmp"}],
        )
    )
    return d


# ------------------------------------------------------------------ the API
class Kube:
    """The operator's Kubernetes client: kubeconfig ($KUBECONFIG) or in-cluster config."""

    def __init__(self) -> None:
        from kubernetes import client, config  # noqa: PLC0415

        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        # Any: this module passes and reads plain dicts, not the client's model classes
        self.api: Any = client.ApiClient()
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)
        self._exc = client.exceptions.ApiException

    def default_namespace(self) -> str:
        from kubernetes import config  # noqa: PLC0415

        try:
            _, ctx = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
            return str((ctx or {}).get("context", {}).get("namespace") or "default")
        except config.ConfigException:
            return "default"

    # --- generic
    def _status(self, exc: Exception) -> int:
        return int(getattr(exc, "status", 0) or 0)

    def _plain(self, obj: Any) -> dict[str, Any]:
        return dict(self.api.sanitize_for_serialization(obj))

    def get_incident(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, INCIDENT_PLURAL, name)
            )
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise

    def get_submission(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, ns, SUBMISSION_PLURAL, name
                )
            )
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise

    def list_submissions(self, ns: str) -> list[dict[str, Any]]:
        res = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, SUBMISSION_PLURAL)
        return list(res.get("items") or [])

    def create_submission(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, SUBMISSION_PLURAL, body)
        )

    def patch_status(self, plural: str, ns: str, name: str, status: dict[str, Any]) -> None:
        """A merge patch of `status` (lists such as conditions are replaced whole)."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, plural, name, {"status": status}
            )
        except self._exc as exc:
            if self._status(exc) != 404:  # deleted meanwhile: nothing to write to
                raise

    def update_conditions(
        self,
        plural: str,
        ns: str,
        name: str,
        updates: list[tuple[str, str, str, str]],
        extra: dict[str, Any] | None = None,
    ) -> None:
        getter = self.get_incident if plural == INCIDENT_PLURAL else self.get_submission
        obj = getter(ns, name)
        if obj is None:
            return
        conds = list((obj.get("status") or {}).get("conditions") or [])
        gen = obj["metadata"].get("generation")
        for type_, status, reason, message in updates:
            conds = set_condition(conds, type_, status, reason, message, gen)
        self.patch_status(
            plural, ns, name, {**(extra or {}), "conditions": conds, "observedGeneration": gen}
        )

    def create(self, obj: dict[str, Any]) -> None:
        """Create a Job or ConfigMap; an existing one of the same name is kept (idempotent)."""
        ns = obj["metadata"]["namespace"]
        try:
            if obj["kind"] == "Job":
                self.batch.create_namespaced_job(ns, obj)
            elif obj["kind"] == "ConfigMap":
                self.core.create_namespaced_config_map(ns, obj)
            else:
                raise KubeError(f"cannot create kind {obj['kind']}")
        except self._exc as exc:
            if self._status(exc) != 409:
                raise KubeError(
                    f"creating {obj['kind']} {ns}/{obj['metadata']['name']}: "
                    f"{getattr(exc, 'reason', exc)}: {getattr(exc, 'body', '')}"
                ) from exc

    def delete_job(self, ns: str, name: str) -> None:
        with contextlib.suppress(self._exc):
            self.batch.delete_namespaced_job(name, ns, propagation_policy="Background")

    def delete_configmap(self, ns: str, name: str) -> None:
        with contextlib.suppress(self._exc):
            self.core.delete_namespaced_config_map(name, ns)

    def read_configmap_key(self, ns: str, name: str, key: str) -> str:
        try:
            cm = self.core.read_namespaced_config_map(name, ns)
        except self._exc as exc:
            raise KubeError(f"ConfigMap {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc
        data = cm.data or {}
        if key not in data:
            raise KubeError(f"ConfigMap {ns}/{name} has no key {key!r}")
        return str(data[key])

    # --- deployments
    def get_deployment(self, ns: str, name: str) -> dict[str, Any]:
        try:
            return self._plain(self.apps.read_namespaced_deployment(name, ns))
        except self._exc as exc:
            raise KubeError(f"Deployment {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc

    def mutate_deployment(self, ns: str, name: str, fn: Any) -> None:
        """Read, transform the pod template with `fn(dep) -> dep`, write it back as a JSON
        patch guarded by the resourceVersion read (RBAC: patch); retried on a conflict."""
        for _ in range(10):
            dep = self.get_deployment(ns, name)
            template = fn(copy.deepcopy(dep))["spec"]["template"]
            ops = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": dep["metadata"]["resourceVersion"],
                },
                {"op": "replace", "path": "/spec/template", "value": template},
            ]
            try:
                self.apps.patch_namespaced_deployment(name, ns, ops)
                return
            except self._exc as exc:
                conflict = self._status(exc) == 409 or (
                    self._status(exc) == 422 and "test operation" in str(exc.body)
                )
                if not conflict:
                    raise KubeError(f"Deployment {ns}/{name}: {exc.reason}: {exc.body}") from exc
        raise KubeError(f"Deployment {ns}/{name}: write conflicts did not settle")

    def rollout_done(self, ns: str, name: str) -> tuple[bool, str]:
        """(complete, why not): every replica updated, available, no old ones left."""
        dep = self.get_deployment(ns, name)
        st = dep.get("status") or {}
        want = dep["spec"].get("replicas", 1)
        if (st.get("observedGeneration") or 0) < dep["metadata"]["generation"]:
            return False, "rollout not observed yet"
        for c in st.get("conditions") or []:
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                return False, f"rollout stuck: {c.get('message')}"
        updated, avail, total = (
            st.get("updatedReplicas") or 0,
            st.get("availableReplicas") or 0,
            st.get("replicas") or 0,
        )
        if updated == want and avail >= want and total == want:
            return True, ""
        return False, f"{updated}/{want} updated, {avail} available, {total} total"

    def wait_rollout(self, ns: str, name: str, timeout: float, stop: threading.Event) -> float:
        """Block until the rollout completes; returns its time. KubeError on timeout."""
        deadline = time.monotonic() + timeout
        why = ""
        while time.monotonic() < deadline and not stop.is_set():
            done, why = self.rollout_done(ns, name)
            if done:
                return time.time()
            why = why or self._pod_trouble(ns, name)
            time.sleep(0.5)
        detail = self._pod_trouble(ns, name)
        raise KubeError(
            f"Deployment {ns}/{name} did not roll out within {timeout:.0f}s: "
            f"{why}{'; ' + detail if detail else ''}"
        )

    def _pod_trouble(self, ns: str, dep_name: str) -> str:
        """Why the Deployment's pods are not ready (a waiting/terminated reason), if shown."""
        try:
            dep = self.apps.read_namespaced_deployment(dep_name, ns)
            sel = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
            pods = self.core.list_namespaced_pod(ns, label_selector=sel).items
        except self._exc:
            return ""
        for p in pods:
            st = p.status
            for cs in (st.init_container_statuses or []) + (st.container_statuses or []):
                term = cs.state.terminated if cs.state else None
                wait = cs.state.waiting if cs.state else None
                if term is not None and term.exit_code:
                    return f"container {cs.name} exited {term.exit_code}: {term.message or ''}"
                if wait is not None and wait.reason not in (
                    None,
                    "ContainerCreating",
                    "PodInitializing",
                ):
                    return f"container {cs.name} {wait.reason}: {wait.message or ''}"
        return ""

    def service_url(self, ns: str, name: str) -> str:
        try:
            svc = self.core.read_namespaced_service(name, ns)
        except self._exc as exc:
            raise KubeError(
                f"Service {ns}/{name} (the load's target): {getattr(exc, 'reason', exc)}"
            ) from exc
        ports = svc.spec.ports or []
        if not ports:
            raise KubeError(f"Service {ns}/{name} has no ports")
        return f"http://{name}.{ns}.svc.cluster.local:{ports[0].port}"

    # --- jobs
    def job_outcome(self, ns: str, name: str) -> tuple[bool | None, dict[str, Any]]:
        """(None while running | True succeeded | False failed, details of its pod)."""
        try:
            job = self.batch.read_namespaced_job(name, ns)
        except self._exc as exc:
            if self._status(exc) == 404:
                raise KubeError(f"Job {ns}/{name} disappeared") from exc
            raise
        st = job.status
        result: bool | None = None
        for c in st.conditions or []:
            if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
                result = True
            if c.status == "True" and c.type in ("Failed", "FailureTarget"):
                result = False
        details: dict[str, Any] = {"jobReason": None}
        if result is False:
            for c in st.conditions or []:
                if c.type == "Failed":
                    details["jobReason"] = f"{c.reason}: {c.message}"
        if result is None:
            return None, details
        pods = self.core.list_namespaced_pod(
            ns, label_selector=f"batch.kubernetes.io/job-name={name}"
        ).items
        for p in pods:
            statuses = [("init", s) for s in p.status.init_container_statuses or []]
            statuses += [("main", s) for s in p.status.container_statuses or []]
            for kind, s in statuses:
                term = s.state.terminated if s.state else None
                if term is None:
                    continue
                details.setdefault("containers", []).append(
                    {
                        "name": s.name,
                        "kind": kind,
                        "exitCode": term.exit_code,
                        "message": term.message or "",
                        "reason": term.reason or "",
                    }
                )
        return result, details


def ci_result_of(
    ok: bool, details: dict[str, Any], test_command: list[str], seconds: float, files: list[str]
) -> CIResult:
    """The CI gate's result from the Job's outcome and its containers' termination messages."""
    boxes = details.get("containers") or []
    failed = [b for b in boxes if b["exitCode"]]
    if ok:
        main = next((b for b in boxes if b["name"] == "test"), None)
        return CIResult(
            status=CIStatus.GREEN,
            reason="build and tests passed",
            output_tail=(main or {}).get("message", ""),
            duration_seconds=seconds,
            files_changed=files,
        )
    if failed and failed[0]["name"] == "patch":
        return CIResult(
            status=CIStatus.REJECTED,
            reason=(failed[0]["message"] or "the patch did not apply").strip()[:2000],
            duration_seconds=seconds,
            files_changed=files,
        )
    if failed and failed[0]["name"] == "test":
        return CIResult(
            status=CIStatus.RED,
            reason=f"`{shlex.join(test_command)}` exited {failed[0]['exitCode']}",
            output_tail=failed[0]["message"],
            duration_seconds=seconds,
            files_changed=files,
        )
    why = details.get("jobReason") or (failed[0]["message"] if failed else "")
    return CIResult(
        status=CIStatus.ERROR,
        reason=f"CI Job failed: {why}"[:2000],
        duration_seconds=seconds,
        files_changed=files,
    )


def verdict_status(verdict: Verdict, ci_res: CIResult | None) -> dict[str, Any]:
    """A Verdict as Submission status fields."""
    feedback = ""
    if ci_res is not None:
        feedback = f"CI {ci_res.status.value}: {ci_res.reason}"
        if ci_res.output_tail:
            feedback += "\n" + ci_res.output_tail
    return {
        "passed": verdict.passed,
        "score": round(verdict.score, 4),
        "reason": verdict.reason.value,
        "ciFeedback": feedback[:60_000],
        "signals": {
            s.name.value: {
                "value": s.value,
                "credit": round(s.credit, 4),
                "weight": s.weight,
                "detail": s.detail[:1000],
            }
            for s in verdict.signals
        },
    }


def submission_patch(kube: Kube, ns: str, spec: SubmissionSpec) -> str:
    if spec.patch.inline is not None:
        return spec.patch.inline
    ref = spec.patch.config_map_key_ref
    assert ref is not None
    return kube.read_configmap_key(ns, ref.name, ref.key)


def rejected_verdict(verify: VerifySpec, alert: str, reason: str) -> tuple[Verdict, CIResult]:
    ci_res = CIResult(status=CIStatus.REJECTED, reason=reason[:2000])
    obs = oracle.VerifyObservations(
        target_alert=alert,
        ci=ci_res,
        redeployed_at=None,
        active_before_redeploy=frozenset(),
        samples=[],
    )
    return oracle.evaluate(obs, verify), ci_res


# ------------------------------------------------------------------ the driver
@dataclass
class Persisted:
    """What status.loop holds: the loop state plus the driver's own bookkeeping."""

    state: RunState
    submission: str | None = None
    graded: list[str] = field(default_factory=list)
    baseline_image: str | None = None
    baseline_workdir: str | None = None
    finished: bool = False

    def dump(self) -> dict[str, Any]:
        return {
            "state": self.state.model_dump(mode="json"),
            "submission": self.submission,
            "graded": self.graded,
            "baselineImage": self.baseline_image,
            "baselineWorkdir": self.baseline_workdir,
            "finished": self.finished,
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> Persisted:
        return cls(
            state=RunState.model_validate(data["state"]),
            submission=data.get("submission"),
            graded=list(data.get("graded") or []),
            baseline_image=data.get("baselineImage"),
            baseline_workdir=data.get("baselineWorkdir"),
            finished=bool(data.get("finished")),
        )


def incident_phase(p: Persisted) -> str:
    st = p.state
    if p.finished:
        return "Succeeded" if st.verdict is not None and st.verdict.passed else "Failed"
    return {
        Phase.PENDING: "Pending",
        Phase.INJECTING: "Injecting",
        Phase.AWAITING_FIRE: "Injected",
        Phase.AWAITING_SUBMISSION: "AwaitingSubmission",
        Phase.CI: "Grading",
        Phase.DEPLOYING: "Grading",
        Phase.VERIFYING: "Grading",
        Phase.RESTORING: "Restoring",
        Phase.DONE: "Restoring",
    }[st.phase]


class IncidentRun:
    """Drives one Incident's loop until it is finished or `stop` is set (kopf daemon)."""

    def __init__(self, kube: Kube, cfg: OperatorConfig, incident: dict[str, Any], log: Any) -> None:
        self.kube = kube
        self.cfg = cfg
        self.log = log
        self.name = incident["metadata"]["name"]
        self.ns = incident["metadata"]["namespace"]
        self.incident = incident
        self.spec = IncidentSpec.model_validate(incident.get("spec") or {})
        self.scenario = cfg.scenario(self.spec.scenario)
        self.verify = effective_verify(self.scenario, self.spec)
        self.target_ns = self.spec.target_namespace or self.ns
        self.target = self.spec.target_deployment or self.scenario.service.name
        url = self.spec.prometheus_url or cfg.prometheus_url
        self.telemetry = (
            Telemetry(
                url,
                target_series=self.scenario.target_series,
                service_job=self.scenario.service.name,
            )
            if url
            else None
        )
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sreforge-{self.name}")
        self._job: Future[loop.Event] | None = None
        self._stop = threading.Event()
        self._last_persist = 0.0
        self._persisted_phase: Phase | None = None
        status = incident.get("status") or {}
        if status.get("loop"):
            self.p = Persisted.load(status["loop"])
            self.resumed = True
        else:
            run_id = f"{self.name}-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
            self.p = Persisted(
                RunState(run_id=run_id, target_alert=self.scenario.target_alert, verify=self.verify)
            )
            self.resumed = False

    # --- status
    def _persist(
        self,
        conditions: list[tuple[str, str, str, str]] = (),  # type: ignore[assignment]
        extra: dict[str, Any] | None = None,
    ) -> None:
        st = self.p.state
        body = {
            "phase": incident_phase(self.p),
            "alert": st.target_alert,
            "runId": st.run_id,
            "loop": self.p.dump(),
            **(extra or {}),
        }
        if st.fired_at:
            body["firedTime"] = datetime.fromtimestamp(st.fired_at, tz=UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        self.kube.update_conditions(INCIDENT_PLURAL, self.ns, self.name, list(conditions), body)
        self._last_persist = time.monotonic()
        entered = st.phase is not self._persisted_phase
        self._persisted_phase = st.phase
        if entered:
            failpoint.reached(f"persisted:{st.phase.value}")

    def _sub_conditions(
        self,
        sub: str,
        updates: list[tuple[str, str, str, str]],
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.kube.update_conditions(SUBMISSION_PLURAL, self.ns, sub, updates, extra)

    # --- the loop
    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        try:
            self._run(stop)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _resume_actions(self) -> list[Action]:
        """The actions the persisted phase was waiting on (each action is idempotent)."""
        return {
            Phase.PENDING: [],
            Phase.INJECTING: [Action.INJECT],
            Phase.AWAITING_SUBMISSION: [Action.HAND_OFF],  # the brief may not be written yet
            Phase.CI: [Action.RUN_CI],
            Phase.DEPLOYING: [Action.DEPLOY],
            Phase.RESTORING: [Action.RECORD, Action.RESTORE],
            Phase.DONE: [Action.FINISH],
        }.get(self.p.state.phase, [])

    def _run(self, stop: threading.Event) -> None:
        st = self.p.state
        if self.p.finished:
            self._refuse_queued("IncidentFinished", f"Incident {self.name} is finished")
            return
        if self.resumed:
            self.log.info(f"resuming run {st.run_id} in phase {st.phase}")
            actions = self._resume_actions()
            if st.phase is Phase.PENDING:
                actions = self._step(loop.Start(t=time.time()))
        else:
            self._persist(
                [
                    ("Injected", "Unknown", "Pending", "starting the run"),
                    ("Succeeded", "Unknown", "Running", "the run is in progress"),
                ]
            )
            actions = self._step(loop.Start(t=time.time()))
        pending = list(actions)
        next_sample = time.time()
        next_queue_look = 0.0
        while not stop.is_set() and not self.p.finished:
            st = self.p.state  # a failed Submission's FINISH starts a fresh RunState
            while pending and not stop.is_set():
                pending.extend(self._do(pending.pop(0)))
            if self.p.finished or stop.is_set():
                break
            if self._job is not None and self._job.done():
                job, self._job = self._job, None
                try:
                    event = job.result()
                except Exception as exc:  # any failure of an action is a harness fault
                    event = loop.Fault(t=time.time(), reason=f"{type(exc).__name__}: {exc}"[:2000])
                pending.extend(self._step(event))
                continue
            if (
                st.phase is Phase.AWAITING_SUBMISSION
                and self._job is None
                and time.monotonic() >= next_queue_look
            ):
                next_queue_look = time.monotonic() + 1.0  # one list a second at most
                sub = self._next_submission()
                if sub is not None:
                    pending.extend(self._start_grading(sub))
                    continue
            if st.phase in SAMPLED_PHASES and time.time() >= next_sample:
                next_sample = time.time() + st.verify.sample_interval_seconds
                if self.telemetry is None:
                    pending.extend(
                        self._step(
                            loop.Fault(
                                t=time.time(),
                                reason="no Prometheus: set spec.prometheusURL"
                                " or SREFORGE_PROMETHEUS_URL",
                            )
                        )
                    )
                    continue
                sample = self.telemetry.sample()
                pending.extend(self._step(loop.Sampled(sample=sample)))
                if st.phase is Phase.AWAITING_SUBMISSION and len(st.samples) > WAITING_SAMPLES_KEPT:
                    del st.samples[:-WAITING_SAMPLES_KEPT]
                # SAMPLE is the only action a sample yields outside a phase change
                if time.monotonic() - self._last_persist >= PERSIST_EVERY_SECONDS:
                    self._persist()
                continue
            stop.wait(0.2)

    def _step(self, event: loop.Event) -> list[Action]:
        before = self.p.state.phase
        actions = loop.step(self.p.state, event)
        if self.p.state.phase is not before:
            self._on_phase_change()
        return actions

    def _on_phase_change(self) -> None:
        st = self.p.state
        conds: list[tuple[str, str, str, str]] = []
        if st.phase is Phase.AWAITING_FIRE:
            conds.append(
                (
                    "Injected",
                    "True",
                    "RegressedBuildRolledOut",
                    f"{self.target_ns}/{self.target} runs "
                    f"{self.cfg.image(self.scenario.service.name, 'regressed')}; load started",
                )
            )
            conds.append(
                (
                    "AlertFiring",
                    "False",
                    "Waiting",
                    f"waiting up to {st.verify.fire_timeout_seconds}s for {st.target_alert}",
                )
            )
        self._persist(conds)

    def _do(self, action: Action) -> list[Action]:
        match action:
            case Action.INJECT:
                self._job = self._pool.submit(self._inject)
            case Action.HAND_OFF:
                self._hand_off()
            case Action.RUN_CI:
                self._job = self._pool.submit(self._run_ci)
            case Action.DEPLOY:
                self._job = self._pool.submit(self._deploy)
            case Action.RECORD:
                self._record()
            case Action.RESTORE:
                try:
                    self._restore()
                    return self._step(loop.Restored(t=time.time()))
                except Exception as exc:  # a restore failure still ends the run
                    return self._step(loop.Fault(t=time.time(), reason=f"restore failed: {exc}"))
            case Action.FINISH:
                self._finish()
        return []

    # --- actions
    def _inject(self) -> loop.Event:
        svc = self.scenario.service.name
        dep = self.kube.get_deployment(self.target_ns, self.target)
        box = target_container(dep, svc)
        if self.p.baseline_image is None:
            self.p.baseline_image = box.get("image")
            self.p.baseline_workdir = box.get("workingDir")
            # in status before the image changes: an operator that dies after the swap must
            # not take the regressed image for the baseline when it resumes
            self._persist()
        url = self.kube.service_url(self.target_ns, self.target)  # fail before changing anything

        def swap(d: dict[str, Any]) -> dict[str, Any]:
            return overlay_template(d, svc, self.cfg, None, self.p.baseline_workdir, None, [])

        self.kube.mutate_deployment(self.target_ns, self.target, swap)
        failpoint.reached("applied:inject")
        self.kube.wait_rollout(
            self.target_ns, self.target, self.scenario.service.deploy_timeout_seconds, self._stop
        )
        profile = effective_load(self.scenario, self.spec)
        for obj in render_load(self.incident, profile, url, self.spec.load_runner, self.cfg):
            self.kube.create(obj)
        return loop.Injected(t=time.time())

    def _hand_off(self) -> None:
        brief = self.scenario.brief_path.read_text(encoding="utf-8")  # never root_cause.md
        st = self.p.state
        self._persist(
            [
                (
                    "AlertFiring",
                    "True",
                    "TargetAlertFiring",
                    f"{st.target_alert} fired "
                    f"{(st.fired_at or 0) - (st.injected_at or 0):.0f}s after the injection",
                ),
                (
                    "AwaitingSubmission",
                    "True",
                    "HandedOff",
                    "the brief is in status.brief; create a Submission",
                ),
            ],
            {"brief": brief[:65_000]},
        )

    def _next_submission(self) -> str | None:
        subs = [
            s
            for s in self.kube.list_submissions(self.ns)
            if (s.get("spec") or {}).get("incidentRef", {}).get("name") == self.name
            and s["metadata"]["name"] not in self.p.graded
        ]
        queued = [s for s in subs if (condition(s, "Accepted") or {}).get("reason") == "Queued"]
        queued.sort(key=lambda s: (s["metadata"]["creationTimestamp"], s["metadata"]["name"]))
        return queued[0]["metadata"]["name"] if queued else None

    def _refuse_queued(self, reason: str, message: str) -> None:
        for s in self.kube.list_submissions(self.ns):
            if (s.get("spec") or {}).get("incidentRef", {}).get("name") != self.name:
                continue
            if (condition(s, "Accepted") or {}).get("reason") == "Queued":
                self._sub_conditions(
                    s["metadata"]["name"], [("Accepted", "False", reason, message)]
                )

    def _start_grading(self, sub: str) -> list[Action]:
        self.p.submission = sub
        self.p.graded.append(sub)
        self._sub_conditions(
            sub,
            [
                (
                    "Accepted",
                    "True",
                    "Grading",
                    f"graded against Incident {self.name} (run {self.p.state.run_id})",
                )
            ],
        )
        self._persist([("AwaitingSubmission", "False", "Grading", f"grading Submission {sub}")])
        return self._step(loop.Submitted(t=time.time()))

    def _patch_text(self) -> str:
        assert self.p.submission is not None
        obj = self.kube.get_submission(self.ns, self.p.submission)
        if obj is None:
            raise KubeError(f"Submission {self.p.submission} was deleted while being graded")
        return submission_patch(self.kube, self.ns, SubmissionSpec.model_validate(obj["spec"]))

    def _patch_cm_name(self) -> str:
        assert self.p.submission is not None
        return child_name(self.name, "patch", self.p.submission)

    def _run_ci(self) -> loop.Event:
        t0 = time.time()
        sub = self.p.submission
        assert sub is not None
        patch = self._patch_text()
        try:
            files = ci.vet_patch(patch, self.scenario.protected)
        except ci.PatchRejected as exc:
            return loop.CIFinished(
                t=time.time(), result=CIResult(status=CIStatus.REJECTED, reason=str(exc)[:2000])
            )
        cm = self._patch_cm_name()
        self.kube.create(patch_configmap(cm, self.ns, patch, self.incident, "ci"))
        job = render_ci_job(self.incident, sub, self.scenario, self.cfg, cm)
        self.kube.create(job)
        failpoint.reached("applied:run-ci")
        name = job["metadata"]["name"]
        deadline = (
            time.monotonic() + self.scenario.service.test_timeout_seconds + CI_MARGIN_SECONDS * 2
        )
        while not self._stop.is_set():
            ok, details = self.kube.job_outcome(self.ns, name)
            if ok is not None:
                res = ci_result_of(
                    ok, details, self.scenario.service.test_command, time.time() - t0, files
                )
                self._sub_conditions(
                    sub,
                    [
                        (
                            "CIPassed",
                            "True" if res.green else "False",
                            "Green" if res.green else res.status.value.capitalize(),
                            res.reason,
                        )
                    ],
                )
                return loop.CIFinished(t=time.time(), result=res)
            if time.monotonic() > deadline:
                raise KubeError(f"CI Job {self.ns}/{name} did not finish")
            time.sleep(0.5)
        raise KubeError("operator stopping")

    def _deploy(self) -> loop.Event:
        svc = self.scenario.service.name
        sub = self.p.submission
        assert sub is not None
        cm = self._patch_cm_name()
        patch = self._patch_text()
        owner = self.incident if self.target_ns == self.ns else None
        self.kube.create(patch_configmap(cm, self.target_ns, patch, owner, "service"))

        def overlay(d: dict[str, Any]) -> dict[str, Any]:
            return overlay_template(
                d, svc, self.cfg, cm, self.p.baseline_workdir, sub, list(self.scenario.protected)
            )

        try:
            self.kube.mutate_deployment(self.target_ns, self.target, overlay)
            failpoint.reached("applied:deploy")
            t = self.kube.wait_rollout(
                self.target_ns,
                self.target,
                self.scenario.service.deploy_timeout_seconds,
                self._stop,
            )
        except KubeError as exc:
            self._sub_conditions(sub, [("Deployed", "False", "RolloutFailed", str(exc))])
            return loop.DeployFailed(t=time.time(), reason=str(exc)[:2000])
        self._sub_conditions(
            sub,
            [
                (
                    "Deployed",
                    "True",
                    "RolledOut",
                    f"{self.target_ns}/{self.target} runs the patched build",
                )
            ],
        )
        return loop.Deployed(t=t)

    def _record(self) -> None:
        st = self.p.state
        verdict = st.verdict
        assert verdict is not None
        sub = self.p.submission
        summary = {
            "passed": verdict.passed,
            "score": round(verdict.score, 4),
            "reason": verdict.reason.value,
            "submission": sub,
        }
        # The Incident first: whoever sees the Submission graded sees the Incident's summary.
        self._persist(
            [
                (
                    "Verified",
                    "True" if verdict.passed else "False",
                    verdict.reason.value,
                    verdict.message,
                )
            ],
            {"verdict": summary},
        )
        failpoint.reached("applied:record")
        if sub is not None:
            fields = verdict_status(verdict, st.ci)
            ok = "True" if verdict.passed else "False"
            conds = [("Verified", ok, verdict.reason.value, verdict.message)]
            if st.ci is not None and not st.ci.green:
                conds.append(("CIPassed", "False", st.ci.status.value.capitalize(), st.ci.reason))
            self._sub_conditions(sub, conds, fields)
            self._judge(sub, verdict)

    def _judge(self, sub: str, verdict: Verdict) -> None:
        """status.diagnosis by the RCA judge when spec.rca is set and RCA_JUDGE_* configured."""
        if not os.environ.get("RCA_JUDGE_URL") or not os.environ.get("RCA_JUDGE_MODEL"):
            return
        obj = self.kube.get_submission(self.ns, sub)
        rca = ((obj or {}).get("spec") or {}).get("rca")
        if not rca:
            return
        agent_model = ((obj or {}).get("spec") or {}).get("agentModel")
        with tempfile.TemporaryDirectory(prefix="sreforge-judge-") as tmp:
            run_dir = Path(tmp)
            (run_dir / "rca.txt").write_text(rca, encoding="utf-8")
            record = {
                "runId": self.p.state.run_id,
                "scenario": {"path": str(self.scenario.directory)},
                "submission": {"agentModel": agent_model, "rca": "rca.txt"},
                "passed": verdict.passed,
                "score": verdict.score,
            }
            (run_dir / "record.json").write_text(json.dumps(record), encoding="utf-8")
            diagnosis = judge.judge_run(run_dir, log=self.log.warning)
        if diagnosis is not None:
            self.kube.patch_status(
                SUBMISSION_PLURAL,
                self.ns,
                sub,
                {"diagnosis": diagnosis.model_dump(mode="json", by_alias=True)},
            )

    def _restore(self) -> None:
        svc = self.scenario.service.name
        if self.p.state.injected_at is None and self.p.baseline_image is None:
            return  # nothing was changed

        def base(d: dict[str, Any]) -> dict[str, Any]:
            return overlay_template(d, svc, self.cfg, None, self.p.baseline_workdir, None, [])

        dep = self.kube.get_deployment(self.target_ns, self.target)
        if base(dep)["spec"] != dep["spec"]:
            self.kube.mutate_deployment(self.target_ns, self.target, base)
            failpoint.reached("applied:restore")
        # also when resumed after the patch went in: the rollout may not have finished
        self.kube.wait_rollout(
            self.target_ns,
            self.target,
            self.scenario.service.deploy_timeout_seconds,
            self._stop,
        )
        if self.p.submission is not None:
            self.kube.delete_configmap(self.target_ns, self._patch_cm_name())

    def _finish(self) -> None:
        """A passing verdict or a run that cannot grade ends the Incident; a failing Submission
        puts it back to AwaitingSubmission for the next one."""
        st = self.p.state
        verdict = st.verdict
        assert verdict is not None
        regradable = (
            self.p.submission is not None
            and not verdict.passed
            and st.fault is None
            and st.fired_at is not None
        )
        if regradable:
            nxt = RunState(
                run_id=st.run_id,
                target_alert=st.target_alert,
                verify=st.verify,
                phase=Phase.AWAITING_SUBMISSION,
                started_at=st.started_at,
                injected_at=st.injected_at,
                fired_at=st.fired_at,
                handed_off_at=st.handed_off_at,
                samples=st.samples[-1:],
            )
            self.p = Persisted(
                nxt, None, self.p.graded, self.p.baseline_image, self.p.baseline_workdir
            )
            self._persist(
                [
                    (
                        "AwaitingSubmission",
                        "True",
                        "HandedOff",
                        f"Submission {self.p.graded[-1]} did not pass "
                        f"({verdict.reason.value}); the next one is graded",
                    )
                ]
            )
            return
        self.p.finished = True
        load = render_load(
            self.incident,
            effective_load(self.scenario, self.spec),
            "http://unused",
            self.spec.load_runner,
            self.cfg,
        )
        for obj in load:
            if obj["kind"] == "Job":
                self.kube.delete_job(self.ns, obj["metadata"]["name"])
        ok = "True" if verdict.passed else "False"
        self._persist(
            [
                ("AwaitingSubmission", "False", "Finished", "the run is over"),
                ("Succeeded", ok, verdict.reason.value, verdict.message),
            ]
        )
        self._refuse_queued(
            "IncidentFinished", f"Incident {self.name} is finished ({verdict.reason.value})"
        )


def restore_on_delete(kube: Kube, run: IncidentRun) -> None:
    """An Incident deleted: its target Deployment gets back the image it had before the
    injection, without overlay (the Jobs and ConfigMaps go with the real garbage collector)."""
    original = run.p.baseline_image
    if original is None:
        return
    svc = run.scenario.service.name

    def back(d: dict[str, Any]) -> dict[str, Any]:
        out = overlay_template(d, svc, run.cfg, None, run.p.baseline_workdir, None, [])
        main = target_container(out, svc)["name"]
        for c in out["spec"]["template"]["spec"]["containers"]:
            if c["name"] == main:
                c["image"] = original
        return out

    kube.mutate_deployment(run.target_ns, run.target, back)


# ------------------------------------------------------------------ submission intake
def admit_submission(kube: Kube, cfg: OperatorConfig, sub: dict[str, Any]) -> None:
    """First look at a new Submission: refuse what cannot be graded, vet the patch in-process
    (a rejected patch is graded red at once), queue the rest for the Incident's driver."""
    if condition(sub, "Accepted") is not None:
        return
    ns, name = sub["metadata"]["namespace"], sub["metadata"]["name"]

    def cond(updates: list[tuple[str, str, str, str]], extra: dict[str, Any] | None = None) -> None:
        kube.update_conditions(SUBMISSION_PLURAL, ns, name, updates, extra)

    spec = SubmissionSpec.model_validate(sub.get("spec") or {})
    inc_name = spec.incident_ref.name
    inc = kube.get_incident(ns, inc_name)
    if inc is None:
        cond(
            [
                (
                    "Accepted",
                    "False",
                    "IncidentNotFound",
                    f"no Incident {inc_name!r} in namespace {ns}",
                )
            ]
        )
        return
    loop_status = (inc.get("status") or {}).get("loop") or {}
    if loop_status.get("finished"):
        cond(
            [
                (
                    "Accepted",
                    "False",
                    "IncidentFinished",
                    f"Incident {inc_name} is finished ({(inc.get('status') or {}).get('phase')})",
                )
            ]
        )
        return
    try:
        scenario = cfg.scenario(IncidentSpec.model_validate(inc["spec"]).scenario)
    except ScenarioError as exc:
        cond([("Accepted", "False", "ScenarioNotFound", str(exc))])
        return
    try:
        patch = submission_patch(kube, ns, spec)
        ci.vet_patch(patch, scenario.protected)
    except (ci.PatchRejected, KubeError) as exc:
        incident_spec = IncidentSpec.model_validate(inc["spec"])
        verdict, ci_res = rejected_verdict(
            effective_verify(scenario, incident_spec), scenario.target_alert, str(exc)
        )
        cond(
            [
                ("Accepted", "True", "Vetted", "graded without a run: the patch was refused"),
                ("CIPassed", "False", "PatchRejected", str(exc)),
                ("Verified", "False", verdict.reason.value, verdict.message),
            ],
            verdict_status(verdict, ci_res),
        )
        return
    phase = (inc.get("status") or {}).get("phase") or "Pending"
    cond(
        [
            (
                "Accepted",
                "False",
                "Queued",
                f"waiting for Incident {inc_name} (phase {phase}); "
                "one Submission is graded at a time",
            )
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """`apply-patch TREE PATCH`: the init container laying a patch over a source copy."""
    p = argparse.ArgumentParser(prog="python -m sreforge.runtime.kube")
    sub = p.add_subparsers(dest="cmd", required=True)
    ap = sub.add_parser("apply-patch")
    ap.add_argument("tree", type=Path)
    ap.add_argument("patch", type=Path)
    ap.add_argument("--protected", action="append", default=[])
    args = p.parse_args(argv)
    term = Path(os.environ.get("TERMINATION_LOG", TERMINATION_LOG))
    try:
        text = args.patch.read_text(encoding="utf-8", errors="replace")
        ci.vet_patch(text, args.protected)
        ci.apply_patch(args.tree, text)
    except (ci.PatchRejected, OSError) as exc:
        msg = str(exc).strip()[:4000]
        print(msg, file=sys.stderr)
        with contextlib.suppress(OSError):
            term.write_text(msg, encoding="utf-8")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
