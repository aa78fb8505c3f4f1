"""Two Incidents on one shared Prometheus: each reads only its own alerts, load and prober.

The control plane is real (tests/kubeenv.py, no kwok); the node is the kubelet + kube-proxy
stand-in of tests/standin (pods run as local processes), whose Prometheus (Debian's) labels
its targets as the chart's Prometheus labels pods (job, namespace, pod, and incident and
scenario from the pod's sreforge.dev/incident and sreforge.dev/scenario labels) and loads
the rules of both Incidents' scenarios. No
operator process runs: each Incident is injected by the operator's own code
(`IncidentRun.inject`: the regressed image and the Incident's label on the target's pod
template, then the built-in generator's load Job and the prober's), and read through the
operator's own `IncidentRun.telemetry`.

The two Incidents run two scenarios, copies of latency-cache-stampede (its rules read
only the copy's own scenario) whose load asks a path its target serves (A) or one it does
not (B): B's error alert fires, A's does not.
A's Telemetry sees neither B's alert nor B's load nor B's prober; an unscoped one (what
every Incident read before) sees both. Takes ~40 s.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kubeenv import BUILD_COMMAND, REPO_ROOT, ControlPlane, find_tools_bin
from tests.standin import Image, StandIn, operator_image
from tests.standin import wait_until as wait_for

from sreforge.api.resources import GROUP, INCIDENT_PLURAL, VERSION
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.config import INCIDENT_LABEL, SCENARIO_LABEL, OperatorConfig
from sreforge.runtime.kube.incident import IncidentRun, restore_on_delete
from sreforge.telemetry import Telemetry

pytestmark = pytest.mark.kube

NS = "scope-it"
STAMPEDE = REPO_ROOT / "scenarios" / "latency-cache-stampede"
OPERATOR = "sreforge/operator:dev"
HEALTHY = "sreforge/catalog:healthy"
ERROR_ALERT = "CatalogErrorRateHigh"
# A's load asks /item/1, which the target serves; B's asks /missing/1: a 404 each time
INCIDENTS = {
    "inc-a": {"scenario": "scope-served", "target": "web-a", "path": "/item/{id}", "rate": 20},
    "inc-b": {"scenario": "scope-unserved", "target": "web-b", "path": "/missing/{id}", "rate": 10},
}


def scenario_copy(root: Path, name: str, path: str, rate: int) -> None:
    """latency-cache-stampede under another name, with a load (and prober) of one route,
    "product" (the route its rules read), at `rate` asking `path` (and rules that read the
    copy's series, not latency-cache-stampede's)."""
    dest = root / name
    shutil.copytree(STAMPEDE, dest)
    toml = dest / "scenario.toml"
    text = toml.read_text()
    old = 'name = "latency-cache-stampede"'
    assert old in text, old
    text = text.replace(old, f'name = "{name}"', 1)
    # the static web server standing for the catalog needs no Redis: none is provisioned
    deps = 'dependencies = ["redis"]\n'
    assert deps in text, deps
    text = text.replace(deps, "", 1)
    start, end = text.index("\n[load]\n"), text.index("\n[verify]\n")
    load = (
        f"\n[load]\nrate = {rate}\nmax_in_flight = 200\ntimeout_ms = 2000\nid_range = [1, 1]\n"
        f'\n[[load.routes]]\nname = "product"\npath = "{path}"\nexpect_json_id = true\n'
    )
    toml.write_text(text[:start] + load + text[end:])
    rules = dest / "rules.yml"
    own = 'scenario=~"latency-cache-stampede|"'
    assert own in rules.read_text()
    rules.write_text(rules.read_text().replace(own, f'scenario=~"{name}|"'))


def web_image(root: Path) -> Image:
    """A static web server: /item/1 is product 1, /metrics.txt a valid scrape."""
    (root / "item").mkdir(parents=True)
    (root / "item" / "1").write_text('{"id": 1}')
    (root / "metrics.txt").write_text("# TYPE web_up gauge\nweb_up 1\n")
    return Image(
        root=root,
        path="/srv/www",
        command=["sh", "-c", 'exec python -m http.server "$PORT" --bind "$HOST"'],
    )


def target(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The user's Deployment (scraped, job "catalog") and its Service."""
    labels = {"app": "catalog", "target": name}
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": "8080",
                        "prometheus.io/path": "/metrics.txt",
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "catalog",
                            "image": HEALTHY,
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {
                                "httpGet": {"path": "/metrics.txt", "port": "http"},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"target": name}, "ports": [{"port": 8080, "targetPort": "http"}]},
    }
    return dep, svc


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    work = tmp_path_factory.mktemp("scope")
    scenarios = work / "scenarios"
    for spec in INCIDENTS.values():
        scenario_copy(scenarios, str(spec["scenario"]), str(spec["path"]), int(spec["rate"]))
    web = web_image(work / "web")
    # each scenario's regressed build has its own tag
    regressed = {f"sreforge/catalog:{spec['scenario']}": web for spec in INCIDENTS.values()}
    images = {HEALTHY: web, **regressed, OPERATOR: operator_image(REPO_ROOT)}
    with (
        ControlPlane(bin_dir, work / "kube", kwok=False) as cp,
        StandIn(
            cp, work / "node", images, rule_files=sorted(scenarios.glob("*/rules.yml"))
        ) as node,
        pytest.MonkeyPatch.context() as mp,
    ):
        cp.install_crds()
        cp.kubectl("create", "namespace", NS)
        mp.setenv("KUBECONFIG", str(cp.kubeconfig))
        kube = Kube()
        cfg = OperatorConfig(scenarios_dir=scenarios, operator_image=OPERATOR)
        yield {"cp": cp, "node": node, "kube": kube, "cfg": cfg}


def test_an_incident_reads_only_its_own_alerts_and_load(env: dict[str, Any]) -> None:
    kube: Kube = env["kube"]
    url = env["node"].prometheus_url
    for spec in INCIDENTS.values():
        dep, svc = target(str(spec["target"]))
        kube.apps.create_namespaced_deployment(NS, dep)
        kube.core.create_namespaced_service(NS, svc)
    runs: dict[str, IncidentRun] = {}
    for name, spec in INCIDENTS.items():
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Incident",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "scenario": spec["scenario"],
                "targetDeployment": spec["target"],
                "prometheusURL": url,
                "loadRunner": "builtin",
            },
        }
        created = kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, INCIDENT_PLURAL, body
        )
        runs[name] = IncidentRun(kube, env["cfg"], created, logging.getLogger(name))
    for run in runs.values():
        run.inject()  # waits for the target's rollout, then starts the load
    a, b = (runs[n].telemetry for n in INCIDENTS)
    assert a is not None
    assert b is not None
    series = runs["inc-a"].scenario.target_series
    unscoped = Telemetry(url, target_series=series, service_job="catalog")

    def b_fires() -> bool:
        got = b.alerts()
        return got is not None and ERROR_ALERT in got[0]

    wait_for(f"{ERROR_ALERT} to fire for inc-b", b_fires, timeout=90)
    # while B's alert fires, with both loads running
    wait_for("both loads to be scraped", lambda: a.load() is not None and b.load() is not None)

    def probed(t: Telemetry) -> bool:
        got = t.probe()
        return got is not None and got.success_ratio is not None

    wait_for("both probers to be scraped", lambda: probed(a) and probed(b))
    seen = a.alerts()
    everyone = unscoped.alerts()
    load_a, load_b, load_all = a.load(), b.load(), unscoped.load()
    probe_a, probe_b, probe_all = a.probe(), b.probe(), unscoped.probe()
    sample_a = a.sample()

    assert seen == (frozenset(), frozenset()), seen  # nothing of B's, and A is healthy
    assert everyone is not None
    assert ERROR_ALERT in everyone[0]  # unscoped, as every Incident read before: B's alert
    assert load_a is not None
    assert load_b is not None
    assert load_all is not None
    assert (load_a.target_rate, load_b.target_rate) == (20, 10)
    assert load_a.success_ratio == 1.0
    assert load_b.success_ratio == 0.0
    assert load_all.success_ratio is not None
    assert 0.0 < load_all.success_ratio < 1.0  # unscoped: both loads mixed
    # each Incident's own prober (its Job's pods carry the Incident's labels, like the load's)
    assert probe_a is not None
    assert probe_b is not None
    assert probe_all is not None
    assert (probe_a.success_ratio, probe_b.success_ratio) == (1.0, 0.0)
    assert probe_all.success_ratio is not None
    assert 0.0 < probe_all.success_ratio < 1.0  # unscoped: both probers mixed
    # A's own series: its target pod (labelled on injection) is up, its load series exist
    assert sample_a.firing == frozenset()
    assert sample_a.probe is not None
    assert sample_a.probe.success_ratio == 1.0
    assert sample_a.service_up
    assert sample_a.target_series_present

    # the Incident deleted: its target's pods lose its label with the original image
    restore_on_delete(kube, runs["inc-a"])
    tmpl = kube.get_deployment(NS, "web-a")["spec"]["template"]
    assert INCIDENT_LABEL not in tmpl["metadata"]["labels"]
    assert SCENARIO_LABEL not in tmpl["metadata"]["labels"]
    assert tmpl["spec"]["containers"][0]["image"] == HEALTHY
    injected = kube.get_deployment(NS, "web-b")["spec"]["template"]
    assert injected["metadata"]["labels"][INCIDENT_LABEL] == "inc-b"
    assert injected["metadata"]["labels"][SCENARIO_LABEL] == "scope-unserved"
    assert injected["spec"]["containers"][0]["image"] == "sreforge/catalog:scope-unserved"
