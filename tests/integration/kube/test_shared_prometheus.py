"""One Prometheus with every bundled scenario's rules, shared by Incidents of two scenarios.

The chart's Prometheus loads all bundled scenarios' rules, whose alert names repeat
(CatalogErrorRateHigh in two scenarios, CatalogLoadDropped in four, and the error and SLO
alerts of four more read the same load series). Here the same happens with real parts: the
control plane of tests/kubeenv.py (no kwok), the kubelet + kube-proxy stand-in of
tests/standin (pods as local processes), whose Prometheus (Debian's) labels targets as the
chart's does (job, namespace, pod, incident, scenario) and loads every
``scenarios/*/rules.yml`` as shipped. No operator process runs: each Incident is injected
by the operator's own code (``IncidentRun.inject``: the regressed image, the Incident's and
its scenario's labels on the target's pods, the built-in generator's load Job and the
prober's).

Two Incidents of two bundled scenarios, each run as a copy of latency-cache-stampede under
that scenario's name (the copy serves the pod stand-in: its load asks what a static web
server serves, or not): inc-a of errors-connection-pool-leak, healthy; inc-b of
latency-cache-stampede, every request answered 404. Only latency-cache-stampede's own
alerts fire or are pending, and only for inc-b (its CatalogErrorRateHigh, and its per-route
error and prober alerts); no rule of any other scenario fires or is pending, though many
of them read the same series (without the scenario matcher they all fire for inc-b:
compound-cache-and-index's CatalogErrorRateHigh, the PricingSLOBreach of two, and the
per-route error and prober alerts of all five). Takes ~40 s.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.test_incident_scope import scenario_copy, target, web_image
from tests.kubeenv import BUILD_COMMAND, REPO_ROOT, ControlPlane, find_tools_bin
from tests.scenario_rules import BUNDLED
from tests.standin import StandIn, operator_image
from tests.standin import wait_until as wait_for

from sreforge.api.resources import GROUP, INCIDENT_PLURAL, VERSION
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.runtime.kube.incident import IncidentRun

pytestmark = pytest.mark.kube

NS = "scope-it"  # test_incident_scope's target() makes its Deployments there
OPERATOR = "sreforge/operator:dev"
HEALTHY = "sreforge/catalog:healthy"
BROKEN, FINE = "latency-cache-stampede", "errors-connection-pool-leak"
ALERT = "CatalogErrorRateHigh"
# BROKEN's alerts of the whole service, which the same 404s may set off for inc-b too
OWN_ROUTE_ALERTS = ("CatalogRouteErrorsHigh", "CatalogProbeFailing")
INCIDENTS = {
    "inc-a": {"scenario": FINE, "target": "web-a", "path": "/item/{id}", "rate": 20},
    "inc-b": {"scenario": BROKEN, "target": "web-b", "path": "/missing/{id}", "rate": 10},
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    work = tmp_path_factory.mktemp("shared")
    scenarios = work / "scenarios"
    for spec in INCIDENTS.values():
        scenario_copy(scenarios, str(spec["scenario"]), str(spec["path"]), int(spec["rate"]))
    web = web_image(work / "web")
    # each scenario's regressed build has its own tag
    regressed = {f"sreforge/catalog:{spec['scenario']}": web for spec in INCIDENTS.values()}
    images = {HEALTHY: web, **regressed, OPERATOR: operator_image(REPO_ROOT)}
    shipped = [REPO_ROOT / "scenarios" / s / "rules.yml" for s in BUNDLED]
    with (
        ControlPlane(bin_dir, work / "kube", kwok=False) as cp,
        StandIn(cp, work / "node", images, rule_files=shipped) as node,
        pytest.MonkeyPatch.context() as mp,
    ):
        cp.kubectl("create", "namespace", NS)
        cp.install_crds()
        mp.setenv("KUBECONFIG", str(cp.kubeconfig))
        kube = Kube()
        cfg = OperatorConfig(scenarios_dir=scenarios, operator_image=OPERATOR)
        yield {"node": node, "kube": kube, "cfg": cfg}


def api(node: StandIn, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{node.prometheus_url}{path}{query}", timeout=5) as resp:
        return json.loads(resp.read())["data"]


def series(node: StandIn, promql: str) -> list[dict[str, str]]:
    return [r["metric"] for r in api(node, "/api/v1/query", query=promql)["result"]]


def active_alerts(node: StandIn) -> set[tuple[str, str, str, str]]:
    """(the scenario whose rules file it is, alert, state, incident) of every pending or
    firing alert of every rule the Prometheus has."""
    got: set[tuple[str, str, str, str]] = set()
    groups = api(node, "/api/v1/rules")["groups"]
    # the stand-in's Prometheus loads rule file i as "<i>-rules.yml", every one of them
    assert {Path(g["file"]).name for g in groups} == {f"{i}-rules.yml" for i in range(len(BUNDLED))}
    for group in groups:
        scenario = BUNDLED[int(Path(group["file"]).name.split("-", 1)[0])]
        for rule in group["rules"]:
            for alert in rule.get("alerts") or []:
                labels = alert["labels"]
                got.add((scenario, labels["alertname"], alert["state"], labels.get("incident", "")))
    return got


def test_only_the_broken_incidents_own_scenario_alerts_fire(env: dict[str, Any]) -> None:
    kube: Kube = env["kube"]
    node: StandIn = env["node"]
    for spec in INCIDENTS.values():
        dep, svc = target(str(spec["target"]))
        kube.apps.create_namespaced_deployment(NS, dep)
        kube.core.create_namespaced_service(NS, svc)
    for name, spec in INCIDENTS.items():
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Incident",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "scenario": spec["scenario"],
                "targetDeployment": spec["target"],
                "prometheusURL": node.prometheus_url,
                "loadRunner": "builtin",
            },
        }
        created = kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, INCIDENT_PLURAL, body
        )
        IncidentRun(kube, env["cfg"], created, logging.getLogger(name)).inject()

    fired = (BROKEN, ALERT, "firing", "inc-b")
    wait_for(f"{BROKEN}'s {ALERT} to fire for inc-b", lambda: fired in active_alerts(node), 90)
    # every rule that reads these series had its expression true as long as this one did
    # (`for` is 5 s): it would be pending or firing by now; a group's offset is < 1 s
    time.sleep(2)
    active = active_alerts(node)
    assert fired in active
    assert {a for a in active if (a[0], a[3]) != (BROKEN, "inc-b")} == set(), active
    assert {a[1] for a in active} <= {ALERT, *OWN_ROUTE_ALERTS}, active

    # not for want of series: both Incidents' load is scraped, each labelled with its
    # Incident and scenario, and the healthy one's requests all succeed
    by_incident = series(
        node, "sum by (incident, scenario, outcome) (sreforge_load_requests_total) > 0"
    )  # (the generator exports every outcome from 0)
    outcomes = {(m["incident"], m["scenario"], m["outcome"]) for m in by_incident}
    assert ("inc-a", FINE, "success") in outcomes, outcomes
    assert all(o == "success" for i, _, o in outcomes if i == "inc-a"), outcomes
    assert ("inc-b", BROKEN, "success") not in outcomes, outcomes
    assert {(i, s) for i, s, _ in outcomes} == {("inc-a", FINE), ("inc-b", BROKEN)}
    # and so is each one's prober, labelled like its load
    probed = series(
        node, "sum by (job, incident, scenario, outcome) (sreforge_probe_requests_total) > 0"
    )
    outcomes = {(m["job"], m["incident"], m["scenario"], m["outcome"]) for m in probed}
    assert ("prober", "inc-a", FINE, "success") in outcomes, outcomes
    assert all(o == "success" for _, i, _, o in outcomes if i == "inc-a"), outcomes
    assert {(j, i, s) for j, i, s, _ in outcomes} == {
        ("prober", "inc-a", FINE),
        ("prober", "inc-b", BROKEN),
    }
    # the firing alert says whose it is
    (alert,) = series(node, f'ALERTS{{alertstate="firing",alertname="{ALERT}"}}')
    assert (alert["namespace"], alert["incident"]) == (NS, "inc-b"), alert
