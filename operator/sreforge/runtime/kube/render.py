"""The operator's objects as plain dicts: pod security, ownership, the load, the CI Job and
the patch overlay of the target Deployment. Pure: nothing here talks to the API."""

from __future__ import annotations

import copy
import hashlib
import secrets
import shlex
from typing import Any

from sreforge.api.resources import GROUP, VERSION
from sreforge.api.scenario import LoadProfile, Scenario
from sreforge.load import k6, k6series
from sreforge.runtime import ci
from sreforge.runtime.kube.config import (
    CI_MARGIN_SECONDS,
    FILES_KEY,
    INCIDENT_LABEL,
    MANAGED,
    OVERLAY_ANNOTATION,
    OVERLAY_PATCH,
    OVERLAY_SRC,
    PATCH_KEY,
    PATCH_VOLUME,
    ROLE_LABEL,
    SCENARIO_LABEL,
    SRC_VOLUME,
    TERMINATION_LOG,
    TMP_VOLUME,
    OperatorConfig,
)


def child_name(*parts: str) -> str:
    """A DNS-1123 label from parts, shortened with a hash when it would exceed 63 chars."""
    name = "-".join(parts)
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


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


def patch_cm_name(incident: str, submission: str) -> str:
    """The ConfigMap of a Submission's vetted patch (in the Incident's namespace, and in the
    target's while deployed there)."""
    return child_name(incident, "patch", submission)


def patch_configmap(  # noqa: PLR0917 (what the ConfigMap holds, then whose it is)
    name: str,
    namespace: str,
    patch: str,
    files: list[str],
    incident: dict[str, Any] | None,
    role: str,
) -> dict[str, Any]:
    """A vetted patch and the paths it changes, as the CI Job and the overlay mount it."""
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED)},
        "data": {PATCH_KEY: patch, FILES_KEY: "".join(f"{f}\n" for f in files)},
    }
    if incident is not None:
        _adopt(cm, incident, role)
    return cm


def telemetry_scope(
    incident: str, namespace: str, target_namespace: str
) -> dict[str, str | list[str]]:
    """The label matchers that confine an Incident's Prometheus reads to its own series.

    The scrape config gives each target its pod's namespace and INCIDENT_LABEL (`namespace`,
    `incident`), the rules keep both on every alert. The load's pods run in the Incident's
    namespace, the target's in the target namespace: both namespaces, with the Incident's
    name (an Incident of the same name in the target namespace would share this scope).
    """
    return {"namespace": sorted({namespace, target_namespace}), "incident": incident}


def load_job_name(incident: str) -> str:
    """The load's Job (either runner's)."""
    return child_name(incident, "load")


def probe_job_name(incident: str) -> str:
    """The independent prober's Job."""
    return child_name(incident, "probe")


def render_load(
    incident: dict[str, Any],
    profile: LoadProfile,
    target_url: str,
    runner: str,
    cfg: OperatorConfig,
    *,
    prometheus_url: str | None = None,
) -> list[dict[str, Any]]:
    """The load's objects: [Job] for the built-in generator, [ConfigMap, Job] for k6, then
    the independent prober's Job (the built-in generator as `--series probe`, pods labelled
    `app: prober`), whichever runner drives the load: both draw ids from one layout.

    The pods carry `app: loadgen` (the prober's `app: prober`), the Incident and its
    scenario (SCENARIO_LABEL) and Prometheus scrape annotations; the built-in generator
    listens on $PORT when the node sets it (contract.md item 3), else on 9100. k6 writes
    to `prometheus_url`'s remote-write receiver instead (k6_remote_write_url).
    """
    name = incident["metadata"]["name"]
    ns = incident["metadata"]["namespace"]
    job_name = load_job_name(name)
    ids_seed = secrets.randbelow(2**31)  # which ids are popular: one layout for both
    objs: list[dict[str, Any]] = []
    if runner == "k6":
        cm_name = child_name(name, "k6-script")
        cm = k6.render_k6_configmap(cm_name, ns, profile, target_url, seed=ids_seed)
        objs.append(_adopt(cm, incident, "load"))
        job = k6.render_k6_job(
            job_name,
            ns,
            profile,
            target_url,
            cm_name,
            remote_write_url=k6_remote_write_url(prometheus_url),
            tags=k6series.job_tags(ns, name, incident["spec"]["scenario"]),
        )
    else:
        job = _generator_job(job_name, ns, profile, target_url, cfg, ids_seed, probe=False)
    for box in job["spec"]["template"]["spec"]["containers"]:
        # the root is read-only: HOME in the Job's writable /tmp (emptyDir)
        _set_home(box)
    _adopt(job, incident, "load")
    tmpl_labels = job["spec"]["template"]["metadata"].setdefault("labels", {})
    tmpl_labels.update(labels_for(name, "load"))
    tmpl_labels[SCENARIO_LABEL] = incident["spec"]["scenario"]
    tmpl_labels["app"] = "loadgen"
    objs.append(job)
    probe = _generator_job(probe_job_name(name), ns, profile, target_url, cfg, ids_seed, probe=True)
    _adopt(probe, incident, "probe")
    tmpl_labels = probe["spec"]["template"]["metadata"].setdefault("labels", {})
    tmpl_labels.update(labels_for(name, "probe"))
    tmpl_labels[SCENARIO_LABEL] = incident["spec"]["scenario"]
    tmpl_labels["app"] = "prober"
    objs.append(probe)
    return objs


def k6_remote_write_url(prometheus_url: str | None) -> str:
    """Where a k6 Job writes: the Incident's Prometheus's remote-write receiver (the
    recording rules of sreforge.load.k6series turn k6's series into the generator's)."""
    if not prometheus_url:
        raise ValueError("loadRunner k6 writes to Prometheus: set spec.prometheusURL")
    return prometheus_url.rstrip("/") + k6series.REMOTE_WRITE_PATH


def _set_home(box: dict[str, Any]) -> None:
    env = box.setdefault("env", [])
    if not any(e["name"] == "HOME" for e in env):
        env.append({"name": "HOME", "value": "/tmp"})


def _generator_job(  # noqa: PLR0917 (private to render_load)
    job_name: str,
    ns: str,
    profile: LoadProfile,
    target_url: str,
    cfg: OperatorConfig,
    ids_seed: int,
    *,
    probe: bool,
) -> dict[str, Any]:
    """The built-in generator (or prober) as a Job listening on the node's $PORT."""
    job = k6.render_generator_job(
        job_name, ns, profile, target_url, cfg.runner, ids_seed=ids_seed, probe=probe
    )
    box = job["spec"]["template"]["spec"]["containers"][0]
    box["imagePullPolicy"] = cfg.operator_image_pull_policy
    _set_home(box)
    argv = list(box["command"])
    i = argv.index("--listen")
    argv[i + 1] = "LISTEN"
    shell = shlex.join(argv).replace("LISTEN", f'"${{HOST:-0.0.0.0}}:${{PORT:-{k6.METRICS_PORT}}}"')
    box["command"] = ["sh", "-c", "exec " + shell]
    job["spec"]["template"]["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(k6.METRICS_PORT),
        "prometheus.io/path": "/metrics",
    }
    return job


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
    apply the patch there with the operator image (vetted again: protected paths). Their
    root filesystem is read-only: `mounts` must hold a writable /tmp (vet_patch makes a
    temporary directory; `env` sets HOME there)."""
    flags: list[str] = []
    for p in protected:
        flags += ["--protected", p]
    apply = ["python", "-m", "sreforge.runtime.kube", "apply-patch", src, patch_file, *flags]
    return [
        {
            "name": f"{prefix}source",
            "image": image,
            "command": ["cp", "-R", f"{cfg.source_dir}/.", src],
            "env": env,
            "securityContext": container_security(),
            "volumeMounts": mounts,
        },
        {
            "name": f"{prefix}patch",
            "image": cfg.runner,
            "imagePullPolicy": cfg.operator_image_pull_policy,
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
    regressed = cfg.image(svc.name, scenario.name)
    tests = " && ".join(shlex.join(step) for step in ci.gate_steps(svc.test_command))
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
    pod_labels = {**job_labels, SCENARIO_LABEL: incident["spec"]["scenario"]}
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
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }
    return _adopt(job, incident, "ci")


def target_container(dep: dict[str, Any], service: str) -> dict[str, Any]:
    boxes = dep["spec"]["template"]["spec"]["containers"]
    for c in boxes:
        if c.get("name") == service:
            return dict(c)
    return dict(boxes[0])


def overlay_template(  # noqa: PLR0917 (one call shape: the driver's)
    dep: dict[str, Any],
    service: str,
    cfg: OperatorConfig,
    patch_cm: str | None,
    baseline_workdir: str | None,
    submission: str | None,
    protected: list[str],
    *,
    incident: str | None = None,
    scenario: str | None = None,
) -> dict[str, Any]:
    """The Deployment with the regressed image and, when `patch_cm` is set, the patch overlay:
    init containers copy the image's source into an emptyDir and apply the patch there, the
    main container runs from it. With `patch_cm=None` it is the baseline (no overlay).

    Its pods carry `incident` as their INCIDENT_LABEL, so their series are that Incident's
    (telemetry_scope), and `scenario` as their SCENARIO_LABEL, so only that scenario's rules
    read them; `incident=None` takes both off (the user's Deployment again)."""
    d = copy.deepcopy(dep)
    tmpl = d["spec"]["template"]
    spec = tmpl["spec"]
    labels = tmpl.setdefault("metadata", {}).setdefault("labels", {})
    for key, value in ((INCIDENT_LABEL, incident), (SCENARIO_LABEL, scenario)):
        if incident is None or value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    # the scenario's own regressed build (one tag per scenario); none when the Deployment
    # goes back to the user (restore on delete puts the original image back itself)
    regressed = cfg.image(service, scenario) if scenario else None
    if regressed is None and patch_cm is not None:
        raise ValueError("a patch overlay needs the scenario (its regressed image)")
    main = target_container(d, service)["name"]
    spec["initContainers"] = [
        c for c in spec.get("initContainers") or [] if not c["name"].startswith("sreforge-")
    ]
    spec["volumes"] = [
        v
        for v in spec.get("volumes") or []
        if v["name"] not in (SRC_VOLUME, PATCH_VOLUME, TMP_VOLUME)
    ]
    annotations = tmpl.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(OVERLAY_ANNOTATION, None)
    for c in spec["containers"]:
        if c["name"] != main:
            continue
        if regressed is not None:
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
    assert regressed is not None  # checked above
    annotations[OVERLAY_ANNOTATION] = submission or patch_cm
    src_mount = {"name": SRC_VOLUME, "mountPath": "/sreforge/src"}
    tmp_mount = {"name": TMP_VOLUME, "mountPath": "/tmp"}
    spec["volumes"] += [
        {"name": SRC_VOLUME, "emptyDir": {"sizeLimit": "512Mi"}},
        {"name": PATCH_VOLUME, "configMap": {"name": patch_cm}},
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    spec.setdefault("initContainers", []).extend(
        overlay_init_containers(
            "sreforge-",
            cfg,
            regressed,
            OVERLAY_SRC,
            [src_mount, tmp_mount],
            f"{OVERLAY_PATCH}/{PATCH_KEY}",
            {"name": PATCH_VOLUME, "mountPath": OVERLAY_PATCH},
            protected,
            [{"name": "HOME", "value": "/tmp"}],
        )
    )
    return d
