"""Every bundled scenario that runs on Kubernetes, on the real node (slow): each in a
namespace of its own, its healthy service deployed as a user would, its Incident created,
the empty patch then its first fix submitted (with SREFORGE_NODE_CASES=all: the empty
patch, every decoy, every fix); the operator must fail what must fail and pass the fixes
(sreforge.runtime.kube.validate, what `sreforge scenarios validate --runtime kube` runs
and writes into SCENARIOS.md). Their Redis and upstreams are the operator's
(runtime/kube/dependencies.py); resources-unbounded-cache's alert reads the kubelet's
cAdvisor series through the chart's recording rule. latency-cache-stampede is also graded
in the default suite (test_real_node.py). One scenario at a time: the node has 2 cores.
With SREFORGE_NODE_MARKDOWN=SCENARIOS.md each scenario's rows go to its section there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.integration.node.test_real_node import SYSTEM_NS, helm_install
from tests.kubeenv import REPO_ROOT, kube_scenarios
from tests.localcluster import LocalCluster

from sreforge.runtime.kube import validate
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.scenarios import load_scenario

pytestmark = [pytest.mark.kube, pytest.mark.graded, pytest.mark.slow]

ON_KUBE = kube_scenarios()
# SCENARIOS.md's rows on the real node: this module with MARKDOWN_ENV naming the file
# (each scenario's section "on Kubernetes" rewritten, as `scenarios validate --runtime kube`
# writes it)
MARKDOWN_ENV = "SREFORGE_NODE_MARKDOWN"
# every case (the decoys, every fix) instead of the empty patch and the first fix: this
# module with CASES_ENV=all (about 40 minutes a scenario on 2 cores)
CASES_ENV = "SREFORGE_NODE_CASES"
COMMAND = (
    f"{MARKDOWN_ENV}=SCENARIOS.md .venv/bin/python -m pytest -m kube "
    "tests/integration/node/test_scenarios_on_node.py"
)


@pytest.fixture(scope="module")
def installed(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> LocalCluster:
    cluster = local_cluster
    if cluster.kubectl("get", "namespace", "sreforge-demo", check=False).returncode != 0:
        helm_install(cluster, tmp_path_factory.mktemp("helm"))
    return cluster


@pytest.mark.parametrize("name", ON_KUBE)
def test_scenario_graded_on_the_real_node(
    installed: LocalCluster, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster = installed
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    scenario = load_scenario(REPO_ROOT / "scenarios" / name)
    ns = f"node-{name}"[:63]
    fast = os.environ.get(CASES_ENV, "") != "all"
    try:
        rows = validate.validate_scenario(
            Kube(),
            scenario,
            OperatorConfig(),
            f"http://prometheus.{SYSTEM_NS}.svc:9090",
            ns,
            sustain_seconds=30,
            fast=fast,
            say=print,
        )
    finally:
        print(cluster.kubectl("get", "pods,incidents,submissions", "-n", ns, check=False).stdout)
        out = cluster.kubectl("get", "incident", "-n", ns, "-o", "yaml", check=False)
        print(out.stdout[-5000:])
        # gone before the next scenario, passed or not: a namespace left behind keeps its
        # load, its service and its database running on the node's 2 cores under the next
        cluster.kubectl("delete", "namespace", ns, "--timeout=180s", check=False)
    (tmp_path / "rows.json").write_text(json.dumps(rows, indent=1))
    if os.environ.get(MARKDOWN_ENV):
        command = f"{COMMAND} -k {name}"
        validate.write_rows(
            Path(os.environ[MARKDOWN_ENV]),
            rows,
            command if fast else f"{CASES_ENV}=all {command}",
        )
    print(json.dumps(rows, indent=1))
    cases = validate.kube_cases(scenario, fast=fast)
    assert [r["patch"] for r in rows] == [c.label for c in cases]
    assert [r["got"] for r in rows] == [c.expected for c in cases], rows
    assert not [r for r in rows if r["mismatch"]], rows
