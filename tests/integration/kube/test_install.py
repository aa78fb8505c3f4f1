"""The CRDs, the Helm chart and the kustomize base install on a real kube-apiserver.

Validation, the status subresource, printer columns and RBAC are the server's
own (tests/kubeenv.py), not a mock. Needs the binaries of hack/k8s-tools.sh;
skipped, with the command to build them, when they are not there.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.kubeenv import (
    BUILD_COMMAND,
    REPO_ROOT,
    ControlPlane,
    find_tools_bin,
    kube_scenarios,
    wait_for,
)
from tests.scenario_rules import write_relabelled_test

from sreforge import cli
from sreforge.api.resources import (
    API_VERSION,
    GROUP,
    VERSION,
    Condition,
    IncidentStatus,
    VerdictSummary,
)
from sreforge.load import k6series
from sreforge.runtime.kube import cadvisor
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.runtime.kube.render import render_ci_job, render_load
from sreforge.runtime.process import Managed, free_port
from sreforge.scenarios import load_scenario

pytestmark = pytest.mark.kube

CRDS = ("incidents.sreforge.dev", "submissions.sreforge.dev")
NS = "sreforge-install"
EXAMPLES = REPO_ROOT / "manifests" / "examples"
CHART = REPO_ROOT / "charts" / "sreforge"
HELM_AGENT_NS = "sreforge-helm-agents"
# the fake pods' IPs are on the loopback, so the bundled Prometheus' scrapes of them
# (test_bundled_prometheus_discovers_pods_...) never leave this machine
POD_CIDR = "127.1.0.0/24"


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> ControlPlane:
    """The CRDs of crds/ applied and Established."""
    control_plane.install_crds()
    control_plane.kubectl("create", "namespace", NS)
    return control_plane


@pytest.fixture(scope="module")
def custom(crds: ControlPlane) -> Iterator[Any]:
    from kubernetes import client, config  # noqa: PLC0415

    api_client = config.new_client_from_config(config_file=str(crds.kubeconfig))
    yield client.CustomObjectsApi(api_client)
    api_client.close()


@pytest.fixture(scope="module")
def helm(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Run the built helm with its caches in a temporary directory."""
    binary = control_plane.bin_dir / "helm"
    if not os.access(binary, os.X_OK):
        pytest.skip(f"helm is not built; build it with: {BUILD_COMMAND}")
    home = tmp_path_factory.mktemp("helm")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    return run


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    doc["metadata"]["namespace"] = NS
    return doc


def create(custom: Any, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = custom.create_namespaced_custom_object(GROUP, VERSION, NS, plural, body)
    return obj


def patch_incident_status(custom: Any, name: str, body: Any, **kw: Any) -> Any:
    return custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "incidents", name, body, **kw
    )


def refusal(custom: Any, plural: str, body: dict[str, Any]) -> str:
    """The apiserver's message when it refuses body (fails the test if it accepts it)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    with pytest.raises(ApiException) as info:
        create(custom, plural, body)
    assert info.value.status == 422, info.value.body
    message: str = json.loads(info.value.body)["message"]
    return message


# ---------------------------------------------------------------- CRDs
def test_crds_are_established(crds: ControlPlane) -> None:
    for name in CRDS:
        crd = crds.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", crd["status"]
        assert conditions["NamesAccepted"] == "True", crd["status"]
        # a non-structural schema would show up here
        assert conditions.get("NonStructuralSchema") in (None, "False"), crd["status"]
    resources = crds.request("GET", f"/apis/{GROUP}/{VERSION}")["resources"]
    by_name = {r["name"]: r for r in resources}
    assert set(by_name) == {"incidents", "incidents/status", "submissions", "submissions/status"}
    assert by_name["incidents"]["shortNames"] == ["inc"]
    assert by_name["submissions"]["shortNames"] == ["sub"]
    assert by_name["incidents"]["categories"] == ["sreforge"]


def _incident(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Incident",
        "metadata": {"generateName": "bad-"},
        "spec": spec,
    }


def _submission(patch: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Submission",
        "metadata": {"generateName": "bad-"},
        "spec": {"incidentRef": {"name": "x"}, "patch": patch},
    }


@pytest.mark.parametrize(
    ("plural", "body", "expected"),
    [
        ("incidents", _incident(), "spec.scenario: Required value"),
        ("incidents", _incident(scenario="Not_A_Label"), "spec.scenario in body should match"),
        (
            "incidents",
            _incident(scenario="s", load={"rate": 0}),
            "spec.load.rate in body should be greater than or equal to 1",
        ),
        (
            "incidents",
            _incident(scenario="s", load={"rate": 20001}),
            "spec.load.rate in body should be less than or equal to 20000",
        ),
        (
            "incidents",
            _incident(scenario="s", loadRunner="locust"),
            'spec.loadRunner: Unsupported value: "locust": supported values: "k6", "builtin"',
        ),
        (
            "incidents",
            _incident(scenario="s", verify={"passThresholdPercent": 0.85}),
            "spec.verify.passThresholdPercent in body must be of type integer",
        ),
        (
            "submissions",
            _submission({"inline": "x", "configMapKeyRef": {"name": "c", "key": "k"}}),
            "patch must set exactly one of inline or configMapKeyRef",
        ),
        (
            "submissions",
            _submission({}),
            "patch must set exactly one of inline or configMapKeyRef",
        ),
        (
            "submissions",
            _submission({"configMapKeyRef": {"name": "c"}}),
            "spec.patch.configMapKeyRef.key: Required value",
        ),
    ],
    ids=[
        "missing-scenario",
        "scenario-not-a-label",
        "rate-0",
        "rate-too-high",
        "bad-load-runner",
        "float-threshold",
        "both-patch-sources",
        "no-patch-source",
        "configmap-without-key",
    ],
)
def test_invalid_resources_are_refused(
    custom: Any, plural: str, body: dict[str, Any], expected: str
) -> None:
    message = refusal(custom, plural, body)
    assert expected in message, message


def test_valid_incident_defaults_and_status_subresource(custom: Any) -> None:
    body = example("incident.yaml")
    del body["spec"]["loadRunner"]
    created = create(custom, "incidents", body)
    name = created["metadata"]["name"]
    assert created["spec"]["loadRunner"] == "builtin"  # the CRD's default
    assert "status" not in created

    status = IncidentStatus(
        observed_generation=created["metadata"]["generation"],
        phase="Verified",
        alert="CatalogLatencyHigh",
        run_id="run-1",
        fired_time="2025-01-02T03:04:05Z",  # type: ignore[arg-type]
        brief="p99 latency of catalog is above 500ms.",
        verdict=VerdictSummary(passed=True, score=0.92, reason="Passed", submission="fix-1"),  # type: ignore[arg-type]
        loop={"step": "verify", "samples": [{"t": 1, "firing": []}]},
        conditions=[
            Condition(
                type="Succeeded",
                status="True",
                reason="Passed",
                message="The alert cleared and stayed cleared.",
                last_transition_time="2025-01-02T03:10:00Z",  # type: ignore[arg-type]
            )
        ],
    ).model_dump(by_alias=True, exclude_none=True, mode="json")
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "incidents", name, {"status": status, "spec": {"scenario": "other"}}
    )
    assert patched["spec"]["scenario"] == body["spec"]["scenario"]  # status ignores spec
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "incidents", name)
    assert got["status"]["loop"] == status["loop"]  # preserved, not pruned
    assert IncidentStatus.model_validate(got["status"]) == IncidentStatus.model_validate(status)

    # the main resource ignores status
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "incidents", name, {"status": {"phase": "Hacked"}}
    )
    again = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "incidents", name)
    assert again["status"]["phase"] == "Verified"


def test_condition_status_enum_is_enforced(custom: Any) -> None:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    created = create(custom, "incidents", _incident(scenario="enum-check"))
    bad = {
        "type": "Injected",
        "status": "Maybe",
        "reason": "X",
        "lastTransitionTime": "2025-01-02T03:04:05Z",
    }
    with pytest.raises(ApiException) as info:
        patch_incident_status(
            custom, created["metadata"]["name"], {"status": {"conditions": [bad]}}
        )
    message = json.loads(info.value.body)["message"]
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in message, message


def test_valid_submissions_are_accepted(custom: Any) -> None:
    for name in ("submission.yaml", "submission-configmap.yaml"):
        body = example(name)
        created = create(custom, "submissions", body)
        assert created["spec"] == body["spec"]
    sub_name = example("submission.yaml")["metadata"]["name"]
    status = {
        "passed": False,
        "score": 0.25,
        "reason": "CIRed",
        "ciFeedback": "FAILED tests/test_api.py::test_product",
        "signals": {
            "ci_green": {"value": False, "credit": 0, "weight": 0.25, "detail": "1 failed"},
            "time_to_clear": {"value": None, "credit": 0, "weight": 0.1},
            "alert_cleared": {"value": 12.5, "credit": 0.5, "weight": 0.35},
        },
        "diagnosis": {"anything": {"goes": [1, "two"]}},
        "conditions": [
            {
                "type": "CIPassed",
                "status": "False",
                "reason": "TestsFailed",
                "message": "1 test failed.",
                "lastTransitionTime": "2025-01-02T03:04:05Z",
            }
        ],
    }
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "submissions", sub_name, {"status": status}
    )
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "submissions", sub_name)
    assert got["status"]["signals"]["alert_cleared"]["value"] == 12.5
    assert got["status"]["signals"]["ci_green"]["value"] is False
    assert got["status"]["diagnosis"] == status["diagnosis"]
    assert got["status"]["reason"] == "CIRed"


def test_kubectl_get_shows_printer_columns(crds: ControlPlane, custom: Any) -> None:
    body = example("incident.yaml")
    body["metadata"]["name"] = "printed"
    create(custom, "incidents", body)
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NS,
        "incidents",
        "printed",
        {
            "status": {
                "phase": "AlertFiring",
                "alert": "CatalogLatencyHigh",
                "verdict": {"score": 0.5, "passed": False},
                "conditions": [
                    {
                        "type": "Succeeded",
                        "status": "Unknown",
                        "reason": "AwaitingSubmission",
                        "message": "Waiting for a fix.",
                        "lastTransitionTime": "2025-01-02T03:04:05Z",
                    }
                ],
            }
        },
    )
    out = crds.kubectl("get", "incidents", "printed", "-n", NS).stdout.splitlines()
    assert out[0].split() == ["NAME", "PHASE", "SCENARIO", "ALERT", "SCORE", "PASSED", "AGE"]
    row = out[1].split()
    assert row[:6] == [
        "printed",
        "AlertFiring",
        "latency-cache-stampede",
        "CatalogLatencyHigh",
        "0.5",
        "false",
    ]
    wide = crds.kubectl("get", "inc", "printed", "-n", NS, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-1] == "MESSAGE"
    assert "Waiting for a fix." in wide
    subs = crds.kubectl("get", "sub", "-n", NS).stdout.splitlines()
    assert subs[0].split() == ["NAME", "INCIDENT", "PASSED", "SCORE", "REASON", "AGE"]
    # the category lists both kinds
    both = crds.kubectl("get", "sreforge", "-n", NS, "-o", "name").stdout
    assert "incident.sreforge.dev/printed" in both
    assert "submission.sreforge.dev/" in both


# ---------------------------------------------------------------- chart and base
def test_helm_lint_strict(helm: Any) -> None:
    res = helm("lint", "--strict", str(CHART))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 chart(s) failed" in res.stdout


def test_helm_values_schema_refuses_unknown_values(helm: Any) -> None:
    res = helm("template", "x", str(CHART), "--set", "agent.namespace=Not_Valid")
    assert res.returncode != 0
    assert "at '/agent/namespace': 'Not_Valid' does not match pattern" in res.stderr, res.stderr
    typo = helm("template", "x", str(CHART), "--set", "replicas=2")
    assert typo.returncode != 0
    assert "additional properties 'replicas' not allowed" in typo.stderr, typo.stderr


def _dry_run(cp: ControlPlane, manifest: str) -> str:
    res = cp.kubectl(
        "apply",
        "--server-side",
        "--field-manager=sreforge-test",
        "--dry-run=server",
        "-f",
        "-",
        input_text=manifest,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_helm_template_is_accepted_by_the_server(crds: ControlPlane, helm: Any) -> None:
    crds.kubectl("create", "namespace", "sreforge-helm")
    res = helm("template", "sreforge", str(CHART), "-n", "sreforge-helm", "--include-crds")
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
            "Secret",  # the soak's secret, the operator's alone (templates/soak-secret.yaml)
            "Service",  # the Incidents' MCP tools (templates/mcp.yaml)
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    _assert_hardened(deployment)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (box,) = deployment["spec"]["template"]["spec"]["containers"]
    soak = next(e for e in box["env"] if e["name"] == "SREFORGE_SOAK_SECRET")
    assert soak["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "secret",
    }
    out = _dry_run(crds, res.stdout)
    assert "deployment.apps/sreforge-operator serverside-applied (server dry run)" in out, out


def test_kustomize_base_is_accepted_by_the_server(crds: ControlPlane) -> None:
    manifest = crds.kubectl("kustomize", str(REPO_ROOT / "manifests")).stdout
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    crd_docs = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert sorted(d["metadata"]["name"] for d in crd_docs) == sorted(CRDS)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "sreforge-system"
    _assert_hardened(deployment)
    crds.kubectl("create", "namespace", "sreforge-system")
    out = _dry_run(crds, manifest)
    assert "serverside-applied (server dry run)" in out
    agent = crds.kubectl("kustomize", str(REPO_ROOT / "manifests" / "agent")).stdout
    crds.kubectl("create", "namespace", "sreforge-agents")
    assert "role.rbac.authorization.k8s.io/sreforge-agent" in _dry_run(crds, agent)


def _assert_hardened(deployment: dict[str, Any]) -> None:
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["command"] == [
        "kopf",
        "run",
        "--standalone",
        "--all-namespaces",
        "--liveness=http://0.0.0.0:8080/healthz",
        "-m",
        "sreforge.handlers",
    ]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # the Jobs and init containers the operator makes run its own image, pulled alike
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SREFORGE_OPERATOR_IMAGE"] == container["image"]
    assert env["SREFORGE_OPERATOR_IMAGE_PULL_POLICY"] == container["imagePullPolicy"]


def test_chart_points_the_jobs_at_its_runner_image(helm: Any) -> None:
    """A plain install (no overrides) and an install with other images: the operator's
    load and prober Jobs and patch init containers run exactly the chart's runner image
    (no scenarios in it), pulled like the operator's own, never the operator's image."""
    scenario = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
    incident = {
        "metadata": {"name": "inc", "namespace": "ns", "uid": "u"},
        "spec": {"scenario": scenario.name},
    }
    version = _chart_app_version()
    for args, image, runner, policy in (
        (
            (),
            f"ghcr.io/sreforge/operator:{version}",
            f"ghcr.io/sreforge/runner:{version}",
            "IfNotPresent",
        ),
        (
            (
                "--set",
                "image.repository=registry.local/op",
                "--set",
                "image.tag=t1",
                "--set",
                "image.pullPolicy=Never",
                "--set",
                "runnerImage.repository=registry.local/run",
                "--set",
                "runnerImage.tag=t2",
            ),
            "registry.local/op:t1",
            "registry.local/run:t2",
            "Never",
        ),
    ):
        res = helm(
            "template", "sreforge", str(CHART), "--show-only", "templates/deployment.yaml", *args
        )
        assert res.returncode == 0, res.stderr
        (container,) = yaml.safe_load(res.stdout)["spec"]["template"]["spec"]["containers"]
        assert (container["image"], container["imagePullPolicy"]) == (image, policy)
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        cfg = OperatorConfig.from_env(env)
        load_job, probe_job = render_load(
            incident, scenario.load, "http://catalog:8080", "builtin", cfg
        )
        for job in (load_job, probe_job):
            (box,) = job["spec"]["template"]["spec"]["containers"]
            assert (box["image"], box["imagePullPolicy"]) == (runner, policy)
        ci_job = render_ci_job(incident, "sub", scenario, cfg, "cm")
        patch = ci_job["spec"]["template"]["spec"]["initContainers"][1]
        assert (patch["image"], patch["imagePullPolicy"]) == (runner, policy)


def test_chart_metrics_monitors(crds: ControlPlane, helm: Any) -> None:
    """The operator's metrics port by default; a PodMonitor, or a Service and a ServiceMonitor
    (monitoring.coreos.com/v1), that select the operator's pod and port when enabled."""

    def render(*args: str) -> list[dict[str, Any]]:
        res = helm("template", "sreforge", str(CHART), "-n", "sreforge-mon", *args)
        assert res.returncode == 0, res.stderr
        return [d for d in yaml.safe_load_all(res.stdout) if d]

    plain = render()
    assert not [d for d in plain if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    # the one Service by default is the MCP tools' (templates/mcp.yaml), not a metrics one
    assert [d["metadata"]["name"] for d in plain if d["kind"] == "Service"] == ["sreforge-mcp"]
    pod = _one(plain, "Deployment")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ports["metrics"] == 8081
    assert env["SREFORGE_METRICS_PORT"] == "8081"

    docs = render(
        "--set",
        "metrics.podMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=kube-prometheus",
        "--set",
        "metrics.port=9300",
    )
    labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pod_monitor = _one(docs, "PodMonitor")
    assert pod_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    (service,) = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] != "sreforge-mcp"
    ]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0] == {
        "name": "metrics",
        "port": 9300,
        "targetPort": "metrics",
        "protocol": "TCP",
    }
    service_monitor = _one(docs, "ServiceMonitor")
    assert service_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    selected = service_monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"][0]["port"] == "metrics"
    (container,) = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9300, "protocol": "TCP"} in container["ports"]
    # what the server knows without the Prometheus Operator's CRDs is accepted
    crds.kubectl("create", "namespace", "sreforge-mon")
    known = [d for d in docs if d["kind"] not in ("PodMonitor", "ServiceMonitor")]
    out = _dry_run(crds, yaml.safe_dump_all(known))
    assert "service/sreforge-operator-metrics serverside-applied (server dry run)" in out, out
    refused = helm("lint", "--strict", str(CHART), "--set", "metrics.podMonitor.interval=often")
    assert refused.returncode != 0


def _chart_app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


# ---------------------------------------------------------------- agent RBAC
def _apply_agent_rbac(cp: ControlPlane, helm: Any, source: str) -> str:
    """Apply the agent Role from the chart or the kustomize base; its ServiceAccount."""
    if source == "helm":
        cp.kubectl("create", "namespace", HELM_AGENT_NS)
        res = helm(
            "template",
            "sreforge",
            str(CHART),
            "-n",
            HELM_AGENT_NS,
            "--show-only",
            "templates/agent-rbac.yaml",
        )
        assert res.returncode == 0, res.stderr
        cp.kubectl("apply", "-f", "-", input_text=res.stdout)
        return f"system:serviceaccount:{HELM_AGENT_NS}:sreforge-agent"
    cp.kubectl("apply", "-k", str(REPO_ROOT / "manifests" / "agent"))
    return "system:serviceaccount:sreforge-agents:sreforge-agent"


@pytest.mark.parametrize("source", ["helm", "kustomize"])
def test_agent_role_grants_submissions_and_nothing_else(
    crds: ControlPlane, helm: Any, source: str
) -> None:
    who = _apply_agent_rbac(crds, helm, source)
    ns = who.split(":")[2]

    def can_i(verb: str, resource: str, *extra: str) -> str:
        res = crds.kubectl(
            "auth", "can-i", verb, resource, "-n", ns, f"--as={who}", *extra, check=False
        )
        return res.stdout.strip()

    wait_for("RBAC to allow create submissions", lambda: can_i("create", "submissions") == "yes")
    allowed = [
        ("get", "incidents"),
        ("list", "incidents"),
        ("watch", "incidents"),
        ("get", "submissions"),
        ("list", "submissions"),
    ]
    for verb, resource in allowed:
        assert can_i(verb, resource) == "yes", (verb, resource)
    denied = [
        ("patch", "deployments"),
        ("update", "deployments"),
        ("get", "secrets"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("get", "configmaps"),
        ("list", "configmaps"),
        ("watch", "configmaps"),
        ("create", "incidents"),
        ("delete", "submissions"),
        ("update", "submissions"),
        ("create", "pods"),
        ("create", "jobs"),
    ]
    for verb, resource in denied:
        assert can_i(verb, resource) == "no", (verb, resource)
    assert can_i("patch", "incidents", "--subresource=status") == "no"
    assert can_i("patch", "submissions", "--subresource=status") == "no"
    assert can_i("update", "incidents", "--subresource=status") == "no"
    assert can_i("update", "submissions", "--subresource=status") == "no"
    # nothing outside its own namespace
    other = crds.kubectl(
        "auth", "can-i", "create", "submissions", "-n", NS, f"--as={who}", check=False
    )
    assert other.stdout.strip() == "no"


# ---------------------------------------------------------------- bundled Prometheus
PROM_NS = "sreforge-helm-prom"
# the scenarios the chart ships (runtimes has "kube"); a local-only one has no rules there
SCENARIOS = sorted(
    p.parent.name
    for p in (REPO_ROOT / "scenarios").glob("*/rules.yml")
    if "kube" in load_scenario(p.parent).runtimes
)
# the k6 runner's recording rules and the cAdvisor memory rule, as the Prometheus pod mounts
# them: loaded whatever the scenarios
K6_RULES = "rules/runners/k6.yml"
MEMORY_RULES = "rules/cluster/target-memory.yml"


def _always() -> dict[str, str]:
    return {K6_RULES: k6series.rules_yaml(), MEMORY_RULES: cadvisor.rules_yaml()}


def _prometheus_docs(helm: Any, *args: str) -> list[dict[str, Any]]:
    """The chart rendered with prometheus.enabled, only the Prometheus' objects."""
    res = helm(
        "template",
        "sreforge",
        str(CHART),
        "-n",
        PROM_NS,
        "--set",
        "prometheus.enabled=true",
        "--show-only",
        "templates/prometheus.yaml",
        *args,
    )
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def test_chart_network_policies_select_the_operator_and_its_prometheus(
    crds: ControlPlane, helm: Any
) -> None:
    """The chart's NetworkPolicies select its own operator's and Prometheus' pods (their
    pod templates' labels), let Prometheus be queried by the operator and the agent
    namespace only, and tell the operator which pods scrape (the Incidents' policies let
    only those in); the server accepts them."""
    ns = "sreforge-np"
    res = helm(
        "template", "sreforge", str(CHART), "-n", ns, "--set", "prometheus.enabled=true",
        "--set", "agent.namespace=agents",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    pols = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert sorted(pols) == ["sreforge-operator", "sreforge-prometheus"]
    deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    op_labels = deps["sreforge-operator"]["spec"]["template"]["metadata"]["labels"]
    prom_labels = deps["sreforge-prometheus"]["spec"]["template"]["metadata"]["labels"]
    for name, labels in (("sreforge-operator", op_labels), ("sreforge-prometheus", prom_labels)):
        sel = pols[name]["podSelector"]["matchLabels"]
        assert sel.items() <= labels.items(), (name, sel, labels)
    other = pols["sreforge-operator"]["podSelector"]["matchLabels"]
    assert not other.items() <= prom_labels.items()  # each selects its own pods only
    (rule,) = pols["sreforge-prometheus"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]
    operator_peer, agents = rule["from"]
    assert operator_peer["podSelector"]["matchLabels"].items() <= op_labels.items()
    ns_label = {"kubernetes.io/metadata.name": "agents"}
    assert agents == {"namespaceSelector": {"matchLabels": ns_label}}
    # the operator's pod: its metrics and health ports, and the MCP tools' (each call
    # authorized by the API server: runtime/kube/mcp.py)
    ports = sorted(p["port"] for r in pols["sreforge-operator"]["ingress"] for p in r["ports"])
    assert ports == [8080, 8081, 8090]
    # the scraper the operator's Incident policies let in: this Prometheus' pods
    (container,) = deps["sreforge-operator"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    cfg = OperatorConfig.from_env({k: v for k, v in env.items() if v is not None})
    assert cfg.scraper_namespace == ns
    assert cfg.scraper_labels.items() <= prom_labels.items()
    assert cfg.runner != cfg.operator_image
    crds.kubectl("create", "namespace", ns)
    out = _dry_run(crds, yaml.safe_dump_all([d for d in docs if d["kind"] == "NetworkPolicy"]))
    assert "networkpolicy.networking.k8s.io/sreforge-prometheus serverside-applied" in out, out


def test_helm_lint_strict_with_bundled_prometheus(helm: Any) -> None:
    res = helm("lint", "--strict", str(CHART), "--set", "prometheus.enabled=true")
    assert res.returncode == 0, res.stdout + res.stderr


def test_bundled_prometheus_is_accepted_by_the_server(crds: ControlPlane, helm: Any) -> None:
    crds.kubectl("create", "namespace", PROM_NS)
    docs = _prometheus_docs(helm)
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]
    # the address incident.yaml's spec.prometheusURL names (in its namespace)
    service = _one(docs, "Service")
    assert service["metadata"]["name"] == "prometheus"
    assert service["spec"]["ports"][0]["port"] == 9090
    assert _one(docs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        # the kubelets' cAdvisor through the API server's node proxy (prometheus.cadvisor)
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]},
    ]
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    manifest = yaml.safe_dump_all(docs)
    out = _dry_run(crds, manifest)
    assert "deployment.apps/sreforge-prometheus serverside-applied (server dry run)" in out, out
    assert "service/prometheus serverside-applied (server dry run)" in out, out


def _rule_files(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The rule files the Prometheus pod mounts, by path under the config's directory."""
    data = _one(docs, "ConfigMap")["data"]
    volume = next(
        v
        for v in _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "config"
    )
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert set(items) == set(data), "every key of the ConfigMap is mounted, nothing else"
    return {path: data[key] for key, path in items.items() if key != "prometheus.yml"}


def test_bundled_prometheus_loads_every_bundled_scenarios_rules_by_default(helm: Any) -> None:
    """Incidents of different scenarios share one Prometheus: by default it has every
    bundled scenario's rules, each in its own file, byte for byte the scenario's own."""
    docs = _prometheus_docs(helm)
    config = yaml.safe_load(_one(docs, "ConfigMap")["data"]["prometheus.yml"])
    # relative to the mounted config file: the verbatim file, then one per scenario
    assert config["rule_files"] == [
        "rules/*.yml",
        "rules/scenarios/*.yml",
        "rules/runners/*.yml",
        "rules/cluster/*.yml",
    ]
    assert _rule_files(docs) == {
        **{
            f"rules/scenarios/{s}.yml": (REPO_ROOT / "scenarios" / s / "rules.yml").read_text()
            for s in SCENARIOS
        },
        **_always(),
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_bundled_prometheus_loads_the_scenarios_listed(helm: Any, scenario: str) -> None:
    docs = _prometheus_docs(helm, "--set", f"prometheus.scenarios={{{scenario}}}")
    rules_file = REPO_ROOT / "scenarios" / scenario / "rules.yml"
    assert _rule_files(docs) == {
        f"rules/scenarios/{scenario}.yml": rules_file.read_text(),
        **_always(),
    }
    # a changed rule set rolls the pod
    other = next(s for s in SCENARIOS if s != scenario)
    again = _prometheus_docs(helm, "--set", f"prometheus.scenarios={{{scenario},{other}}}")
    annotations = [
        d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for d in (_one(docs, "Deployment"), _one(again, "Deployment"))
    ]
    assert annotations[0] != annotations[1]


def _chart_promtool() -> Path:
    """The promtool of the Prometheus version the chart ships (hack/k8s-tools.sh)."""
    bin_dir = find_tools_bin()
    if bin_dir is None or not os.access(bin_dir / "promtool", os.X_OK):
        pytest.skip(f"promtool is not built; build it with: {BUILD_COMMAND}")
    promtool = bin_dir / "promtool"
    version = subprocess.run(
        [str(promtool), "--version"], capture_output=True, text=True, check=True
    ).stdout
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"version {values['prometheus']['image']['tag'].lstrip('v')} " in version, version
    return promtool


@pytest.mark.parametrize("labelled", [None, "itself", "another"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_rules_hold_in_the_prometheus_the_chart_ships(
    scenario: str, labelled: str | None, tmp_path: Path
) -> None:
    """The rule unit tests of tests/unit/test_scenario.py and test_rules_scope.py run with
    Debian's promtool (2.x, as local runs use); a cluster runs the chart's image, so they
    must hold there too: rules_test.yml as written, and with every input series labelled
    with the scenario itself (the same alerts) or another (none)."""
    promtool = _chart_promtool()
    cwd, test_file = REPO_ROOT / "scenarios" / scenario, "rules_test.yml"
    if labelled is not None:
        other = SCENARIOS[(SCENARIOS.index(scenario) + 1) % len(SCENARIOS)]
        label = scenario if labelled == "itself" else other
        cwd, test_file = tmp_path, write_relabelled_test(scenario, [label], tmp_path).name
    res = subprocess.run(
        [str(promtool), "test", "rules", test_file],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _refusal(helm: Any, *args: str) -> str:
    res = helm("template", "x", str(CHART), "--set", "prometheus.enabled=true", *args)
    assert res.returncode != 0, res.stdout
    stderr: str = res.stderr
    return stderr


def _write_prometheus_dir(
    directory: Path, config: dict[str, Any], rule_files: dict[str, str]
) -> Path:
    """The Prometheus pod's /etc/prometheus: its config file and the mounted rule files."""
    for path, text in rule_files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    return config_file


def test_bundled_prometheus_config_and_rules_pass_promtool(helm: Any, tmp_path: Path) -> None:
    """The rendered configuration with every bundled scenario's rules and a verbatim file,
    checked by the chart's promtool: the config, and every rule file it loads."""
    promtool = _chart_promtool()
    custom = tmp_path / "custom.yml"
    custom.write_text(
        "groups:\n  - name: catalog\n    rules:\n"
        '      - alert: Custom\n        expr: up{scenario=~"custom|"} == 0\n'
    )
    docs = _prometheus_docs(helm, "--set-file", f"prometheus.rules={custom}")
    config = yaml.safe_load(_one(docs, "ConfigMap")["data"]["prometheus.yml"])
    rule_files = _rule_files(docs)
    assert len(rule_files) == len(SCENARIOS) + 3  # the verbatim file, k6's and memory's
    # the cAdvisor job reads the pod's ServiceAccount token and CA (promtool wants them)
    secrets = tmp_path / "serviceaccount"
    secrets.mkdir()
    (cadvisor_job,) = [
        j for j in config["scrape_configs"] if j["job_name"] == cadvisor.CADVISOR_JOB
    ]
    for key, where in (("authorization", "credentials_file"), ("tls_config", "ca_file")):
        path = Path(cadvisor_job[key][where])
        assert path.parent == Path("/var/run/secrets/kubernetes.io/serviceaccount"), path
        (secrets / path.name).write_text("x")
        cadvisor_job[key][where] = str(secrets / path.name)
    etc = tmp_path / "etc"
    config_file = _write_prometheus_dir(etc, config, rule_files)
    checks = {
        "config": [str(promtool), "check", "config", str(config_file)],
        "rules": [str(promtool), "check", "rules", *sorted(str(etc / p) for p in rule_files)],
    }
    for what, argv in checks.items():
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0, f"check {what}: {res.stdout}{res.stderr}"
        for path in rule_files:  # each file checked (check config finds them by glob)
            assert str(etc / path) in res.stdout + res.stderr, f"check {what}: {path}"


def test_bundled_prometheus_refuses_rules_it_does_not_have(helm: Any, tmp_path: Path) -> None:
    unknown = _refusal(helm, "--set", "prometheus.scenarios={latency-cache-stampede,nope}")
    assert 'prometheus.scenarios: "nope" has no bundled rules' in unknown, unknown
    assert "latency-cache-stampede" in unknown  # it lists what it has
    assert "--set-file prometheus.rules=PATH" in unknown
    # none at all: no alert of any Incident could fire
    none = _refusal(helm, "--set", "prometheus.scenarios=null")
    assert "the bundled Prometheus has no rules" in none, none
    # the former single scenario is refused, with what to write instead
    former = _refusal(helm, "--set", "prometheus.scenario=latency-cache-stampede")
    assert "prometheus.scenario was replaced by prometheus.scenarios" in former, former
    assert "--set 'prometheus.scenarios={latency-cache-stampede}'" in former
    # rules given verbatim serve a scenario the chart does not bundle: beside the bundled
    # ones, or alone
    custom = tmp_path / "rules.yml"
    custom.write_text("groups: []\n")
    beside = _prometheus_docs(helm, "--set-file", f"prometheus.rules={custom}")
    files = _rule_files(beside)
    assert files.pop("rules/rules.yml") == "groups: []\n"
    assert files.pop(K6_RULES) == k6series.rules_yaml()
    assert files.pop(MEMORY_RULES) == cadvisor.rules_yaml()
    assert sorted(files) == [f"rules/scenarios/{s}.yml" for s in SCENARIOS]
    alone = _prometheus_docs(
        helm, "--set", "prometheus.scenarios=null", "--set-file", f"prometheus.rules={custom}"
    )
    assert _rule_files(alone) == {
        "rules/rules.yml": "groups: []\n",
        **_always(),
    }


def test_bundled_prometheus_receives_k6_remote_writes_only_when_told_to(helm: Any) -> None:
    """loadRunner k6 writes to the Incident's Prometheus: the chart's accepts remote writes
    with prometheus.remoteWriteReceiver=true, and not by default (any pod reaching it could
    write made-up load figures)."""
    flag = "--web.enable-remote-write-receiver"
    on_docs = _prometheus_docs(helm, "--set", "prometheus.remoteWriteReceiver=true")
    (on,) = _one(on_docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert flag in on["args"]
    off_docs = _prometheus_docs(helm)
    (off,) = _one(off_docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert flag not in off["args"]
    assert [a for a in on["args"] if a != flag] == off["args"]


SD_NS = "sreforge-prom-sd"


def _pod(
    name: str, app: str, annotations: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": app, **(labels or {})},
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]},
    }


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]


def test_bundled_prometheus_discovers_pods_and_labels_them_like_the_harness(
    crds: ControlPlane, helm: Any, tmp_path: Any
) -> None:
    """The chart's scrape config, run by the Prometheus version the chart ships.

    Debian's prometheus has no Kubernetes discovery, so this is the Go-built one of
    hack/k8s-tools.sh. In a cluster it finds pods through its ServiceAccount; here
    the only change to the rendered config is a kubeconfig for the test API server.
    The rules select ``job="loadgen"``: targets must be labelled as the local harness
    and the pod stand-in label theirs (job = the pod's ``app``, namespace, pod), plus
    ``incident`` from the pod's sreforge.dev/incident label, which the rules keep on
    every alert and the operator reads its Incident's by, and ``scenario`` from its
    sreforge.dev/scenario label, which each scenario's rules select on.
    """
    prometheus, promtool = crds.bin_dir / "prometheus", crds.bin_dir / "promtool"
    if not (os.access(prometheus, os.X_OK) and os.access(promtool, os.X_OK)):
        pytest.skip(f"prometheus is not built; build it with: {BUILD_COMMAND}")
    # the pods' job alone (cAdvisor's needs the in-cluster token and kubelets: kwok has none)
    docs = _prometheus_docs(
        helm,
        "--set",
        f"prometheus.namespaces={{{SD_NS}}}",
        "--set",
        "prometheus.cadvisor.enabled=false",
    )
    config = yaml.safe_load(_one(docs, "ConfigMap")["data"]["prometheus.yml"])
    (job,) = config["scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["namespaces"] == {"names": [SD_NS]}
    sd["kubeconfig_file"] = str(crds.kubeconfig)
    config_file = _write_prometheus_dir(tmp_path, config, _rule_files(docs))
    check = subprocess.run(
        [str(promtool), "check", "config", str(config_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    crds.kubectl("create", "namespace", SD_NS)
    scraped = {"prometheus.io/scrape": "true"}
    pods = {
        "loadgen-0": _pod(
            "loadgen-0",
            "loadgen",
            {**scraped, "prometheus.io/port": "9102", "prometheus.io/path": "/stats"},
            {"sreforge.dev/incident": "inc-1", "sreforge.dev/scenario": "latency-cache-stampede"},
        ),
        "catalog-0": _pod("catalog-0", "catalog", {**scraped, "prometheus.io/port": "8080"}),
        "quiet-0": _pod("quiet-0", "quiet", {}),
        "opted-out-0": _pod(
            "opted-out-0", "opted-out", {"prometheus.io/scrape": "false", "prometheus.io/port": "1"}
        ),
    }
    for body in pods.values():
        crds.kubectl("apply", "-n", SD_NS, "-f", "-", input_text=json.dumps(body))
    # the same annotations outside prometheus.namespaces: never discovered
    crds.kubectl("apply", "-n", NS, "-f", "-", input_text=json.dumps(pods["catalog-0"]))
    # a finished Job's pod is no target (kwok's stages complete Job pods)
    finished = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finished"},
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"app": "loadgen"},
                    "annotations": {**scraped, "prometheus.io/port": "9102"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "example.invalid/none:1"}],
                },
            }
        },
    }
    crds.kubectl("apply", "-n", SD_NS, "-f", "-", input_text=json.dumps(finished))

    def ips() -> dict[str, str] | None:
        out = crds.kubectl("get", "pods", "-n", SD_NS, "-o", "json").stdout
        got = {
            p["metadata"]["name"]: p["status"].get("podIP", "") for p in json.loads(out)["items"]
        }
        return got if all(got.get(n) for n in pods) else None

    pod_ips: dict[str, str] = wait_for("the pods to get IPs", ips)
    assert all(ip.startswith("127.1.0.") for ip in pod_ips.values()), pod_ips
    wait_for(
        "the Job to complete",
        lambda: (
            crds.kubectl(
                "get", "job", "finished", "-n", SD_NS, "-o", "jsonpath={.status.succeeded}"
            ).stdout
            == "1"
        ),
    )

    port = free_port()
    server = Managed(
        "prometheus (chart config)",
        [
            str(prometheus),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        log_path=tmp_path / "prometheus.log",
    )
    try:
        url = f"http://127.0.0.1:{port}"
        server.wait_http(f"{url}/-/ready", 60)

        def active() -> dict[str, dict[str, Any]] | None:
            targets = _get_json(f"{url}/api/v1/targets?state=active")["activeTargets"]
            got = {t["labels"].get("pod", ""): t for t in targets}
            return got if set(got) == {"loadgen-0", "catalog-0"} else None

        targets: dict[str, dict[str, Any]] = wait_for("the two annotated pods as targets", active)
        for name, app, port_, path in (
            ("loadgen-0", "loadgen", "9102", "/stats"),
            ("catalog-0", "catalog", "8080", "/metrics"),
        ):
            target = targets[name]
            assert target["labels"]["job"] == app, target
            assert target["labels"]["namespace"] == SD_NS, target
            assert target["scrapeUrl"] == f"http://{pod_ips[name]}:{port_}{path}", target
        assert targets["loadgen-0"]["labels"]["incident"] == "inc-1"
        assert targets["loadgen-0"]["labels"]["scenario"] == "latency-cache-stampede"
        assert "incident" not in targets["catalog-0"]["labels"]  # a pod of no Incident
        assert "scenario" not in targets["catalog-0"]["labels"]
        dropped = _get_json(f"{url}/api/v1/targets?state=dropped")["droppedTargets"]
        dropped_pods = {t["discoveredLabels"].get("__meta_kubernetes_pod_name") for t in dropped}
        assert {"quiet-0", "opted-out-0"} <= dropped_pods, dropped_pods
        assert any(p and p.startswith("finished-") for p in dropped_pods), dropped_pods
        namespaces = {t["discoveredLabels"].get("__meta_kubernetes_namespace") for t in dropped} | {
            t["labels"]["namespace"] for t in targets.values()
        }
        assert namespaces == {SD_NS}, namespaces

        # every bundled scenario's groups, each with its rules: a group name that repeats
        # across scenarios (e.g. `catalog`) is another group, in another file
        groups = _get_json(f"{url}/api/v1/rules")["groups"]
        loaded = [
            (Path(g["file"]).relative_to(tmp_path).as_posix(), g["name"], r["name"])
            for g in groups
            for r in g["rules"]
        ]
        expected = []
        for s in SCENARIOS:
            rules = yaml.safe_load((REPO_ROOT / "scenarios" / s / "rules.yml").read_text())
            expected += [
                (f"rules/scenarios/{s}.yml", g["name"], r["alert"])
                for g in rules["groups"]
                for r in g["rules"]
            ]
        # and the k6 runner's recording rules (the memory rule goes with prometheus.cadvisor)
        expected += [
            (K6_RULES, g["name"], r["record"])
            for g in k6series.recording_rules()["groups"]
            for r in g["rules"]
        ]
        assert sorted(loaded) == sorted(expected)
        assert len({(g["file"], g["name"]) for g in groups}) == len(groups)
        assert len({g["name"] for g in groups}) < len(groups)  # names do repeat
    finally:
        server.stop()


# ---------------------------------------------------------------- admission policy
def test_an_incident_is_refused_unless_its_creator_may_patch_the_target(
    crds: ControlPlane, helm: Any
) -> None:
    """The ValidatingAdmissionPolicy of manifests/ (the chart renders the same rules): alice
    may create Incidents in her namespace; one aimed at a Deployment she may not patch is
    refused, with the field and the reason, until she may."""
    policy = (REPO_ROOT / "manifests" / "admission-policy.yaml").read_text()
    rendered = helm("template", "sreforge", str(CHART), "--show-only",
                    "templates/admission-policy.yaml")  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    chart_docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    for mine, chart in zip(yaml.safe_load_all(policy), chart_docs, strict=True):
        assert mine["spec"] | {"policyName": None} == chart["spec"] | {"policyName": None}
    crds.kubectl("apply", "-f", "-", input_text=policy)
    own, other = "alice-ns", "shared-ns"
    for ns in (own, other):
        crds.kubectl("create", "namespace", ns)
    crds.kubectl("create", "role", "incidents", "-n", own, "--verb=create,get,update,patch",
                 "--resource=incidents.sreforge.dev")  # fmt: skip
    crds.kubectl("create", "rolebinding", "alice", "-n", own, "--role=incidents", "--user=alice")

    def incident(name: str, spec: dict[str, Any]) -> str:
        body = {"apiVersion": API_VERSION, "kind": "Incident",
                "metadata": {"name": name, "namespace": own},
                "spec": {"scenario": "latency-cache-stampede", **spec}}  # fmt: skip
        res = crds.kubectl("create", "--as=alice", "-f", "-", input_text=json.dumps(body),
                           check=False)  # fmt: skip
        return res.stderr if res.returncode else ""

    aimed = {"targetNamespace": other, "targetDeployment": "catalog"}
    # the policy is enforced once the apiserver has compiled it (and alice's Role counts)
    wait_for(
        "the policy to refuse",
        lambda: "ValidatingAdmissionPolicy" in incident("probe", aimed),
        timeout=30,
    )
    refused = incident("cross", aimed)
    assert "spec.targetNamespace" in refused
    assert "alice may not patch deployment catalog in namespace shared-ns" in refused
    # her own namespace, where she may not patch Deployments either: refused too
    assert "may not patch deployments in namespace alice-ns" in incident("own", {})
    crds.kubectl("create", "role", "patch", "-n", other, "--verb=patch",
                 "--resource=deployments.apps", "--resource-name=catalog")  # fmt: skip
    crds.kubectl("create", "rolebinding", "alice", "-n", other, "--role=patch", "--user=alice")
    wait_for("alice's new right to count", lambda: not incident("cross", aimed), timeout=30)
    # a Deployment she still may not patch there
    assert "deployment other" in incident("cross-2", {**aimed, "targetDeployment": "other"})
    crds.kubectl("delete", "-f", "-", input_text=policy)


def test_every_scenarios_target_and_incident_are_accepted_by_the_server(
    crds: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    """What docs/kubernetes.md has a user apply for a bundled scenario: `sreforge scenarios
    target NAME | kubectl apply -f -`, then its incident.yaml as shipped; the server takes
    both (a server-side dry run: its schemas, defaults and validation)."""
    crds.kubectl("create", "namespace", "sreforge-demo", check=False)
    for name in kube_scenarios():
        assert cli.main(["scenarios", "target", name]) == cli.EXIT_PASSED, name
        shipped = (REPO_ROOT / "scenarios" / name / "incident.yaml").read_text()
        out = _dry_run(crds, capsys.readouterr().out + "---\n" + shipped)
        target = yaml.safe_load(shipped)["spec"]["targetDeployment"]
        assert f"deployment.apps/{target} serverside-applied (server dry run)" in out, out
        assert "incident.sreforge.dev/" in out, out


# ------------------------------------------------- the operator's guarded writes
def test_a_status_write_that_lost_a_race_is_retried_not_a_harness_fault(
    crds: ControlPlane, custom: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kube.update_conditions patches the status with a JSON `test` of the resourceVersion
    it read. When another writer got in between, this apiserver answers 422 with a generic
    message and no details (it drops the failed test's text), which the operator took for
    a real error: a validation on the real node ended a Submission Inconclusive ("harness
    fault: (422) ... the server rejected our request"). It must read again and retry."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from sreforge.runtime.kube.client import Kube  # noqa: PLC0415

    body = example("incident.yaml")
    body["metadata"]["name"] = "raced"
    created = create(custom, "incidents", body)
    stale_rv = created["metadata"]["resourceVersion"]
    patch_incident_status(custom, "raced", {"status": {"phase": "Injecting"}})
    # what the apiserver says to a stale `test`: nothing that names the test
    with pytest.raises(ApiException) as info:
        patch_incident_status(
            custom,
            "raced",
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": stale_rv},
                {"op": "add", "path": "/status/phase", "value": "x"},
            ],
            _content_type="application/json-patch+json",
        )
    assert info.value.status == 422
    assert "test operation" not in str(info.value.body)

    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))
    kube = Kube()
    reads = []
    fresh = kube.get_incident

    def racing_read(ns: str, name: str) -> dict[str, Any] | None:
        """The first read is answered, then another writer changes the status."""
        got = fresh(ns, name)
        reads.append(got)
        if len(reads) == 1:
            patch_incident_status(custom, "raced", {"status": {"alert": "Other"}})
        return got

    monkeypatch.setattr(kube, "get_incident", racing_read)
    mine = Condition(
        type="Injected",
        status="True",
        reason="Injected",
        message="swapped in",
        last_transition_time="2026-12-06T15:00:00Z",  # type: ignore[arg-type]
    )
    kube.update_conditions("incidents", NS, "raced", [mine], {"phase": "Injected"})
    status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "incidents", "raced")["status"]
    assert status["phase"] == "Injected"
    assert status["alert"] == "Other"  # the other writer's field survives
    assert [c["type"] for c in status["conditions"]] == ["Injected"]
    assert len(reads) >= 2  # read again after the refusal


def test_a_status_write_the_server_finds_invalid_still_raises(
    crds: ControlPlane, custom: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 422 on an object nobody changed is the patch's own fault: raised, not retried."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from sreforge.runtime.kube.client import Kube  # noqa: PLC0415

    body = example("incident.yaml")
    body["metadata"]["name"] = "invalid-write"
    create(custom, "incidents", body)
    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))
    with pytest.raises(ApiException) as info:
        Kube().update_conditions("incidents", NS, "invalid-write", [], {"phase": 12345})
    assert info.value.status == 422
    assert "phase" in str(info.value.body)
