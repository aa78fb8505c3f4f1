"""A real control plane (tests/kubeenv.py) runs workloads on a kwok node.

Needs the binaries of hack/k8s-tools.sh; skipped, with the command to build
them, when they are not there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.kubeenv import ControlPlane, wait_for

pytestmark = pytest.mark.kube

NS = "sreforge-it"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[Any]:
    from kubernetes import config  # noqa: PLC0415

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def namespace(api: Any) -> str:
    from kubernetes import client  # noqa: PLC0415

    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    return NS


def test_apiserver_is_ready_and_versioned(control_plane: ControlPlane) -> None:
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = control_plane.request("GET", "/version")
    assert version["gitVersion"].startswith("v1."), version
    assert "v0.0.0" not in version["gitVersion"]
    out = control_plane.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert out == [f"node/{control_plane.node_name}"]


def test_deployment_pod_is_scheduled_to_kwok_node_and_ready(
    control_plane: ControlPlane, api: Any, namespace: str, record_property: Any
) -> None:
    from kubernetes import client  # noqa: PLC0415

    labels = {"app": "web"}
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]
                    },
                },
            },
        },
    )
    core = client.CoreV1Api(api)

    def ready_pod() -> Any:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        for pod in pods:
            conds = pod.status.conditions or []
            if any(c.type == "Ready" and c.status == "True" for c in conds):
                return pod
        return None

    pod = wait_for("a Ready pod of deployment web", ready_pod)
    since_start = time.monotonic() - control_plane.started_at
    assert pod.spec.node_name == control_plane.node_name
    assert pod.status.phase == "Running"
    assert pod.status.pod_ip
    apps = client.AppsV1Api(api)

    def available() -> Any:
        d = apps.read_namespaced_deployment("web", namespace)
        return d if d.status.available_replicas == 1 else None

    dep = wait_for("deployment web available", available)
    assert dep.status.ready_replicas == 1

    record_property("startup_seconds", control_plane.timings)
    record_property("ready_pod_seconds_since_start", round(since_start, 2))
    timings = ", ".join(f"{k}={v:.2f}s" for k, v in control_plane.timings.items())
    print(f"\ncontrol plane start-up: {timings}; first Ready pod {since_start:.2f}s after start")


def test_job_completes(api: Any, namespace: str) -> None:
    from kubernetes import client  # noqa: PLC0415

    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "once"},
            "spec": {
                "completions": 1,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "once", "image": "registry.k8s.io/pause:3.10"}],
                    }
                },
            },
        },
    )

    def complete() -> Any:
        job = batch.read_namespaced_job("once", namespace)
        conds = job.status.conditions or []
        return job if any(c.type == "Complete" and c.status == "True" for c in conds) else None

    job = wait_for("job once to complete", complete)
    assert job.status.succeeded == 1


def test_rbac_is_enforced(control_plane: ControlPlane, api: Any, namespace: str) -> None:
    from kubernetes import client  # noqa: PLC0415

    admin = control_plane.kubectl("auth", "can-i", "create", "deployments", "-n", namespace)
    assert admin.stdout.strip() == "yes"
    sa = f"system:serviceaccount:{namespace}:reader"

    def can_i(verb: str, resource: str) -> str:
        res = control_plane.kubectl(
            "auth", "can-i", verb, resource, "-n", namespace, f"--as={sa}", check=False
        )
        return res.stdout.strip()

    assert can_i("list", "pods") == "no"
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    wait_for("RBAC to allow list pods", lambda: can_i("list", "pods") == "yes", timeout=30)
    assert can_i("delete", "pods") == "no"
    assert can_i("list", "secrets") == "no"


def test_components_alive_and_memory(control_plane: ControlPlane, record_property: Any) -> None:
    time.sleep(5)  # let the work of the tests above settle
    rss = control_plane.rss_bytes()
    assert set(rss) == set(ControlPlane.COMPONENTS), rss
    record_property("rss_mib", {k: round(v / MiB) for k, v in rss.items()})
    total = sum(rss.values())
    parts = ", ".join(f"{k}={v / MiB:.0f}MiB" for k, v in rss.items())
    print(f"\ncontrol plane RSS: {parts}; total {total / MiB:.0f}MiB")
