"""`sreforge scenarios validate --runtime kube` (sreforge.runtime.kube.validate): what it
deploys, the cases it submits, how a graded Submission becomes a SCENARIOS.md row, and that
those rows go to sections of their own, named by the runtime, beside the local ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.kubeenv import kube_scenarios

from sreforge import catalogue, cli
from sreforge.runtime.kube import validate
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.scenarios import load_scenario

REPO = Path(__file__).resolve().parents[2]
POOL = load_scenario(REPO / "scenarios" / "errors-connection-pool-leak")


def test_the_healthy_target_is_the_services_healthy_image_behind_a_service() -> None:
    dep, svc = validate.healthy_target(POOL, "ns1", OperatorConfig(image_prefix="r/"))
    [box] = dep["spec"]["template"]["spec"]["containers"]
    assert box["image"] == f"r/{POOL.service.name}:healthy"
    assert box["readinessProbe"]["httpGet"]["path"] == POOL.service.health_path
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["metadata"]["name"] == svc["metadata"]["name"] == POOL.service.name
    # its pods are the service's scrape job (the telemetry reads up{job=<service>})
    assert dep["spec"]["template"]["metadata"]["labels"] == {"app": POOL.service.name}
    assert svc["spec"]["selector"] == {"app": POOL.service.name}


def test_a_service_with_upstreams_comes_with_the_users_own() -> None:
    storm = load_scenario(REPO / "scenarios" / "configuration-retry-storm")
    objs = validate.healthy_target(storm, "ns1", OperatorConfig())
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds == [
        ("Deployment", "supplier"),
        ("Service", "supplier"),
        ("Deployment", "pricing"),
        ("Service", "pricing"),
    ]
    [box] = objs[2]["spec"]["template"]["spec"]["containers"]
    # pricing refuses to start without its supplier's URL
    assert box["env"] == [{"name": "SUPPLIER_URL", "value": "http://supplier.ns1.svc:8080"}]


def test_the_cases_are_the_empty_patch_then_the_first_fix() -> None:
    empty, fix = validate.kube_cases(POOL)
    assert (empty.label, empty.expected) == ("empty", "fail")
    assert fix.expected == "pass"
    assert fix.patch is not None
    assert fix.patch.parent.name == "fixes"


def test_a_graded_submission_becomes_a_row() -> None:
    empty, fix = validate.kube_cases(POOL, control=False)
    status = {
        "passed": False,
        "score": 0.25,
        "reason": "NotCleared",
        "signals": {
            "ci_green": {"credit": 1.0},
            "alert_cleared": {"credit": 0.0},
            "no_new_alerts": {"credit": 1.0},
        },
    }
    row = catalogue.row(empty, validate.record_of(status, 31.5), 120.0)
    assert (row["got"], row["reason"], row["score"]) == ("fail", "NotCleared", 0.25)
    assert row["failing"] == "alert_cleared"
    assert row["fireSeconds"] == 31.5
    assert row["mismatch"] is None
    assert row["soakSeconds"] is None  # never rolled out: no soak was drawn for it
    passed = {
        "passed": True,
        "score": 0.97,
        "reason": "Passed",
        "signals": {},
        "soak": {"seconds": 301.4, "seed": "ab12"},
    }
    row = catalogue.row(fix, validate.record_of(passed, None), 90.0)
    assert (row["got"], row["mismatch"], row["fireSeconds"]) == ("pass", None, None)
    assert row["soakSeconds"] == 301.4  # the soak the Submission's status published
    # a fix the operator failed is a mismatch, which says what the verdict says
    said = "page-severity alert KintoLatencyHigh fired after the redeploy"
    failed = {
        **status,
        "ciFeedback": "CI green: build and tests passed\n....... [ 36%]",
        "conditions": [{"type": "Verified", "status": "False", "message": said}],
    }
    row = catalogue.row(fix, validate.record_of(failed, None), 90.0)
    assert row["mismatch"]
    assert said in row["mismatch"]
    assert "[ 36%]" not in row["mismatch"]


def test_rows_go_to_a_section_named_by_the_runtime(tmp_path: Path) -> None:
    md = tmp_path / "SCENARIOS.md"
    empty, _ = validate.kube_cases(POOL)
    local = catalogue.row(empty, {"passed": False, "reason": "NotCleared", "score": 0.3}, 1.0)
    catalogue.write_markdown(md, [local], "sreforge scenarios validate x", "now")
    kube_row = catalogue.row(empty, {"passed": False, "reason": "Refired", "score": 0.5}, 2.0)
    validate.write_rows(md, [kube_row], "sreforge scenarios validate x --runtime kube")
    text = md.read_text()
    assert f"## {POOL.name}\n" in text  # the local section stays
    assert f"## {POOL.name} {validate.RUNTIME}\n" in text
    assert "Refired" in text.split(validate.RUNTIME)[1]
    assert "Refired" not in text.split(validate.RUNTIME)[0]


@pytest.mark.parametrize("name", kube_scenarios())
def test_scenarios_target_deploys_what_the_shipped_incident_targets(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sreforge scenarios target NAME | kubectl apply -f -`, then the scenario's
    incident.yaml as shipped: the Deployment it names, in its namespace, scraped."""
    assert cli.main(["scenarios", "target", name]) == cli.EXIT_PASSED
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    shipped = (REPO / "scenarios" / name / "incident.yaml").read_text()
    assert f"sreforge scenarios target {name} | kubectl apply -f -" in shipped  # its header
    incident = yaml.safe_load(shipped)
    ns = incident["metadata"]["namespace"]
    assert {o["metadata"]["namespace"] for o in objs} == {ns}
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    target = deployments[incident["spec"]["targetDeployment"]]
    pod = target["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["spec"]["containers"][0]["image"].endswith(":healthy")
    # a Job before the Deployments that read its data retries while its database starts
    for job in (o for o in objs if o["kind"] == "Job"):
        assert job["spec"]["backoffLimit"] == validate.PREPARE_RETRIES > 0


def test_scenarios_target_of_a_missing_scenario_is_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["scenarios", "target", "no-such-scenario"]) == cli.EXIT_ERROR
    assert "no-such-scenario" in capsys.readouterr().err


def test_every_case_is_the_empty_patch_then_the_decoys_then_every_fix() -> None:
    cases = validate.kube_cases(POOL, fast=False)
    assert cases[0].patch is None
    kinds = [c.patch.parent.name for c in cases[1:] if c.patch is not None]
    fixes = [c for c in cases if c.expected == "pass"]
    decoys = [c for c in cases if c.patch is not None and c.expected == "fail"]
    assert kinds == ["decoys"] * len(decoys) + ["fixes"] * len(fixes)
    assert len(fixes) >= 2
    assert len(decoys) >= 1
    assert {c.label for c in cases} == {c.label for c in catalogue.cases(POOL)}
    # a fix is graded as a fix: the control window is shown by the empty patch's row, the
    # first Incident's (a later Incident, after a fix passed, has none)
    assert [c.control for c in cases] == [True] + [False] * (len(cases) - 1)
    assert not any(c.control for c in validate.kube_cases(POOL, fast=False, control=False))


def test_the_first_incidents_control_window_is_judged_on_the_empty_patchs_row() -> None:
    """The operator holds the first Incident's load on the healthy build before it injects
    (spec.controlSeconds, status.control): a page or the target alert there, or a restart,
    makes the row a mismatch whatever the verdict; a quiet one shows its p95 headroom."""
    held = catalogue.held_seconds(POOL, 30)
    assert held == 30 + POOL.verify.soak_seconds[1]
    body = validate.incident_body(POOL, "ns1", "http://prom:9090", 30, 3600, control_seconds=held)
    assert body["spec"]["controlSeconds"] == held
    assert "controlSeconds" not in validate.incident_body(POOL, "ns1", "http://p:9090", 30)["spec"]
    # the load covers the window too
    n = len(validate.kube_cases(POOL, fast=False))
    assert validate.load_seconds(POOL, n, held) == validate.load_seconds(POOL, n) + held
    empty, _ = validate.kube_cases(POOL)
    status = {"passed": False, "score": 0.25, "reason": "NotCleared", "signals": {}}
    p95 = {"load": {"checkout": 0.21}, "probe": {"checkout": 0.3}}
    quiet = {"seconds": held, "targetFired": False, "pagesFired": [], "restarts": 0}
    row = catalogue.row(empty, validate.record_of(status, 31.5, {**quiet, "p95ByRoute": p95}), 1.0)
    assert (row["mismatch"], row["controlFired"], row["controlP95"]) == (None, False, p95)
    for noisy in (
        {**quiet, "pagesFired": ["PoolRouteLatencyHigh"]},
        {**quiet, "targetFired": True},
        {**quiet, "restarts": 1},
        {**quiet, "restarts": None},  # the restarts could not be read
        {k: v for k, v in quiet.items() if k != "targetFired"},  # Prometheus never read
    ):
        row = catalogue.row(empty, validate.record_of(status, 31.5, noisy), 1.0)
        assert row["mismatch"] is not None
        assert row["mismatch"].startswith("control window: the healthy build was not quiet")


def test_an_incident_is_finished_only_in_a_terminal_phase() -> None:
    assert validate.incident_finished({"status": {"phase": "Succeeded"}})
    assert validate.incident_finished({"status": {"phase": "Failed"}})
    for phase in ("AwaitingSubmission", "Verifying", None):
        assert not validate.incident_finished({"status": {"phase": phase}})
    assert not validate.incident_finished(None)


def test_the_validation_incidents_load_outlasts_every_case_it_may_wait_for() -> None:
    """Every case is graded on one Incident, so its load must last as long as validation
    may wait on it: on the scenario's own 30 minutes the load ended under a run of a dozen
    cases and the later ones were graded blind (Inconclusive, the load's series gone)."""
    cases = validate.kube_cases(POOL, fast=False)
    seconds = validate.load_seconds(POOL, len(cases))
    rearm = validate.fire_wait_seconds(POOL)
    assert rearm == POOL.verify.fire_timeout_seconds + 300
    assert seconds >= rearm + len(cases) * (validate.CASE_WAIT_SECONDS + rearm)
    assert seconds > POOL.load.duration_seconds
    # the Incident carries it as its load override, which the CRD bounds at a day
    body = validate.incident_body(POOL, "ns1", "http://prom:9090", 30, seconds)
    assert body["spec"]["load"] == {"durationSeconds": seconds}
    assert validate.load_seconds(POOL, 10_000) == 86_400
    # one case never gets less than the scenario's own duration
    assert validate.load_seconds(POOL, 0) >= POOL.load.duration_seconds
    assert "load" not in validate.incident_body(POOL, "ns1", "http://prom:9090", 30)["spec"]
