"""The operator (`sreforge operator`, a real subprocess) against a real kube-apiserver.

What this module covers needs no running pods: kwok (tests/kubeenv.py) plays the kubelet
of one Node, so Deployment rollouts complete and Jobs exist, but no container runs. The
Prometheus is real (the Debian binary with the scenario's rules) and scrapes nothing, so
the target alert never fires here, honestly: these tests go as far as `Injected` and the
fire timeout, and check the refusals, the queue, owner references with the real garbage
collector, the security context of the Jobs, the printer columns and that a killed and
restarted operator resumes the same run with one verdict. Grading that needs the alert to
fire (a reference fix passing, an empty patch failing) needs pods that really run: the
kubelet stand-in of tests/standin/ (contract.md), not part of this module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.kubeenv import BUILD_COMMAND, REPO_ROOT, ControlPlane, find_tools_bin, wait_for

from sreforge.api.resources import GROUP, VERSION, IncidentSpec
from sreforge.runtime import ci
from sreforge.runtime.kube import guard
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.process import free_port
from sreforge.runtime.prometheus import PrometheusServer, prometheus_binary
from sreforge.scenarios import fixes, load_scenario

pytestmark = pytest.mark.kube

NS = "sreforge-op"
SCENARIO = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
HEALTHY = "sreforge/catalog:healthy"
REGRESSED = "sreforge/catalog:latency-cache-stampede"  # each scenario its own tag
FIX = fixes(SCENARIO)[0]


class Operator:
    """`sreforge operator` as a subprocess, killed and restarted by its PID."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_env: dict[str, str] = {}

    def start(self, failpoint: str | None = None) -> None:
        """Start it; with `failpoint` (sreforge.runtime.failpoint) it SIGKILLs itself there."""
        exe = Path(sys.executable).with_name("sreforge")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("SREFORGE_PROMETHEUS_URL", None)
        env.pop("SREFORGE_FAILPOINT", None)
        env.update(self.extra_env)
        if failpoint is not None:
            env["SREFORGE_FAILPOINT"] = failpoint
        with self.log.open("ab") as out:
            out.write(f"--- operator start (failpoint {failpoint})\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [str(exe), "operator", "--kubeconfig", str(self.kubeconfig), "-n", NS],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def crashed_at(self, failpoint: str, timeout: float) -> None:
        """Wait for the operator started with `failpoint` to SIGKILL itself there."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print(self.tail())
            pytest.fail(f"the operator never reached failpoint {failpoint} in {timeout:.0f}s")
        assert code == -signal.SIGKILL, (failpoint, code, self.tail())

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as a crashed operator."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-4000:]
        return ""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    try:
        prometheus_binary()
    except Exception as exc:  # the Debian prometheus package is part of the setup
        pytest.skip(f"no prometheus binary: {exc}")
    work = tmp_path_factory.mktemp("operator")
    from kubernetes import client, config  # noqa: PLC0415

    with ControlPlane(bin_dir, work / "kube") as cp:
        cp.install_crds()
        cp.kubectl("create", "namespace", NS)
        prom = PrometheusServer(work / "prom", [SCENARIO.rules_path], ["catalog", "loadgen"])
        prom.start()
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        op = Operator(cp.kubeconfig, work / "operator.log")
        metrics_port = free_port()
        op.extra_env["SREFORGE_METRICS_PORT"] = str(metrics_port)
        # kwok runs no load: no known answers are ever learned, nothing to wait for
        op.extra_env["SREFORGE_LEARN_WAIT_SECONDS"] = "0"
        op.start()
        try:
            yield {
                "cp": cp,
                "prom": prom,
                "op": op,
                "custom": client.CustomObjectsApi(api),
                "core": client.CoreV1Api(api),
                "apps": client.AppsV1Api(api),
                "batch": client.BatchV1Api(api),
                "networking": client.NetworkingV1Api(api),
                "plain": api.sanitize_for_serialization,
                "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
            }
        finally:
            op.stop()
            prom.stop()
            api.close()
            print(op.tail())


def make_target(
    env: dict[str, Any], name: str, *, ns: str = NS, deployment: bool = True, service: bool = True
) -> None:
    """A healthy catalog Deployment and its Service (kwok marks its pod Ready)."""
    labels = {"app": "catalog", "sreforge.dev/target": name}
    if deployment:
        _make_deployment(env, name, ns, labels)
    if service:
        env["core"].create_namespaced_service(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
            },
        )


def _make_deployment(env: dict[str, Any], name: str, ns: str, labels: dict[str, str]) -> None:
    env["apps"].create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "catalog",
                                "image": HEALTHY,
                                "ports": [{"containerPort": 8080}],
                            }
                        ]
                    },
                },
            },
        },
    )


def make_incident(
    env: dict[str, Any],
    name: str,
    target: str,
    fire_timeout: int = 600,
    runner: str = "builtin",
    **spec: Any,
) -> None:
    env["custom"].create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "incidents",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Incident",
            "metadata": {"name": name},
            "spec": {
                "scenario": SCENARIO.name,
                "targetDeployment": target,
                "prometheusURL": env["prom"].url,
                "loadRunner": runner,
                # long enough for every test of the module that shares an Incident: a
                # run ends once its load could no longer hold a case (sreforge.loop)
                "load": {"rate": 5, "durationSeconds": 3600},
                "verify": {"fireTimeoutSeconds": fire_timeout},
                **spec,
            },
        },
    )


def submit(
    env: dict[str, Any],
    name: str,
    incident: str,
    patch: str,
    *,
    rca: str | None = None,
    agent_model: str | None = None,
) -> None:
    spec: dict[str, Any] = {"incidentRef": {"name": incident}, "patch": {"inline": patch}}
    if rca is not None:
        spec["rca"] = rca
    if agent_model is not None:
        spec["agentModel"] = agent_model
    env["custom"].create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "submissions",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Submission",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def get(env: dict[str, Any], plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = env["custom"].get_namespaced_custom_object(
        GROUP, VERSION, NS, plural, name
    )
    return obj


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def wait_cond(
    env: dict[str, Any], plural: str, name: str, type_: str, timeout: float = 90.0
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        c = cond(get(env, plural, name), type_)
        return c if c and c["status"] != "Unknown" else None

    try:
        got: dict[str, Any] = wait_for(f"{plural}/{name} condition {type_}", probe, timeout)
    except BaseException:
        print(env["op"].tail())
        raise
    return got


def stored_patch(env: dict[str, Any], name: str) -> str | None:
    """The patch intake stored in ConfigMap `name`, None when there is no such ConfigMap."""
    found = env["core"].list_namespaced_config_map(NS, field_selector=f"metadata.name={name}")
    return str(found.items[0].data["patch.diff"]) if found.items else None


def domain_events(env: dict[str, Any], name: str, kind: str = "Incident") -> list[Any]:
    """The operator's own Events about the object (kopf's are posted as component kopf)."""
    sel = f"involvedObject.name={name},involvedObject.kind={kind}"
    found = env["core"].list_namespaced_event(NS, field_selector=sel).items
    return [e for e in found if e.source and e.source.component == "sreforge-operator"]


def container_image(env: dict[str, Any], name: str) -> str:
    dep = env["apps"].read_namespaced_deployment(name, NS)
    return str(dep.spec.template.spec.containers[0].image)


def pod_incident(env: dict[str, Any], name: str) -> str | None:
    """The Incident a Deployment's pods are labelled with (their series are its)."""
    dep = env["apps"].read_namespaced_deployment(name, NS)
    return (dep.spec.template.metadata.labels or {}).get("sreforge.dev/incident")


# ---------------------------------------------------------------- tests
def test_incident_is_injected_with_owned_secure_load_job(env: dict[str, Any]) -> None:
    make_target(env, "catalog-a")
    make_incident(env, "inc-a", "catalog-a")
    injected = wait_cond(env, "incidents", "inc-a", "Injected")
    assert injected["status"] == "True", injected
    inc = get(env, "incidents", "inc-a")
    st = inc["status"]
    assert st["phase"] == "Injected"
    assert st["alert"] == SCENARIO.target_alert
    assert st["loop"]["state"]["phase"] == "AwaitingFire"
    assert st["loop"]["baselineImage"] == HEALTHY
    assert "brief" not in st  # the alert has not fired: nothing is handed off
    assert cond(inc, "AlertFiring")["status"] == "False"  # type: ignore[index]
    running = cond(inc, "Finished")
    assert running is not None
    assert (running["status"], running["reason"]) == ("False", "Running"), running
    assert container_image(env, "catalog-a") == REGRESSED
    assert pod_incident(env, "catalog-a") == "inc-a"

    job = env["batch"].read_namespaced_job("inc-a-load", NS)
    owner = job.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == ("Incident", "inc-a", inc["metadata"]["uid"])
    assert owner.controller is True
    tmpl = job.spec.template
    assert tmpl.metadata.labels["app"] == "loadgen"
    assert tmpl.metadata.labels["sreforge.dev/role"] == "load"
    assert tmpl.metadata.labels["sreforge.dev/incident"] == "inc-a"
    assert tmpl.metadata.annotations["prometheus.io/scrape"] == "true"
    pod_sc = tmpl.spec.security_context
    assert pod_sc.run_as_non_root is True
    assert pod_sc.seccomp_profile.type == "RuntimeDefault"
    box = tmpl.spec.containers[0]
    assert box.security_context.read_only_root_filesystem is True
    assert box.security_context.allow_privilege_escalation is False
    assert box.security_context.capabilities.drop == ["ALL"]
    # the target is the Service by its cluster DNS name
    assert "catalog-a.sreforge-op.svc.cluster.local:8080" in " ".join(box.command)


def label_selector(sel: dict[str, Any]) -> str:
    """A LabelSelector (matchLabels, matchExpressions with In) as a label query."""
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        assert e["operator"] == "In", e
        parts.append(f"{e['key']} in ({','.join(e['values'])})")
    return ",".join(parts)


def pods_selected(env: dict[str, Any], sel: dict[str, Any]) -> list[dict[str, Any]]:
    found = env["core"].list_namespaced_pod(NS, label_selector=label_selector(sel)).items
    return [env["plain"](p) for p in found if p.metadata.deletion_timestamp is None]


def test_the_incident_confines_the_target_and_the_harness_pods(env: dict[str, Any]) -> None:
    """The NetworkPolicies the operator creates are accepted by the API server and select
    exactly the pods they are meant for (kwok's pods, made by the real controllers from the
    operator's own templates); the target's pods run under the ServiceAccount the Incident
    names, with no API token (the ServiceAccount admission plugin mounts none)."""
    make_target(env, "catalog-n")
    env["core"].create_namespaced_service_account(NS, {"metadata": {"name": "under-test"}})
    make_incident(env, "inc-n", "catalog-n", serviceAccountName="under-test")
    injected = wait_cond(env, "incidents", "inc-n", "Injected")
    assert injected["status"] == "True", injected
    found = env["networking"].list_namespaced_network_policy(
        NS, label_selector="sreforge.dev/incident=inc-n"
    )
    pols = {p.metadata.name: env["plain"](p)["spec"] for p in found.items}
    assert sorted(pols) == ["inc-n-ci", "inc-n-harness", "inc-n-target"]

    def target_pods() -> list[dict[str, Any]]:
        pods = pods_selected(env, pols["inc-n-target"]["podSelector"])
        return (
            pods
            if pods and all(p["spec"]["containers"][0]["image"] == REGRESSED for p in pods)
            else []
        )

    def harness_pods() -> list[dict[str, Any]]:
        pods = pods_selected(env, pols["inc-n-harness"]["podSelector"])
        return pods if len(pods) == 2 else []

    # the target policy selects the regressed build's pods of this target, nothing else
    for pod in wait_for("the target's pods under its policy", target_pods, timeout=60):
        assert pod["metadata"]["labels"]["sreforge.dev/target"] == "catalog-n"
        spec = pod["spec"]
        assert spec["serviceAccountName"] == "under-test"
        assert spec["automountServiceAccountToken"] is False
        assert not [v for v in spec.get("volumes") or [] if "projected" in v], spec["volumes"]
    # the harness policy (and the target's load peer) selects the load's and prober's pods
    jobs = sorted(
        p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        for p in wait_for("the load's pods under their policy", harness_pods, timeout=60)
    )
    assert jobs == ["inc-n-load", "inc-n-probe"]
    (rule,) = pols["inc-n-target"]["ingress"]
    load_peer, scraper = rule["from"]
    assert load_peer["podSelector"] == pols["inc-n-harness"]["podSelector"]
    assert load_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    # this Prometheus is a host process: the scraper is its address
    assert scraper == {"ipBlock": {"cidr": "127.0.0.1/32"}}
    assert pols["inc-n-harness"]["ingress"] == [{"from": [scraper]}]
    assert pols["inc-n-target"]["egress"][0]["ports"] == [
        {"port": 53, "protocol": "UDP"},
        {"port": 53, "protocol": "TCP"},
    ]
    assert pols["inc-n-ci"]["policyTypes"] == ["Ingress", "Egress"]
    assert not pols["inc-n-ci"].get("ingress")
    assert not pols["inc-n-ci"].get("egress")
    # the namespace label the peers select on is the API server's own
    ns = env["core"].read_namespace(NS)
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == NS


def test_a_missing_service_account_is_named_and_nothing_changes(env: dict[str, Any]) -> None:
    make_target(env, "catalog-s")
    make_incident(env, "inc-s", "catalog-s", serviceAccountName="nobody")
    wait_for(
        "inc-s to end",
        lambda: (get(env, "incidents", "inc-s").get("status") or {}).get("phase") == "Failed",
        timeout=90,
    )
    inc = get(env, "incidents", "inc-s")
    assert "spec.serviceAccountName" in inc["status"]["loop"]["state"]["fault"]
    assert "nobody" in inc["status"]["loop"]["state"]["fault"]
    assert container_image(env, "catalog-s") == HEALTHY


def _probed_deployment(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "catalog",
                            "image": REGRESSED,
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                        }
                    ]
                },
            },
        },
    }


def _rogue_behind_the_service(env: dict[str, Any], name: str) -> None:
    env["core"].create_namespaced_pod(
        NS,
        {
            "metadata": {"name": f"{name}-fast", "labels": {"app": f"{name}-fast"}},
            "spec": {"containers": [{"name": "fast", "image": HEALTHY}]},
        },
    )
    env["core"].patch_namespaced_service(name, NS, {"spec": {"selector": {"app": f"{name}-fast"}}})


def _recreate_with_another_selector(env: dict[str, Any], name: str) -> None:
    env["apps"].delete_namespaced_deployment(name, NS)
    wait_for(
        f"{name} to be deleted",
        lambda: (
            not env["apps"]
            .list_namespaced_deployment(NS, field_selector=f"metadata.name={name}")
            .items
        ),
    )
    env["apps"].create_namespaced_deployment(
        NS, _probed_deployment(name, {"app": name, "tier": "other"})
    )


TAMPERS: dict[str, tuple[Any, list[str]]] = {
    "scaled-to-zero": (
        lambda env, n: env["apps"].patch_namespaced_deployment_scale(
            n, NS, {"spec": {"replicas": 0}}
        ),
        ["Deployment spec.replicas: 1 -> 0"],
    ),
    "probe-deleted": (
        lambda env, n: env["apps"].patch_namespaced_deployment(
            n,
            NS,
            [{"op": "remove", "path": "/spec/template/spec/containers/0/readinessProbe"}],
        ),
        ["Deployment spec.template.spec.containers.catalog.readinessProbe removed"],
    ),
    "service-repointed": (
        _rogue_behind_the_service,
        [
            "Service spec.selector.app:",
            "pods not rolled out by the operator answer the Service:",
        ],
    ),
    "recreated-with-another-selector": (
        _recreate_with_another_selector,
        [
            "was deleted and created again",
            'Deployment spec.selector.matchLabels.tier added ("other")',
        ],
    ),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_the_guard_names_each_change_of_a_rolled_out_target(
    env: dict[str, Any], tamper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sreforge.runtime.kube.guard on the API server's own objects: a rolled-out target left
    alone compares intact (the cluster's own status updates are not changes), and each way
    an agent with rights in its namespace could change it is named."""
    monkeypatch.setenv("KUBECONFIG", str(env["cp"].kubeconfig))
    kube = Kube()
    name = f"guard-{tamper}"[:40]
    env["apps"].create_namespaced_deployment(NS, _probed_deployment(name, {"app": name}))
    env["core"].create_namespaced_service(
        NS,
        {
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 8080, "targetPort": "http"}]},
        },
    )
    wait_for(f"{name} to roll out", lambda: kube.rollout_done(NS, name)[0], timeout=60)
    rolled_out = guard.snapshot(kube.target_view(NS, name))
    assert rolled_out["replicaSets"], rolled_out  # its pod is Ready behind the Service
    # left alone for a while (kwok's status heartbeats, the controllers' writes): intact
    for _ in range(3):
        time.sleep(1)
        assert guard.changes(rolled_out, kube.target_view(NS, name)) == []
    change, expected = TAMPERS[tamper]
    change(env, name)

    def named() -> list[str] | None:
        got = guard.changes(rolled_out, kube.target_view(NS, name))
        hit = all(any(e in g for g in got) for e in expected)
        return got if hit else None

    got = wait_for(f"the guard to name {tamper}", named, timeout=60)
    print(tamper, got)


def test_printer_columns(env: dict[str, Any]) -> None:
    wait_cond(env, "incidents", "inc-a", "Injected")
    out = env["cp"].kubectl("get", "incidents", "-n", NS).stdout
    header = out.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "SCENARIO", "ALERT", "SCORE", "PASSED", "AGE"], out
    row = next(line for line in out.splitlines() if line.startswith("inc-a "))
    assert "Injected" in row
    assert SCENARIO.name in row
    assert SCENARIO.target_alert in row


def test_submission_for_unknown_incident_is_refused(env: dict[str, Any]) -> None:
    submit(env, "sub-orphan", "no-such-incident", "")
    c = wait_cond(env, "submissions", "sub-orphan", "Accepted")
    assert (c["status"], c["reason"]) == ("False", "IncidentNotFound"), c
    assert "no-such-incident" in c["message"]


def test_bad_patch_is_red_ci_with_the_reason(env: dict[str, Any]) -> None:
    wait_cond(env, "incidents", "inc-a", "Injected")
    bad = (
        "diff --git a/../etc/passwd b/../etc/passwd\n--- a/../etc/passwd\n"
        "+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n"
    )
    submit(env, "sub-escape", "inc-a", bad)
    c = wait_cond(env, "submissions", "sub-escape", "CIPassed")
    assert (c["status"], c["reason"]) == ("False", "PatchRejected"), c
    assert "escapes the workspace" in c["message"]
    st = get(env, "submissions", "sub-escape")["status"]
    assert st["passed"] is False
    assert st["reason"] == "PatchRejected"
    assert "escapes the workspace" in st["ciFeedback"]
    assert st["signals"]["ci_green"]["credit"] == 0
    graded = cond(get(env, "submissions", "sub-escape"), "Graded")
    assert graded is not None
    assert (graded["status"], graded["reason"]) == ("True", "PatchRejected"), graded
    env["cp"].kubectl(
        "wait", "-n", NS, "--for=condition=Graded", "--timeout=5s", "submission/sub-escape"
    )
    (ev,) = domain_events(env, "sub-escape", "Submission")
    assert (ev.type, ev.reason) == ("Warning", "PatchRejected")
    assert ev.involved_object.uid == get(env, "submissions", "sub-escape")["metadata"]["uid"]
    assert "escapes the workspace" in ev.message

    protected = "--- a/tests/test_app.py\n+++ b/tests/test_app.py\n@@ -1 +1 @@\n-x\n+y\n"
    submit(env, "sub-protected", "inc-a", protected)
    c = wait_cond(env, "submissions", "sub-protected", "CIPassed")
    assert c["reason"] == "PatchRejected"
    assert "protected paths: tests/test_app.py" in c["message"]
    # a refused patch is not stored for a grader
    assert stored_patch(env, "inc-a-patch-sub-escape") is None
    assert stored_patch(env, "inc-a-patch-sub-protected") is None


def test_submissions_wait_queued_before_the_hand_off(env: dict[str, Any]) -> None:
    wait_cond(env, "incidents", "inc-a", "Injected")
    fix = FIX.read_text()
    submit(env, "sub-q1", "inc-a", fix)
    submit(env, "sub-q2", "inc-a", "")
    for name in ("sub-q1", "sub-q2"):
        c = wait_cond(env, "submissions", name, "Accepted")
        assert (c["status"], c["reason"]) == ("False", "Queued"), c
        graded = cond(get(env, "submissions", name), "Graded")
        assert graded is not None
        assert (graded["status"], graded["reason"]) == ("False", "Queued"), graded
    time.sleep(3)  # give a wrong grader the chance to pick one up: neither may start
    for name in ("sub-q1", "sub-q2"):
        st = get(env, "submissions", name)["status"]
        assert cond({"status": st}, "Accepted")["reason"] == "Queued"  # type: ignore[index]
        assert "passed" not in st
    assert get(env, "incidents", "inc-a")["status"]["loop"]["state"]["phase"] == "AwaitingFire"
    # intake stored each vetted patch, owned by the Incident, for the CI Job and the overlay
    cm = env["core"].read_namespaced_config_map("inc-a-patch-sub-q1", NS)
    assert cm.data["patch.diff"] == fix
    assert cm.data["files.txt"].splitlines() == ci.vet_patch(fix, SCENARIO.protected)
    assert cm.metadata.owner_references[0].name == "inc-a"
    assert env["core"].read_namespaced_config_map("inc-a-patch-sub-q2", NS).data == {
        "patch.diff": "",
        "files.txt": "",
    }
    # made again under the same name with another patch: the new patch is the one stored
    env["custom"].delete_namespaced_custom_object(GROUP, VERSION, NS, "submissions", "sub-q2")
    submit(env, "sub-q2", "inc-a", fix)
    wait_for(
        "the new sub-q2's patch to be stored",
        lambda: stored_patch(env, "inc-a-patch-sub-q2") == fix,
    )
    c = wait_cond(env, "submissions", "sub-q2", "Accepted")
    assert (c["status"], c["reason"]) == ("False", "Queued"), c


def test_fire_timeout_finishes_and_refuses_late_submissions(env: dict[str, Any]) -> None:
    make_target(env, "catalog-b")
    make_incident(env, "inc-b", "catalog-b", fire_timeout=5)
    submit(env, "sub-b-early", "inc-b", "")
    # what a user scripts: wait for the run to be over, whatever the outcome
    env["cp"].kubectl(
        "wait",
        "-n",
        NS,
        "--for=condition=Finished",
        "--timeout=120s",
        "incident/inc-b",
        timeout=150,
    )
    done = wait_cond(env, "incidents", "inc-b", "Succeeded", timeout=120)
    assert (done["status"], done["reason"]) == ("False", "AlertNeverFired"), done
    inc = get(env, "incidents", "inc-b")
    finished = cond(inc, "Finished")
    assert finished is not None
    assert (finished["status"], finished["reason"]) == ("True", "AlertNeverFired"), finished
    # every condition tells the end state: injected, never fired, never handed off
    assert cond(inc, "Injected")["status"] == "True"  # type: ignore[index]
    firing = cond(inc, "AlertFiring")
    assert firing is not None
    assert (firing["status"], firing["reason"]) == ("False", "AlertNeverFired"), firing
    assert cond(inc, "AwaitingSubmission")["status"] == "False"  # type: ignore[index]
    assert not [c for c in inc["status"]["conditions"] if c["status"] == "Unknown"]
    st = inc["status"]
    assert st["phase"] == "Failed"
    assert st["verdict"]["passed"] is False
    assert st["verdict"]["reason"] == "AlertNeverFired"
    assert st["loop"]["finished"] is True
    assert "brief" not in st
    # the queued one learns the run is over; so does one created afterwards
    wait_for(
        "the early Submission to be refused",
        lambda: (
            cond(get(env, "submissions", "sub-b-early"), "Accepted")["reason"]  # type: ignore[index]
            == "IncidentFinished"
        ),
    )
    never = cond(get(env, "submissions", "sub-b-early"), "Graded")
    assert never is not None
    assert (never["status"], never["reason"]) == ("False", "IncidentFinished"), never
    # an Event on each phase the run went through and one on its verdict, a Warning
    evs = domain_events(env, "inc-b")
    assert sorted(e.reason for e in evs if e.type == "Normal") == [
        "AwaitingFire",
        "Injecting",
        "Restoring",
    ], [(e.type, e.reason) for e in evs]
    warnings = dict(sorted((e.reason, e.message) for e in evs if e.type == "Warning"))
    assert sorted(warnings) == ["AlertNeverFired", "Done"], warnings
    assert SCENARIO.target_alert in warnings["AlertNeverFired"]
    assert all(e.involved_object.uid == inc["metadata"]["uid"] for e in evs)
    (refusal,) = domain_events(env, "sub-b-early", "Submission")
    assert (refusal.type, refusal.reason) == ("Warning", "IncidentFinished")
    wait_for(
        "the refused Submission's stored patch to be deleted",
        lambda: stored_patch(env, "inc-b-patch-sub-b-early") is None,
    )
    submit(env, "sub-b-late", "inc-b", "")
    c = wait_cond(env, "submissions", "sub-b-late", "Accepted")
    assert (c["status"], c["reason"]) == ("False", "IncidentFinished"), c
    # the load stopped with the run (the case's finished fresh-state Job stays, owned by
    # the Incident, until it is deleted)
    wait_for("the load Job to be deleted", lambda: not load_jobs(env, "inc-b"))


def test_a_control_window_holds_the_load_on_the_healthy_build_first(env: dict[str, Any]) -> None:
    """spec.controlSeconds: the target's pods are the run's (labelled) and its load runs,
    on the healthy build, before the regressed one is swapped in; status.control says what
    the alerts did there (this Prometheus scrapes nothing: quiet, no latency seen). On real
    pods, with real series, tests/integration/node/test_real_node.py."""
    make_target(env, "catalog-w")
    make_incident(env, "inc-w", "catalog-w", controlSeconds=6)

    def in_window() -> bool:
        c = cond(get(env, "incidents", "inc-w"), "Injected") or {}
        return c.get("reason") == "ControlWindow"

    wait_for("the control window", in_window, 90)
    assert container_image(env, "catalog-w") == HEALTHY
    assert pod_incident(env, "catalog-w") == "inc-w"
    assert load_jobs(env, "inc-w")
    said = cond(get(env, "incidents", "inc-w"), "Injected")
    assert said is not None
    assert "for 6s before the injection" in said["message"], said
    wait_for(
        "the injection after the window",
        lambda: (cond(get(env, "incidents", "inc-w"), "Injected") or {}).get("status") == "True",
        60,
    )
    assert container_image(env, "catalog-w") == REGRESSED
    control = get(env, "incidents", "inc-w")["status"]["control"]
    assert control["seconds"] == 6
    assert (control["targetFired"], control["pagesFired"]) == (False, [])
    assert control["restarts"] == 0  # read from the Deployment's current pods
    assert control["p95ByRoute"] == {"load": {}, "probe": {}}
    assert [e.reason for e in domain_events(env, "inc-w")].count("ControlWindow") == 1
    env["custom"].delete_namespaced_custom_object(GROUP, VERSION, NS, "incidents", "inc-w")


def test_the_run_ends_when_its_load_could_no_longer_hold_a_case(env: dict[str, Any]) -> None:
    """The load stops by itself after load.durationSeconds: once what is left of it could
    not hold a fix through its clear budget, window and soak, the run ends Inconclusive and
    says which setting, rather than wait for Submissions it would grade blind."""
    make_target(env, "catalog-l")
    make_incident(
        env,
        "inc-l",
        "catalog-l",
        load={"rate": 5, "durationSeconds": 30},
        verify={
            "fireTimeoutSeconds": 600,
            "sustainSeconds": 10,
            "clearBudgetSeconds": 10,
            "soakSeconds": [0, 0],
        },
    )
    wait_for(
        "the run to end",
        lambda: (cond(get(env, "incidents", "inc-l"), "Finished") or {}).get("status") == "True",
        120,
    )
    done = cond(get(env, "incidents", "inc-l"), "Finished")
    assert done is not None
    assert done["reason"] == "Inconclusive", done
    st = get(env, "incidents", "inc-l")["status"]
    assert st["verdict"]["reason"] == "Inconclusive"
    ends = st["loop"]["state"]["load_ends_at"]
    assert ends is not None
    assert "load.durationSeconds" in done["message"], done
    # it ended when 20 s of load were left (clear budget and window), not at the fire timeout
    fired = cond(get(env, "incidents", "inc-l"), "AlertFiring")
    assert fired is not None
    assert "stops by itself in" in fired["message"], fired


def test_killed_operator_resumes_the_same_run(env: dict[str, Any]) -> None:
    make_target(env, "catalog-c")
    make_incident(env, "inc-c", "catalog-c", fire_timeout=60)
    wait_cond(env, "incidents", "inc-c", "Injected")
    before = get(env, "incidents", "inc-c")["status"]
    job_uid = env["batch"].read_namespaced_job("inc-c-load", NS).metadata.uid
    generation = env["apps"].read_namespaced_deployment("catalog-c", NS).metadata.generation
    finished = {
        i["metadata"]["name"]: cond(i, "Succeeded")
        for i in env["custom"].list_namespaced_custom_object(GROUP, VERSION, NS, "incidents")[
            "items"
        ]
        if (i.get("status") or {}).get("loop", {}).get("finished")
    }
    env["op"].kill()
    restarted = time.time()
    env["op"].start()

    def resumed_sampling() -> bool:
        samples = get(env, "incidents", "inc-c")["status"]["loop"]["state"]["samples"]
        return bool(samples) and samples[-1]["t"] > restarted

    wait_for("the restarted operator to sample the same run", resumed_sampling)
    # resumed, not restarted: the same load Job, no second injection rollout
    assert env["batch"].read_namespaced_job("inc-c-load", NS).metadata.uid == job_uid
    dep = env["apps"].read_namespaced_deployment("catalog-c", NS)
    assert dep.metadata.generation == generation
    done = wait_cond(env, "incidents", "inc-c", "Succeeded", timeout=150)
    assert done["reason"] == "AlertNeverFired", done
    after = get(env, "incidents", "inc-c")["status"]
    assert after["runId"] == before["runId"]
    state = after["loop"]["state"]
    assert state["injected_at"] == before["loop"]["state"]["injected_at"]
    assert state["verdict"]["reason"] == "AlertNeverFired"
    assert [c["type"] for c in after["conditions"]].count("Verified") == 1
    # the restarted operator loaded every finished run as it was and left its verdict alone
    assert finished, "no finished Incident before the restart (the module's earlier tests)"
    for name, before_restart in finished.items():
        assert cond(get(env, "incidents", name), "Succeeded") == before_restart, name
    # the timeout counted from the one injection, across the restart
    assert state["samples"][-1]["t"] - state["injected_at"] > 60
    # each log line once: kopf logs its startup activity once per start (a second root
    # handler, logging.basicConfig's, printed every line twice)
    log = env["op"].log.read_text(errors="replace")
    starts = log.count("--- operator start")
    assert starts >= 2
    assert log.count("Activity 'configure' succeeded") == starts, env["op"].tail()


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_operator_recovers_when_the_control_plane_restarts_mid_run(
    env: dict[str, Any], component: str
) -> None:
    """etcd or kube-apiserver stopped and started again while a run waits for its alert: the
    operator reconnects, keeps sampling and persisting the same run, sees a Submission made
    after the restart, and finishes the run once."""
    name = f"inc-r-{component.rsplit('-', maxsplit=1)[-1]}"
    make_target(env, f"catalog-{name}")
    make_incident(env, name, f"catalog-{name}", fire_timeout=75)
    wait_cond(env, "incidents", name, "Injected")
    before = get(env, "incidents", name)["status"]
    env["cp"].restart(component, down_seconds=5)
    restarted = time.time()

    def sampled_after_restart() -> bool:
        samples = get(env, "incidents", name)["status"]["loop"]["state"]["samples"]
        return bool(samples) and samples[-1]["t"] > restarted

    wait_for(
        f"the operator to persist samples after the {component} restart", sampled_after_restart
    )
    submit(env, f"{name}-sub", name, FIX.read_text())
    queued = wait_cond(env, "submissions", f"{name}-sub", "Accepted")
    assert (queued["status"], queued["reason"]) == ("False", "Queued"), queued
    done = wait_cond(env, "incidents", name, "Succeeded", timeout=150)
    assert done["reason"] == "AlertNeverFired", done
    after = get(env, "incidents", name)["status"]
    assert after["runId"] == before["runId"]
    assert [c["type"] for c in after["conditions"]].count("Verified") == 1
    assert env["op"].proc is not None
    assert env["op"].proc.poll() is None, env["op"].tail()  # it rode it out, no crash


def test_deleting_the_incident_collects_its_children(env: dict[str, Any]) -> None:
    make_target(env, "catalog-d")
    make_incident(env, "inc-d", "catalog-d", runner="k6")  # a Job and its script ConfigMap
    wait_cond(env, "incidents", "inc-d", "Injected")
    sel = "sreforge.dev/incident=inc-d"
    assert env["batch"].list_namespaced_job(NS, label_selector=sel).items
    cms = env["core"].list_namespaced_config_map(NS, label_selector=sel).items
    assert [c.metadata.name for c in cms] == ["inc-d-k6-script"]
    assert cms[0].metadata.owner_references[0].name == "inc-d"
    # k6 writes its results to the Incident's Prometheus, tagged with whose they are
    k6 = env["batch"].read_namespaced_job("inc-d-load", NS).spec.template.spec.containers[0]
    k6_env = {e.name: e.value for e in k6.env}
    assert k6_env["K6_PROMETHEUS_RW_SERVER_URL"] == env["prom"].url + "/api/v1/write"
    assert "--out" in k6.args
    assert "incident=inc-d" in k6.args
    # the scenario's Redis (dependencies = ["redis"]): the Incident's, and the target's URL
    for kind, read in (
        ("Deployment", env["apps"].read_namespaced_deployment),
        ("Service", env["core"].read_namespaced_service),
    ):
        owner = read("inc-d-redis", NS).metadata.owner_references[0]
        assert (owner.kind, owner.name) == ("Incident", "inc-d"), kind
    box = env["apps"].read_namespaced_deployment("catalog-d", NS).spec.template.spec.containers[0]
    assert {e.name: e.value for e in box.env or []}["REDIS_URL"] == (
        f"redis://inc-d-redis.{NS}.svc:6379/0"
    )
    submit(env, "sub-d", "inc-d", "")
    queued = wait_cond(env, "submissions", "sub-d", "Accepted")
    assert queued["reason"] == "Queued", queued
    env["custom"].delete_namespaced_custom_object(GROUP, VERSION, NS, "incidents", "inc-d")
    wait_for(
        "the Incident to be gone (the operator releases its finalizer)",
        lambda: (
            not [
                i
                for i in env["custom"].list_namespaced_custom_object(
                    GROUP, VERSION, NS, "incidents"
                )["items"]
                if i["metadata"]["name"] == "inc-d"
            ]
        ),
    )
    wait_for(
        "the garbage collector to delete the load Job, the script ConfigMap and the Redis",
        lambda: (
            not env["batch"].list_namespaced_job(NS, label_selector=sel).items
            and not env["core"].list_namespaced_config_map(NS, label_selector=sel).items
            and not env["apps"].list_namespaced_deployment(NS, label_selector=sel).items
            and not env["core"].list_namespaced_service(NS, label_selector=sel).items
        ),
    )
    # the target gets back the image it had before the injection
    wait_for("catalog-d to be healthy again", lambda: container_image(env, "catalog-d") == HEALTHY)
    assert pod_incident(env, "catalog-d") is None  # its series are no Incident's any more
    box = env["apps"].read_namespaced_deployment("catalog-d", NS).spec.template.spec.containers[0]
    assert "REDIS_URL" not in {e.name for e in box.env or []}  # the user's env, as it was
    # the waiting Submission learns it will never be graded
    c = wait_cond(env, "submissions", "sub-d", "Graded")
    assert (c["status"], c["reason"]) == ("False", "IncidentDeleted"), c


def test_deleting_a_finished_incident_gives_the_target_back(env: dict[str, Any]) -> None:
    """Finished (its daemon long gone), then deleted: the user's Deployment gets its own
    image back, and loses every trace of the run (labels the run put on its pods)."""
    make_target(env, "catalog-f")
    make_incident(env, "inc-f", "catalog-f", fire_timeout=5)
    wait_for(
        "inc-f to finish",
        lambda: (cond(get(env, "incidents", "inc-f"), "Finished") or {}).get("status") == "True",
        timeout=120,
    )
    assert container_image(env, "catalog-f") == REGRESSED
    # a label the run puts on its pods (a run scopes its telemetry by one)
    env["apps"].patch_namespaced_deployment(
        "catalog-f",
        NS,
        {"spec": {"template": {"metadata": {"labels": {"sreforge.dev/run": "inc-f"}}}}},
    )
    env["custom"].delete_namespaced_custom_object(GROUP, VERSION, NS, "incidents", "inc-f")
    wait_for(
        "catalog-f to get its own image back",
        lambda: container_image(env, "catalog-f") == HEALTHY,
        timeout=60,
    )
    tmpl = env["apps"].read_namespaced_deployment("catalog-f", NS).spec.template
    assert tmpl.metadata.labels == {"app": "catalog", "sreforge.dev/target": "catalog-f"}
    assert tmpl.metadata.annotations in (None, {})
    assert not tmpl.spec.init_containers
    assert not tmpl.spec.volumes
    wait_for(
        "the finished Incident to be gone",
        lambda: (
            not [
                i
                for i in env["custom"].list_namespaced_custom_object(
                    GROUP, VERSION, NS, "incidents"
                )["items"]
                if i["metadata"]["name"] == "inc-f"
            ]
        ),
    )


def _no_unknown_conditions(inc: dict[str, Any]) -> None:
    left = [c for c in inc["status"]["conditions"] if c["status"] == "Unknown"]
    assert not left, left


def wait_reason(
    env: dict[str, Any], name: str, type_: str, reason: str, timeout: float = 60.0
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        c = cond(get(env, "incidents", name), type_)
        return c if c is not None and c["reason"] == reason else None

    try:
        got: dict[str, Any] = wait_for(f"incidents/{name} {type_} reason {reason}", probe, timeout)
    except BaseException:
        print(env["op"].tail())
        raise
    return got


def load_jobs(env: dict[str, Any], incident: str) -> list[Any]:
    """The Incident's load and prober Jobs."""
    sel = f"sreforge.dev/incident={incident},sreforge.dev/role in (load,probe)"
    return list(env["batch"].list_namespaced_job(NS, label_selector=sel).items)


def test_a_missing_target_is_waited_for_changing_nothing(env: dict[str, Any]) -> None:
    """Created before its target (a GitOps sync in the wrong order): the Incident names what
    is missing, changes nothing, and injects once the Deployment and its Service appear."""
    make_incident(env, "inc-late", "catalog-late", fire_timeout=5, targetTimeoutSeconds=300)
    c = wait_reason(env, "inc-late", "Injected", "DeploymentNotFound")
    assert c["status"] == "False"
    assert sorted((e.type, e.reason) for e in domain_events(env, "inc-late")) == [
        ("Normal", "Injecting"),
        ("Warning", "DeploymentNotFound"),
    ]
    assert f"{NS}/catalog-late does not exist" in c["message"]
    assert "300s" in c["message"]
    st = get(env, "incidents", "inc-late")["status"]
    assert st["phase"] == "Injecting"
    assert cond({"status": st}, "Finished")["status"] == "False"  # type: ignore[index]
    assert not load_jobs(env, "inc-late")
    make_target(env, "catalog-late", service=False)
    c = wait_reason(env, "inc-late", "Injected", "ServiceNotFound", timeout=30)
    assert "catalog-late" in c["message"]
    time.sleep(6)  # one more look by the operator: it still changes nothing
    dep = env["apps"].read_namespaced_deployment("catalog-late", NS)
    assert (dep.metadata.generation, container_image(env, "catalog-late")) == (1, HEALTHY)
    assert not load_jobs(env, "inc-late")
    make_target(env, "catalog-late", deployment=False)
    done = wait_reason(env, "inc-late", "Injected", "RegressedBuildRolledOut", timeout=60)
    assert done["status"] == "True"
    assert container_image(env, "catalog-late") == REGRESSED
    assert load_jobs(env, "inc-late")


def test_a_target_that_never_appears_ends_inconclusive(env: dict[str, Any]) -> None:
    """The reviewers' case: an Incident without its Deployment. At the deadline it ends
    Inconclusive, every condition telling why, and `kubectl wait` sees it finish."""
    make_incident(env, "inc-gone", "catalog-never", targetTimeoutSeconds=6)
    env["cp"].kubectl(
        "wait",
        "-n",
        NS,
        "--for=condition=Finished",
        "--timeout=60s",
        "incident/inc-gone",
        timeout=90,
    )
    inc = get(env, "incidents", "inc-gone")
    st = inc["status"]
    assert st["phase"] == "Failed"
    assert st["verdict"]["reason"] == "Inconclusive"
    finished = cond(inc, "Finished")
    assert finished is not None
    assert (finished["status"], finished["reason"]) == ("True", "Inconclusive"), finished
    injected = cond(inc, "Injected")
    assert injected is not None
    assert (injected["status"], injected["reason"]) == ("False", "DeploymentNotFound"), injected
    assert f"{NS}/catalog-never does not exist" in injected["message"]
    assert "after 6s" in injected["message"]
    firing = cond(inc, "AlertFiring")
    assert firing is not None
    assert (firing["status"], firing["reason"]) == ("False", "NotInjected"), firing
    succeeded = cond(inc, "Succeeded")
    assert succeeded is not None
    assert (succeeded["status"], succeeded["reason"]) == ("False", "Inconclusive")
    assert "catalog-never" in succeeded["message"]
    _no_unknown_conditions(inc)
    assert not load_jobs(env, "inc-gone")


def test_an_unreachable_prometheus_is_named_and_nothing_changes(env: dict[str, Any]) -> None:
    make_target(env, "catalog-p")
    with socket.socket() as s:  # a port with nothing behind it
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    make_incident(env, "inc-p", "catalog-p", targetTimeoutSeconds=8, prometheusURL=dead)
    c = wait_reason(env, "inc-p", "Injected", "PrometheusUnreachable")
    assert dead in c["message"]
    reach = cond(get(env, "incidents", "inc-p"), "PrometheusReachable")
    assert reach is not None
    assert (reach["status"], reach["reason"]) == ("False", "Unreachable"), reach
    assert dead in reach["message"]
    assert "Connection" in reach["message"]  # requests' ConnectionError: refused
    done = wait_cond(env, "incidents", "inc-p", "Succeeded", timeout=60)
    assert done["reason"] == "Inconclusive", done
    inc = get(env, "incidents", "inc-p")
    assert cond(inc, "Injected")["reason"] == "PrometheusUnreachable"  # type: ignore[index]
    _no_unknown_conditions(inc)
    dep = env["apps"].read_namespaced_deployment("catalog-p", NS)
    assert (dep.metadata.generation, container_image(env, "catalog-p")) == (1, HEALTHY)


def test_a_pod_that_quota_forbids_is_a_harness_fault(env: dict[str, Any]) -> None:
    """The regressed build's pod cannot be created (ResourceQuota, enforced by the real
    apiserver and controller-manager): Inconclusive with the controller's own reason, well
    before the rollout's timeout."""
    ns = "sreforge-op-quota"
    env["cp"].kubectl("create", "namespace", ns)
    env["cp"].kubectl("create", "quota", "one-pod", "-n", ns, "--hard=pods=1")
    wait_for(
        "the quota's usage to be counted",
        lambda: env["core"].read_namespaced_resource_quota("one-pod", ns).status.used is not None,
    )
    make_target(env, "catalog-q", ns=ns)
    wait_for(
        "the healthy pod to count against the quota",
        lambda: (
            env["core"].read_namespaced_resource_quota("one-pod", ns).status.used.get("pods") == "1"
        ),
    )
    make_incident(env, "inc-q", "catalog-q", targetNamespace=ns)
    t0 = time.monotonic()
    done = wait_cond(env, "incidents", "inc-q", "Succeeded", timeout=90)
    assert (done["status"], done["reason"]) == ("False", "Inconclusive"), done
    assert "exceeded quota" in done["message"], done
    assert "FailedCreate" in done["message"], done
    assert time.monotonic() - t0 < SCENARIO.service.deploy_timeout_seconds + 20
    inc = get(env, "incidents", "inc-q")
    injected = cond(inc, "Injected")
    assert injected is not None
    assert injected["status"] == "False", injected
    assert "exceeded quota" in injected["message"]
    _no_unknown_conditions(inc)


def test_sreforge_submit_creates_a_queued_submission(env: dict[str, Any], tmp_path: Path) -> None:
    wait_cond(env, "incidents", "inc-a", "Injected")
    patch = tmp_path / "fix.diff"
    patch.write_text(FIX.read_text())
    rca = tmp_path / "rca.md"
    rca.write_text("The product cache was removed; every page scans the reviews table.\n")
    exe = Path(sys.executable).with_name("sreforge")
    kc = str(env["cp"].kubeconfig)
    args = [str(exe), "submit", "inc-a", "--patch", str(patch), "--rca", str(rca)]
    res = subprocess.run(
        [*args, "-n", NS, "--kubeconfig", kc],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    name = res.stdout.split("submission.sreforge.dev/", 1)[1].split()[0]
    assert name.startswith("inc-a-")
    sub = get(env, "submissions", name)
    assert sub["spec"]["patch"]["inline"] == FIX.read_text()
    assert sub["spec"]["rca"] == rca.read_text()
    c = wait_cond(env, "submissions", name, "Accepted")
    assert c["reason"] == "Queued", c
    # a missing file is one clear line, not a traceback
    res = subprocess.run(
        [str(exe), "submit", "inc-a", "--patch", str(tmp_path / "nope.diff"), "-n", NS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert "nope.diff" in res.stderr
    assert "Traceback" not in res.stderr


def test_scenario_incident_example_is_accepted(env: dict[str, Any]) -> None:
    path = SCENARIO.directory / "incident.yaml"
    doc = yaml.safe_load(path.read_text())
    IncidentSpec.model_validate(doc["spec"])
    ns = doc["metadata"]["namespace"]
    env["cp"].kubectl("create", "namespace", ns)
    out = env["cp"].kubectl("create", "--dry-run=server", "-f", str(path)).stdout
    assert "incident.sreforge.dev/stampede-1 created (server dry run)" in out, out


def scrape(env: dict[str, Any]) -> dict[tuple[str, str], float]:
    """The operator's /metrics: (name, the one label's value) -> value."""
    with urllib.request.urlopen(env["metrics"], timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, next(iter(s.labels.values()), "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_operator_metrics_count_incidents_by_phase_and_verdicts(env: dict[str, Any]) -> None:
    """Last in the module: Incidents by phase agree with the Incidents' own status, and the
    verdicts and handler calls of this operator process are counted."""

    def by_phase() -> dict[str, int]:
        items = env["custom"].list_namespaced_custom_object(GROUP, VERSION, NS, "incidents")
        phases = [(i.get("status") or {}).get("phase", "Pending") for i in items["items"]]
        return {p: phases.count(p) for p in set(phases)}

    def agree() -> bool:
        got = scrape(env)
        want = by_phase()
        return all(got.get(("sreforge_incidents", p), 0) == n for p, n in want.items()) and sum(
            v for (name, _), v in got.items() if name == "sreforge_incidents"
        ) == sum(want.values())

    wait_for("sreforge_incidents to agree with the Incidents' phases", agree, timeout=60)
    got = scrape(env)
    assert got[("sreforge_incidents", "Failed")] >= 3
    # the Incidents finished since the operator's last restart (the control-plane tests)
    assert got[("sreforge_verdicts_total", "AlertNeverFired")] >= 1
    assert got[("sreforge_verdicts_total", "Passed")] == 0
    assert got[("sreforge_reconcile_duration_seconds_count", "submission_created")] >= 1
