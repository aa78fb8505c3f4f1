"""Graded Submissions through the operator, with pods that really run.

The control plane is real (tests/kubeenv.py, no kwok); the node is tests/standin, a
kubelet + kube-proxy **stand-in** (there is no container runtime here): it runs the pods'
containers as local processes from local trees standing for the images (the healthy and
regressed catalog as substrate/catalog/Dockerfile builds them, the operator image as the
repository), proxies Services and points a real Prometheus (the Debian binary, with the
scenario's rules) at the pods that ask to be scraped. The operator is `sreforge
operator`, a subprocess. Nothing is faked: the alert fires because the regressed catalog
is slow under the built-in generator's load, and clears only if the patched build, laid
over the regressed image's source by the overlay init containers, is fast.

One Incident, three Submissions in order: an empty patch (graded while the fix waits
Queued; CI green, never clears: fails), the reference fix (passes), then a late one (the
Incident is finished). The operator dies at every phase of the run and is restarted each
time: it SIGKILLs itself at each failpoint of sreforge.runtime.failpoint in turn (every
phase as it is entered, and after each action's first write to the cluster), and is also
SIGKILLed from outside mid-verification, twice. The same run finishes with one verdict
per Submission and one CI Job each. Takes ~6 min.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.kube.test_operator import (
    HEALTHY,
    NS,
    REGRESSED,
    SCENARIO,
    Operator,
    cond,
    get,
    submit,
    wait_cond,
)
from tests.integration.test_judge import (
    AGENT_MODEL,
    JUDGE_MODEL,
    ChatCompletionsDouble,
    chat_completions_double,  # noqa: F401 (a fixture)
    fenced_parts,
)
from tests.kubeenv import BUILD_COMMAND, REPO_ROOT, ControlPlane, find_tools_bin, wait_for
from tests.standin import StandIn, catalog_image, catalog_tree, operator_image, redis_image

from sreforge.api.resources import GROUP, VERSION
from sreforge.loop import Phase
from sreforge.scenarios import decoys, fixes

# `slow` since the real node came (tests/integration/node grades the same Incident with real
# pods, the operator's pod killed mid-verification): this module is what the real node does
# not do, the operator SIGKILLed at every failpoint in turn, and runs with `-m slow`
pytestmark = [pytest.mark.kube, pytest.mark.graded, pytest.mark.slow]

FIX = SCENARIO.directory / "fixes" / "restore-simplecache.patch"
OPERATOR_IMAGE = "sreforge/operator:dev"
SUSTAIN = 30
CLEAR_BUDGET = 60


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    from kubernetes import client, config  # noqa: PLC0415

    work = tmp_path_factory.mktemp("graded")
    images = {
        HEALTHY: catalog_image(catalog_tree(work / "img-healthy")),
        REGRESSED: catalog_image(catalog_tree(work / "img-regressed", SCENARIO.regression_path)),
        OPERATOR_IMAGE: operator_image(REPO_ROOT),
        # the scenario's Redis (dependencies = ["redis"]), which the operator provisions
        "sreforge/redis:7": redis_image(work / "img-redis"),
    }
    with (
        ControlPlane(bin_dir, work / "kube", kwok=False) as cp,
        StandIn(cp, work / "node", images, rule_files=[SCENARIO.rules_path]) as node,
    ):
        cp.install_crds()
        cp.kubectl("create", "namespace", NS)
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        op = Operator(cp.kubeconfig, work / "operator.log")
        op.start()
        try:
            yield {
                "cp": cp,
                "node": node,
                "op": op,
                "custom": client.CustomObjectsApi(api),
                "core": client.CoreV1Api(api),
                "apps": client.AppsV1Api(api),
                "batch": client.BatchV1Api(api),
            }
        finally:
            op.stop()
            api.close()
            print(op.tail())


def make_catalog(env: dict[str, Any]) -> None:
    """The healthy catalog as a user deploys it: scraped, with a readiness probe."""
    labels = {"app": "catalog"}
    env["apps"].create_namespaced_deployment(
        NS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "catalog", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            "prometheus.io/scrape": "true",
                            "prometheus.io/port": "8080",
                        },
                    },
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": "catalog",
                                "image": HEALTHY,
                                "ports": [{"name": "http", "containerPort": 8080}],
                                # generous: on a shared, loaded machine a 1 s probe
                                # timeout takes a healthy pod out of the Service
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthz", "port": "http"},
                                    "periodSeconds": 1,
                                    "timeoutSeconds": 5,
                                    "failureThreshold": 10,
                                },
                            }
                        ],
                    },
                },
            },
        },
    )
    env["core"].create_namespaced_service(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "catalog"},
            "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
        },
    )


def sub_status(env: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(get(env, "submissions", name).get("status") or {})


def graded(env: dict[str, Any], name: str, timeout: float) -> dict[str, Any]:
    try:
        wait_for(
            f"Submission {name} to be graded",
            lambda: "passed" in sub_status(env, name),
            timeout,
        )
    except BaseException:
        print(env["op"].tail())
        raise
    return sub_status(env, name)


def assert_nothing_internal(env: dict[str, Any], inc: dict[str, Any]) -> None:
    """What the agent may read (the Incident, ConfigMaps in its namespace) holds no line of
    the root cause and no name of a fix or decoy."""
    readable = json.dumps(inc) + "".join(
        json.dumps(cm.data or {}) for cm in env["core"].list_namespaced_config_map(NS).items
    )
    lines = [ln.strip() for ln in SCENARIO.root_cause_path.read_text().splitlines()]
    for line in (ln for ln in lines if len(ln) >= 40):
        assert line not in readable, line
    for patch in fixes(SCENARIO) + decoys(SCENARIO):
        assert patch.name not in readable, patch.name


def crash_through(env: dict[str, Any], failpoints: list[str], timeout: float = 240) -> None:
    """Restart the operator armed with each failpoint in turn; each must be reached (the
    operator SIGKILLs itself there); then start it unarmed."""
    op = env["op"]
    for point in failpoints:
        op.start(failpoint=point)
        op.crashed_at(point, timeout)
        CRASHES.append(point)
    op.start()


CRASHES: list[str] = []
EVERY_PHASE = {f"persisted:{p.value}" for p in Phase} | {
    "applied:inject",
    "applied:run-ci",
    "applied:deploy",
    "applied:record",
    "applied:restore",
}


RCA = "The cache layer was dropped: every product page runs the review aggregation (30 ms).\n"


def test_graded_submissions(
    env: dict[str, Any],
    record_property: Any,
    chat_completions_double: ChatCompletionsDouble,  # noqa: F811 (the fixture imported above)
) -> None:
    make_catalog(env)
    env["op"].stop()  # restarted below, armed to die at each phase of the injection
    # the RCA judge: a network-level test double of a chat-completions server on loopback
    chat_completions_double.behaviour = "fixed-correct"
    env["op"].extra_env = {
        "RCA_JUDGE_URL": chat_completions_double.base_url,
        "RCA_JUDGE_MODEL": JUDGE_MODEL,
        "RCA_JUDGE_API_KEY": "test-key",
    }
    env["custom"].create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "incidents",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Incident",
            "metadata": {"name": "stampede"},
            "spec": {
                "scenario": SCENARIO.name,
                "prometheusURL": env["node"].prometheus_url,
                "verify": {
                    "sustainSeconds": SUSTAIN,
                    "clearBudgetSeconds": CLEAR_BUDGET,
                    "soakSeconds": [0, 0],
                },
            },
        },
    )
    crash_through(
        env,
        [
            "persisted:Pending",
            "persisted:Injecting",
            "applied:inject",
            "persisted:AwaitingFire",
            "persisted:AwaitingSubmission",
        ],
    )
    # resumed after the swap: the baseline is the image the user deployed, not the regressed
    loop_status = get(env, "incidents", "stampede")["status"]["loop"]
    assert loop_status["baselineImage"] == HEALTHY, loop_status
    # Injected -> AlertFiring -> AwaitingSubmission, the brief and never the root cause
    assert wait_cond(env, "incidents", "stampede", "Injected", 120)["status"] == "True"
    fired = wait_cond(env, "incidents", "stampede", "AlertFiring", 180)
    wait_for(
        "the alert to fire",
        lambda: (
            (cond(get(env, "incidents", "stampede"), "AlertFiring") or {}).get("status") == "True"
        ),
        200,
    )
    inc = get(env, "incidents", "stampede")
    st = inc["status"]
    assert cond(inc, "AwaitingSubmission")["status"] == "True", fired  # type: ignore[index]
    assert st["phase"] == "AwaitingSubmission"
    assert st["brief"] == SCENARIO.brief_path.read_text()
    root_cause = SCENARIO.root_cause_path.read_text()
    assert root_cause.strip()[:80] not in str(inc)
    assert_nothing_internal(env, inc)

    # an empty patch is graded; the fix waits Queued meanwhile
    submit(env, "empty", "stampede", "")
    wait_for(
        "the empty patch to be graded",
        lambda: (
            (cond(get(env, "submissions", "empty"), "Accepted") or {}).get("reason") == "Grading"
        ),
    )
    submit(env, "fix", "stampede", FIX.read_text(), rca=RCA, agent_model=AGENT_MODEL)
    queued = wait_cond(env, "submissions", "fix", "Accepted")
    assert (queued["status"], queued["reason"]) == ("False", "Queued"), queued
    # while the empty patch is verified: killed from outside, and armed for the fix's CI
    wait_for(
        "the empty patch to be verified",
        lambda: (
            get(env, "incidents", "stampede")["status"]["loop"]["state"]["phase"] == "Verifying"
        ),
        400,
    )
    env["op"].kill()
    crash_through(
        env,
        [
            "persisted:CI",  # the fix's: the empty patch's CI is over
            "applied:run-ci",
            "persisted:Deploying",
            "applied:deploy",
            "persisted:Verifying",
        ],
        timeout=400,
    )
    empty = graded(env, "empty", 400)
    assert empty["passed"] is False, json.dumps(empty, indent=1)
    # the regressed build stays slow: it never clears, or saturates so that the load is
    # not delivered (the readiness probe times out too): a failure either way, not a fault
    assert empty["reason"] not in ("Passed", "Inconclusive"), empty
    assert empty["signals"]["sustained_clear"]["credit"] == 0, empty
    assert empty["signals"]["ci_green"]["credit"] == 1, empty  # the empty patch builds
    assert cond({"status": empty}, "CIPassed")["status"] == "True"  # type: ignore[index]
    assert cond({"status": empty}, "Deployed")["status"] == "True"  # type: ignore[index]

    # the fix: killed mid-verification, restarted, the same run gives one verdict
    wait_for(
        "the fix to be verified (patched build rolled out)",
        lambda: (cond(get(env, "submissions", "fix"), "Deployed") or {}).get("status") == "True",
        400,
    )
    dep = env["apps"].read_namespaced_deployment("catalog", NS)
    init = [c.name for c in dep.spec.template.spec.init_containers or []]
    assert init == ["sreforge-source", "sreforge-patch"]
    assert dep.spec.template.spec.containers[0].image == REGRESSED
    run_id = get(env, "incidents", "stampede")["status"]["runId"]
    time.sleep(5)  # inside the verification window, which lasts >= SUSTAIN seconds
    assert get(env, "incidents", "stampede")["status"]["loop"]["state"]["phase"] == "Verifying"
    env["op"].kill()
    crash_through(
        env,
        ["persisted:Restoring", "applied:record", "applied:restore", "persisted:Done"],
        timeout=400,
    )
    fix = graded(env, "fix", 400)
    assert fix["passed"] is True, json.dumps(fix, indent=1)
    assert fix["score"] >= 0.85, fix
    assert fix["reason"] == "Passed"
    record_property("empty_score", empty["score"])
    record_property("empty_reason", empty["reason"])
    record_property("fix_score", fix["score"])
    print(f"empty: {empty['reason']} {empty['score']}; fix: {fix['reason']} {fix['score']}")
    inc = get(env, "incidents", "stampede")
    assert inc["status"]["runId"] == run_id
    assert inc["status"]["verdict"] == {
        "passed": True,
        "score": fix["score"],
        "reason": "Passed",
        "submission": "fix",
    }
    done = wait_cond(env, "incidents", "stampede", "Succeeded", 120)
    assert (done["status"], done["reason"]) == ("True", "Passed"), done
    # the baseline is back: the regressed image, no overlay
    dep = env["apps"].read_namespaced_deployment("catalog", NS)
    assert not dep.spec.template.spec.init_containers
    assert dep.spec.template.spec.containers[0].image == REGRESSED

    # the diagnosis beside the verdict, from the judge, on the Submission with an RCA only
    diagnosis = fix["diagnosis"]
    assert diagnosis["judge_model"] == JUDGE_MODEL, diagnosis
    assert diagnosis["root_cause_correct"] is True, diagnosis
    assert diagnosis["score"] == 1.0, diagnosis
    assert "diagnosis" not in empty
    asked = chat_completions_double.requests
    assert asked, "the operator never called the judge"
    truth, rca = fenced_parts(asked[-1])
    assert truth.strip() == SCENARIO.root_cause_path.read_text().strip()
    assert rca.strip() == RCA.strip()

    # every phase, and every action's first write, was a crash point of this one run
    assert set(CRASHES) == EVERY_PHASE, set(CRASHES) ^ EVERY_PHASE
    record_property("operator_crashes", len(CRASHES))
    ci_jobs = [
        j.metadata.name
        for j in env["batch"].list_namespaced_job(NS).items
        if (j.metadata.labels or {}).get("sreforge.dev/role") == "ci"
    ]
    assert len(ci_jobs) == 2, ci_jobs  # one per Submission, across every restart

    submit(env, "late", "stampede", FIX.read_text())
    late = wait_cond(env, "submissions", "late", "Accepted")
    assert (late["status"], late["reason"]) == ("False", "IncidentFinished"), late
