"""The comparison of the rolled-out target with what is there now (runtime/kube/guard.py):
pure, on the objects as the API server returns them."""

from __future__ import annotations

import copy
import json
from typing import Any

from sreforge.runtime.kube import guard

LABELS = {"app": "catalog"}


def deployment() -> dict[str, Any]:
    return {
        "metadata": {"name": "catalog", "namespace": "demo", "uid": "d-1", "generation": 3},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(LABELS)},
            "strategy": {"type": "RollingUpdate"},
            "revisionHistoryLimit": 10,
            "template": {
                "metadata": {
                    "labels": {**LABELS, "sreforge.dev/incident": "inc"},
                    "annotations": {"sreforge.dev/overlay": "fix"},
                },
                "spec": {
                    "initContainers": [
                        {"name": "sreforge-source", "image": "sreforge/catalog:s"},
                        {"name": "sreforge-patch", "image": "sreforge/runner:dev"},
                    ],
                    "containers": [
                        {
                            "name": "catalog",
                            "image": "sreforge/catalog:s",
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ],
                },
            },
        },
        "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 3},
    }


def service() -> dict[str, Any]:
    return {
        "metadata": {"name": "catalog", "uid": "s-1"},
        "spec": {
            "selector": dict(LABELS),
            "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
            "clusterIP": "10.96.0.20",
        },
    }


def pod(name: str, rs: str | None = "catalog-abc", ready: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if rs is not None:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": rs, "controller": True}]
    status = "True" if ready else "False"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def view() -> dict[str, Any]:
    return {"deployment": deployment(), "service": service(), "pods": [pod("catalog-abc-1")]}


def changed(edit: Any) -> list[str]:
    rolled_out = guard.snapshot(view())
    now = copy.deepcopy(view())
    edit(now)
    return guard.changes(rolled_out, now)


def test_an_intact_target_has_no_changes() -> None:
    def noise(v: dict[str, Any]) -> None:
        # what the cluster itself changes: status, bookkeeping, rollout strategy
        v["deployment"]["metadata"]["resourceVersion"] = "99"
        v["deployment"]["status"]["observedGeneration"] = 4
        v["deployment"]["spec"]["progressDeadlineSeconds"] = 600
        v["service"]["spec"]["clusterIP"] = "10.96.0.21"
        v["pods"].append(pod("catalog-old-1", rs="catalog-old", ready=False))  # terminating

    assert changed(noise) == []


def test_scaled_to_zero_is_named() -> None:
    def scale(v: dict[str, Any]) -> None:
        v["deployment"]["spec"]["replicas"] = 0
        v["deployment"]["status"]["readyReplicas"] = 0
        v["pods"] = []

    assert changed(scale) == ["Deployment spec.replicas: 1 -> 0"]


def test_a_deleted_readiness_probe_is_named() -> None:
    def unprobe(v: dict[str, Any]) -> None:
        del v["deployment"]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]

    (change,) = changed(unprobe)
    assert change.startswith(
        "Deployment spec.template.spec.containers.catalog.readinessProbe removed (was "
    )


def test_a_changed_selector_of_the_service_and_its_pods_are_named() -> None:
    def repoint(v: dict[str, Any]) -> None:
        v["service"]["spec"]["selector"] = {"app": "fast"}
        v["pods"] = [pod("fast-1", rs=None)]

    assert changed(repoint) == [
        'Service spec.selector.app: "catalog" -> "fast"',
        "pods not rolled out by the operator answer the Service: fast-1 (no ReplicaSet)",
    ]


def test_a_deployment_recreated_with_another_selector_is_named() -> None:
    def recreate(v: dict[str, Any]) -> None:
        dep = v["deployment"]
        dep["metadata"]["uid"] = "d-2"
        dep["spec"]["selector"] = {"matchLabels": {"app": "catalog", "tier": "x"}}
        v["pods"] = [pod("catalog-xyz-1", rs="catalog-xyz")]

    out = changed(recreate)
    assert out[0] == "Deployment demo/catalog was deleted and created again"
    assert 'Deployment spec.selector.matchLabels.tier added ("x")' in out
    assert out[-1] == (
        "pods not rolled out by the operator answer the Service: catalog-xyz-1 "
        "(ReplicaSet catalog-xyz)"
    )


def test_image_overlay_and_init_containers_are_compared() -> None:
    def swap(v: dict[str, Any]) -> None:
        tmpl = v["deployment"]["spec"]["template"]
        tmpl["spec"]["containers"][0]["image"] = "evil:1"
        tmpl["metadata"]["annotations"]["sreforge.dev/overlay"] = "other"
        tmpl["spec"]["initContainers"].pop()

    assert changed(swap) == [
        'Deployment spec.template.metadata.annotations.sreforge.dev/overlay: "fix" -> "other"',
        'Deployment spec.template.spec.containers.catalog.image: "sreforge/catalog:s" -> "evil:1"',
        "Deployment spec.template.spec.initContainers.sreforge-patch removed (was "
        '{"image":"sreforge/runner:dev","name":"sreforge-patch"})',
    ]


def test_a_paused_rollout_or_a_restart_is_a_change() -> None:
    def restart(v: dict[str, Any]) -> None:
        v["deployment"]["spec"]["paused"] = True
        tmpl = v["deployment"]["spec"]["template"]["metadata"]
        tmpl["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"

    assert changed(restart) == [
        "Deployment spec.paused: false -> true",
        "Deployment spec.template.metadata.annotations.kubectl.kubernetes.io/restartedAt "
        'added ("now")',
    ]


def test_deleted_objects_are_named() -> None:
    def delete(v: dict[str, Any]) -> None:
        v["deployment"] = None
        v["service"] = None
        v["pods"] = []

    assert changed(delete) == [
        "Deployment demo/catalog was deleted",
        "the Service in front of it was deleted",
    ]


def test_a_pod_that_stopped_being_ready_is_not_a_change() -> None:
    """Readiness is the fix's behaviour under load, graded by the oracle; the real node
    showed the reference fix's pod unready for a moment after its rollout."""

    def unready(v: dict[str, Any]) -> None:
        v["deployment"]["status"]["readyReplicas"] = 0
        v["pods"] = [pod("catalog-abc-1", ready=False)]

    assert changed(unready) == []


def test_the_snapshot_is_plain_json() -> None:
    snap = guard.snapshot(view())
    assert json.loads(json.dumps(snap)) == snap
    assert snap["replicaSets"] == ["catalog-abc"]


def test_differences_names_long_values_shortly() -> None:
    (out,) = guard.differences({"a": "x" * 500}, {"a": "y"}, "P")
    assert out.startswith('P.a: "xxx')
    assert "..." in out
    assert len(out) < 200


def test_a_change_made_and_undone_between_two_samples_is_named() -> None:
    def flip(v: dict[str, Any]) -> None:
        # scaled to zero and back: the spec is the same, the API server counted two writes
        v["deployment"]["metadata"]["generation"] = 5

    assert changed(flip) == ["Deployment spec was changed and changed back (generation 3 -> 5)"]
