"""The operator's pod specs and bookkeeping as data (runtime/kube/), without a cluster.

The integration tests beside this file send these specs to a real kube-apiserver; this
module pins the properties a reviewer would otherwise check by eye: the overlay comes off
again exactly, the CI gate's result follows its containers, names stay DNS labels, and
the apply-patch entry point really applies (git apply) and refuses what the gate refuses.
"""

from __future__ import annotations

import copy
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.kubeenv import REPO_ROOT

from sreforge import loop
from sreforge.api.observation import AlertSample, CIStatus
from sreforge.api.resources import Condition
from sreforge.runtime.kube import applypatch, config, events, render, status
from sreforge.scenarios import load_scenario

SCENARIO = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
CFG = config.OperatorConfig()
INCIDENT: dict[str, Any] = {
    "metadata": {"name": "inc", "namespace": "ns", "uid": "u-1"},
    "spec": {"scenario": SCENARIO.name},
}


def deployment(working_dir: str | None = None) -> dict[str, Any]:
    box: dict[str, Any] = {"name": "catalog", "image": "sreforge/catalog:healthy"}
    if working_dir:
        box["workingDir"] = working_dir
    return {
        "metadata": {"name": "catalog", "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "catalog"}},
                "spec": {"containers": [box, {"name": "sidecar", "image": "side:1"}]},
            }
        },
    }


def test_overlay_is_undone_exactly_by_the_baseline() -> None:
    for workdir in (None, "/app"):
        dep = deployment(workdir)
        run = {"incident": "inc", "scenario": "latency-cache-stampede"}
        base = render.overlay_template(dep, "catalog", CFG, None, workdir, None, [], **run)
        over = render.overlay_template(base, "catalog", CFG, "cm", workdir, "sub", ["tests"], **run)
        spec = over["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["initContainers"]] == ["sreforge-source", "sreforge-patch"]
        main = spec["containers"][0]
        assert main["image"] == "sreforge/catalog:latency-cache-stampede"
        assert main["workingDir"] == config.OVERLAY_SRC
        assert spec["containers"][1] == {"name": "sidecar", "image": "side:1"}  # untouched
        patch_cmd = spec["initContainers"][1]["command"]
        assert patch_cmd[-2:] == ["--protected", "tests"]
        again = render.overlay_template(over, "catalog", CFG, None, workdir, None, [], **run)
        assert again == base
        assert (
            render.overlay_template(
                copy.deepcopy(base), "catalog", CFG, None, workdir, None, [], **run
            )
            == base
        )


def test_the_targets_pods_carry_the_incident_while_it_runs_and_lose_it_after() -> None:
    """Injection, overlay and the restore between Submissions label the target's pods
    with the Incident and its scenario (its scrape targets get `incident` and `scenario`);
    the baseline without an Incident (restore on delete) takes both labels off and leaves
    the others alone."""
    dep = deployment()
    labels = {"app": "catalog"}
    run = {"incident": "inc", "scenario": SCENARIO.name}
    inc = {**labels, config.INCIDENT_LABEL: "inc", config.SCENARIO_LABEL: SCENARIO.name}
    injected = render.overlay_template(dep, "catalog", CFG, None, None, None, [], **run)
    assert injected["spec"]["template"]["metadata"]["labels"] == inc
    over = render.overlay_template(injected, "catalog", CFG, "cm", None, "sub", [], **run)
    assert over["spec"]["template"]["metadata"]["labels"] == inc
    back = render.overlay_template(over, "catalog", CFG, None, None, None, [], **run)
    assert back == injected
    gone = render.overlay_template(over, "catalog", CFG, None, None, None, [])
    assert gone["spec"]["template"]["metadata"]["labels"] == labels
    assert dep["spec"]["template"]["metadata"]["labels"] == labels  # the input is not changed
    # the load's pods, the prober's (either runner) and the CI's carry the same labels
    for runner in ("builtin", "k6"):
        objs = render.render_load(
            INCIDENT,
            SCENARIO.load,
            "http://catalog:8080",
            runner,
            CFG,
            prometheus_url="http://prom:9090",
        )
        jobs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Job"}
        assert sorted(jobs) == sorted([render.load_job_name("inc"), render.probe_job_name("inc")])
        for name, app in (
            (render.load_job_name("inc"), "loadgen"),
            (render.probe_job_name("inc"), "prober"),
        ):
            pod_labels = jobs[name]["spec"]["template"]["metadata"]["labels"]
            assert pod_labels[config.INCIDENT_LABEL] == "inc", (runner, name)
            assert pod_labels[config.SCENARIO_LABEL] == SCENARIO.name, (runner, name)
            assert pod_labels["app"] == app, (runner, name)  # the scrape's `job`
    ci = render.render_ci_job(INCIDENT, "sub-1", SCENARIO, CFG, "inc-patch-sub-1")
    ci_labels = ci["spec"]["template"]["metadata"]["labels"]
    assert ci_labels[config.INCIDENT_LABEL] == "inc"
    assert ci_labels[config.SCENARIO_LABEL] == SCENARIO.name


def test_telemetry_scope_is_the_incident_in_its_and_its_targets_namespace() -> None:
    assert render.telemetry_scope("inc", "ns", "ns") == {"namespace": ["ns"], "incident": "inc"}
    # the load runs in the Incident's namespace, the target in its own
    assert render.telemetry_scope("inc", "ns", "apps") == {
        "namespace": ["apps", "ns"],
        "incident": "inc",
    }


def test_ci_job_runs_pristine_tests_with_the_patch_and_a_locked_down_pod() -> None:
    job = render.render_ci_job(INCIDENT, "sub-1", SCENARIO, CFG, "inc-patch-sub-1")
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    for box in pod["initContainers"] + pod["containers"]:
        sc = box["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    script = pod["containers"][0]["command"][2]
    assert "python -m pytest -q -p no:cacheprovider tests" in script
    assert '"$TERMINATION_LOG"' in script
    assert {v["name"] for v in pod["volumes"]} == {"work", "tmp", "patch"}


def test_ci_result_follows_the_containers() -> None:
    cmd = list(SCENARIO.service.test_command)
    green = status.ci_result_of(
        True, {"containers": [{"name": "test", "exitCode": 0, "message": "25 passed"}]}, cmd, 1, []
    )
    assert (green.status, green.output_tail) == (CIStatus.GREEN, "25 passed")
    rejected = status.ci_result_of(
        False,
        {"containers": [{"name": "patch", "exitCode": 1, "message": "does not apply"}]},
        cmd,
        1,
        [],
    )
    assert (rejected.status, rejected.reason) == (CIStatus.REJECTED, "does not apply")
    red = status.ci_result_of(
        False, {"containers": [{"name": "test", "exitCode": 1, "message": "1 failed"}]}, cmd, 1, []
    )
    assert red.status is CIStatus.RED
    assert "exited 1" in red.reason
    assert red.output_tail == "1 failed"
    deadline = status.ci_result_of(False, {"jobReason": "DeadlineExceeded: too long"}, cmd, 1, [])
    assert deadline.status is CIStatus.ERROR
    assert "DeadlineExceeded" in deadline.reason


def test_child_names_are_dns_labels() -> None:
    name = render.child_name("i" * 60, "ci", "s" * 60)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name != render.child_name("i" * 60, "ci", "s" * 59 + "t")


def test_apply_patch_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The init container's `python -m sreforge.runtime.kube apply-patch TREE PATCH`."""
    tree = tmp_path / "src"
    shutil.copytree(REPO_ROOT / "substrate" / "catalog", tree)
    assert applypatch.main(["apply-patch", str(tree), str(SCENARIO.regression_path)]) == 0
    fix = SCENARIO.directory / "fixes" / "restore-simplecache.patch"
    assert applypatch.main(["apply-patch", str(tree), str(fix), "--protected", "tests"]) == 0
    assert "SimpleCache" in (tree / "catalog" / "app.py").read_text()
    bad = tmp_path / "bad.diff"
    bad.write_text("--- a/tests/x.py\n+++ b/tests/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    term = tmp_path / "termination-log"
    monkeypatch.setenv("TERMINATION_LOG", str(term))
    assert applypatch.main(["apply-patch", str(tree), str(bad), "--protected", "tests"]) == 1
    assert "protected paths: tests/x.py" in term.read_text()


def test_conditions_keep_their_transition_time_until_the_status_changes() -> None:
    """cert-manager's rule: lastTransitionTime moves only when the status does."""
    then = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    old = status.condition("Accepted", False, "Queued", "waiting").model_copy(
        update={"last_transition_time": then, "observed_generation": 1}
    )
    other = status.condition("CIPassed", None, "Pending")
    same = status.set_condition([old, other], status.condition("Accepted", False, "Other"))
    assert [c.type for c in same] == ["Accepted", "CIPassed"]
    assert (same[0].reason, same[0].last_transition_time) == ("Other", then)
    assert same[0].observed_generation == 1  # no generation given: the old one stays
    flipped = status.set_condition(same, status.condition("Accepted", True, "Grading"), 2)
    assert flipped[0].status == "True"
    assert flipped[0].last_transition_time > then
    assert flipped[0].observed_generation == 2
    added = status.set_condition([old], status.condition("Verified", True, "Passed", "x" * 40_000))
    assert added[1].type == "Verified"
    assert added[1].observed_generation is None
    assert len(added[1].message) == status.MAX_MESSAGE
    wire = added[0].model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["lastTransitionTime"] == "2025-01-02T03:04:05Z"
    assert status.condition_of({"status": {"conditions": [wire]}}, "Accepted") == added[0]
    assert status.is_queued({"status": {"conditions": [wire]}})


def _run(*events: loop.Event) -> status.Persisted:
    p = status.Persisted(
        loop.RunState(run_id="r", target_alert=SCENARIO.target_alert, verify=SCENARIO.verify)
    )
    for e in events:
        loop.step(p.state, e)
    return p


def _by_type(conds: list[Condition]) -> dict[str, Condition]:
    return {c.type: c for c in conds}


def test_finished_conditions_tell_the_end_state() -> None:
    """Every condition true of how the run ended; Finished True whatever the outcome."""
    fault = "Deployment ns/catalog: Not Found"
    early = _by_type(
        status.finished_conditions(_run(loop.Start(t=0), loop.Fault(t=1, reason=fault)))
    )
    assert (early["Injected"].status, early["Injected"].reason) == ("False", "Inconclusive")
    assert fault in early["Injected"].message
    assert (early["AlertFiring"].status, early["AlertFiring"].reason) == ("False", "NotInjected")
    assert (early["Finished"].status, early["Finished"].reason) == ("True", "Inconclusive")
    assert (early["Succeeded"].status, early["Succeeded"].reason) == ("False", "Inconclusive")

    timeout = SCENARIO.verify.fire_timeout_seconds
    never = _run(
        loop.Start(t=0),
        loop.Injected(t=1),
        loop.Sampled(sample=AlertSample(t=timeout + 2, firing=frozenset())),
    )
    got = _by_type(status.finished_conditions(never))
    assert "Injected" not in got  # it was injected: its True condition stays
    assert (got["AlertFiring"].status, got["AlertFiring"].reason) == ("False", "AlertNeverFired")
    assert SCENARIO.target_alert in got["AlertFiring"].message
    assert (got["Finished"].status, got["Finished"].reason) == ("True", "AlertNeverFired")
    assert got["Succeeded"].status == "False"
    assert got["AwaitingSubmission"].status == "False"

    fired = _run(
        loop.Start(t=0),
        loop.Injected(t=1),
        loop.Sampled(sample=AlertSample(t=2, firing=frozenset({SCENARIO.target_alert}))),
        loop.Submitted(t=3),
        loop.Fault(t=4, reason="CI Job vanished"),
    )
    got = _by_type(status.finished_conditions(fired))
    assert "Injected" not in got
    assert "AlertFiring" not in got  # it did fire: its True condition stays
    assert (got["Finished"].status, got["Finished"].reason) == ("True", "Inconclusive")


def test_a_submission_is_graded_or_refused_never_left_pending() -> None:
    refused = _by_type(status.refused("IncidentFinished", "Incident x is finished"))
    assert (refused["Accepted"].status, refused["Graded"].status) == ("False", "False")
    assert refused["Graded"].reason == "IncidentFinished"
    v = _run(loop.Start(t=0), loop.Fault(t=1, reason="x")).state.verdict
    assert v is not None
    graded = status.graded_condition(v)
    assert (graded.type, graded.status, graded.reason) == ("Graded", "True", "Inconclusive")


def test_event_bodies_name_their_object_and_every_phase() -> None:
    inc = {"apiVersion": "sreforge.dev/v1alpha1", "kind": "Incident", **INCIDENT}
    body = events.event(inc, events.WARNING, "DeploymentNotFound", "x" * 5000)
    assert body["involvedObject"] == {
        "apiVersion": "sreforge.dev/v1alpha1",
        "kind": "Incident",
        "name": "inc",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert body["metadata"] == {"generateName": "inc.", "namespace": "ns"}
    assert (body["type"], body["reason"], len(body["message"])) == (
        "Warning",
        "DeploymentNotFound",
        1024,
    )
    p = _run()
    for phase in loop.Phase:
        p.state.phase = phase
        assert events.phase_message(p.state, "ns/catalog", "sub")
    passed = _run(loop.Start(t=0), loop.Fault(t=1, reason="x")).state.verdict
    assert passed is not None
    assert events.verdict_type(passed) == "Warning"
    assert events.verdict_type(passed.model_copy(update={"passed": True})) == "Normal"
