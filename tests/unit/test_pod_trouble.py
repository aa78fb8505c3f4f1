"""Whose fault a pod that does not start is (sreforge.runtime.kube.trouble), on pod, Deployment
and Event bodies shaped as the API serves them (kubelet's reasons, controller's conditions)."""

from __future__ import annotations

from typing import Any

from sreforge.runtime.kube import trouble

AGENT = frozenset({"catalog"})


def pod(
    *,
    init: list[dict[str, Any]] | None = None,
    main: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "catalog-7d9f"},
        "status": {
            "conditions": conditions or [],
            "initContainerStatuses": init or [],
            "containerStatuses": main or [],
        },
    }


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def test_a_missing_image_is_the_harness_and_final_without_a_registry() -> None:
    msg = 'Container image "sreforge/catalog:regressed" is not present with pull policy of Never'
    (t,) = trouble.pod_troubles(pod(main=[waiting("catalog", "ErrImageNeverPull", msg)]), AGENT)
    assert t.harness  # the image is the harness's even in the agent's container
    assert (t.reason, t.message) == ("ErrImageNeverPull", msg)
    assert "container catalog" in str(t)
    assert "ErrImageNeverPull" in str(t)
    assert trouble.Watch().stuck([t], now=0.0) == t  # no retry mends it


def test_pull_backoff_and_config_errors_end_the_wait_after_the_grace() -> None:
    for reason in ("ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"):
        (t,) = trouble.pod_troubles(pod(init=[waiting("sreforge-patch", reason)]), AGENT)
        assert t.harness, reason
        w = trouble.Watch(grace=20)
        assert w.stuck([t], now=100.0) is None
        assert w.stuck([t], now=110.0) is None
        assert w.stuck([], now=115.0) is None  # it went away: the clock starts again
        assert w.stuck([t], now=116.0) is None
        assert w.stuck([t], now=136.0) == t


def test_oom_kill_is_the_harness_only_in_its_own_containers() -> None:
    killed = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    }
    ours = trouble.pod_troubles(pod(init=[{"name": "sreforge-source", **killed}]), AGENT)
    assert [(t.reason, t.harness) for t in ours] == [("OOMKilled", True)]
    theirs = trouble.pod_troubles(pod(main=[{"name": "catalog", **killed}]), AGENT)
    assert [(t.reason, t.harness) for t in theirs] == [("OOMKilled", False)]
    assert trouble.Watch(grace=0).stuck(theirs, now=0.0) is None


def test_the_agents_crash_is_not_a_harness_fault() -> None:
    crash = trouble.pod_troubles(
        pod(main=[waiting("catalog", "CrashLoopBackOff", "back-off")]), AGENT
    )
    assert [(t.reason, t.harness) for t in crash] == [("CrashLoopBackOff", False)]
    exited = {"name": "catalog", "state": {"terminated": {"exitCode": 3, "message": "boom"}}}
    (t,) = trouble.pod_troubles(pod(main=[exited]), AGENT)
    assert (t.reason, t.message, t.harness) == ("exited 3", "boom", False)
    starting = [waiting("catalog", "ContainerCreating"), waiting("x", "PodInitializing")]
    assert trouble.pod_troubles(pod(main=starting), AGENT) == []


def test_unschedulable_quota_and_failed_create_are_the_harness() -> None:
    unsched = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient memory.",
    }
    (t,) = trouble.pod_troubles(pod(conditions=[unsched]), AGENT)
    assert (t.reason, t.harness) == ("Unschedulable", True)
    assert "Insufficient memory" in str(t)
    dep = {
        "metadata": {"name": "catalog"},
        "status": {
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": 'pods "catalog-x" is forbidden: exceeded quota: pods',
                },
            ]
        },
    }
    (q,) = trouble.deployment_troubles(dep)
    assert q.harness
    assert "exceeded quota" in str(q)
    events = [
        {"reason": "SuccessfulCreate", "message": "Created pod"},
        {"reason": "FailedCreate", "message": "Error creating: exceeded quota"},
    ]
    (e,) = trouble.failed_create(events, "Job inc-ci-sub")
    assert (e.where, e.reason, e.harness) == ("Job inc-ci-sub", "FailedCreate", True)
