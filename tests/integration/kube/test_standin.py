"""The kubelet + kube-proxy stand-in (tests/standin) runs real pods for a real control plane.

There is no container runtime here, so tests/standin is a stand-in for the kubelet and
kube-proxy of one Node: containers are local processes, Services are local TCP proxies.
Everything else is real: kube-apiserver, etcd, the Deployment/ReplicaSet/Job/GC
controllers of kube-controller-manager, kube-scheduler (tests/kubeenv.py, no kwok) and
Debian's Prometheus. Needs the binaries of hack/k8s-tools.sh; skipped, with the command
to build them, when they are not there.
"""

from __future__ import annotations

import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.kubeenv import BUILD_COMMAND, REPO_ROOT, ControlPlane, find_tools_bin
from tests.standin import (
    NODE_NAME,
    Image,
    StandIn,
    catalog_image,
    catalog_tree,
    operator_image,
)
from tests.standin import wait_until as wait_for
from tests.standin.api import Api, ApiError
from tests.standin.proxy import ServiceProxies

from sreforge.api.scenario import LoadProfile
from sreforge.load.k6 import render_generator_job

pytestmark = pytest.mark.kube  # about 2 min: part of the default run

NS = "standin-it"
WEB_V1, WEB_V2 = "sreforge-test/web:v1", "sreforge-test/web:v2"
TOOLS = "sreforge-test/tools:1"
CATALOG = "sreforge/catalog:healthy"
OPERATOR = "sreforge/operator:dev"
# a real HTTP server (python's http.server) reading PORT/HOST, as the contract asks
SERVE = ["sh", "-c", 'exec python -m http.server "$PORT" --bind "$HOST"']


def pid_running(pid: int) -> bool:
    """True while a process with this PID exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


FORK_MARK = "3017.5"  # an argument no other process on the machine has


def marked_sleeps() -> list[int]:
    """PIDs of live `sleep FORK_MARK` processes (read from /proc, never signalled)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmdline = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == f"sleep\0{FORK_MARK}\0".encode() and pid_running(int(d.name)):
                found.append(int(d.name))
    return found


def web_tree(root: Path, version: str) -> Path:
    root.mkdir(parents=True)
    (root / "version.txt").write_text(f"{version}\n")
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    with ControlPlane(bin_dir, tmp_path_factory.mktemp("kube"), kwok=False) as cp:
        cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        yield cp


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Image]:
    tmp = tmp_path_factory.mktemp("images")
    return {
        WEB_V1: Image(web_tree(tmp / "web-v1", "v1"), path="/srv/www"),
        WEB_V2: Image(web_tree(tmp / "web-v2", "v2"), path="/srv/www"),
        TOOLS: Image((tmp / "tools"), path="/opt/tools"),
        CATALOG: catalog_image(catalog_tree(tmp / "catalog")),
        OPERATOR: operator_image(REPO_ROOT),
    }


@pytest.fixture(scope="module")
def node(
    cluster: ControlPlane, images: dict[str, Image], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandIn]:
    (images[TOOLS].root).mkdir(exist_ok=True)
    with StandIn(cluster, tmp_path_factory.mktemp("standin"), images) as s:
        yield s


@pytest.fixture(scope="module")
def api(node: StandIn) -> Api:
    return node.api


def get(api: Api, path: str) -> Any:
    try:
        return api.get(path)
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def http_get(port: int, path: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
        return str(resp.read().decode())


def deployment(
    name: str,
    image: str,
    *,
    command: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    probe_path: str = "/version.txt",
    working_dir: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": probe_path, "port": "http"}, "periodSeconds": 1},
    }
    if command:
        container["command"] = command
    if working_dir:
        container["workingDir"] = working_dir
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 3},
            },
        },
    }


def service(name: str, port: int = 80) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": "http"}]},
    }


def available(api: Api, name: str) -> bool:
    dep = get(api, f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")
    if dep is None:
        return False
    st = dep.get("status") or {}
    conds = {c["type"]: c["status"] for c in st.get("conditions") or []}
    return (
        conds.get("Available") == "True"
        and st.get("observedGeneration") == dep["metadata"]["generation"]
        and st.get("updatedReplicas") == st.get("replicas") == st.get("availableReplicas") == 1
    )


def pods_of(api: Api, selector: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"labelSelector": selector})
    return list(api.get(f"/api/v1/namespaces/{NS}/pods?{q}")["items"])


def job_condition(api: Api, name: str) -> str | None:
    job = get(api, f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")
    for c in (job or {}).get("status", {}).get("conditions") or []:
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return str(c["type"])
    return None


def job(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": TOOLS, "command": ["sh", "-c", script], **extra}
                    ],
                },
            },
        },
    }


# ---------------------------------------------------------------------------------------
def test_node_is_ready_with_a_renewed_lease(api: Api) -> None:
    n = api.get(f"/api/v1/nodes/{NODE_NAME}")
    ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
    assert ready, n["status"]
    assert ready[0]["status"] == "True", n["status"]
    assert "kwok.x-k8s.io/node" not in (n["metadata"].get("annotations") or {})
    lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}")
    first = lease["spec"]["renewTime"]
    wait_for(
        "the Lease to be renewed",
        lambda: (
            api.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}")[
                "spec"
            ]["renewTime"]
            != first
        ),
        timeout=60,
    )


def test_deployment_available_and_rollout_moves_service_under_load(api: Api, node: StandIn) -> None:
    api.request(
        "POST",
        f"/apis/apps/v1/namespaces/{NS}/deployments",
        deployment("web", WEB_V1, command=SERVE),
    )
    api.request("POST", f"/api/v1/namespaces/{NS}/services", service("web"))
    wait_for(
        "Deployment web to be Available (the real Deployment controller)",
        lambda: available(api, "web"),
    )
    port = node.service_port(NS, "web", 80)
    assert http_get(port, "/version.txt").strip() == "v1"
    (old,) = pods_of(api, "app=web")
    old_pids = node.pids(NS, old["metadata"]["name"])
    assert old_pids
    assert all(pid_running(p) for p in old_pids)
    assert old["status"]["podIP"] == "127.0.0.1"
    assert old["status"]["containerStatuses"][0]["ready"] is True

    # a steady client through the Service proxy while the image changes
    seen: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                seen.append(http_get(port, "/version.txt", timeout=2).strip())
            except (OSError, urllib.error.URLError):
                seen.append("error")
            time.sleep(0.02)

    t = threading.Thread(target=client, daemon=True)
    t.start()
    try:
        wait_for("load through the proxy", lambda: len(seen) > 20)
        api.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{NS}/deployments/web",
            {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": WEB_V2}]}}}},
            content_type="application/strategic-merge-patch+json",
        )
        wait_for(
            "the rollout to v2",
            lambda: (
                available(api, "web")
                and all(
                    p["spec"]["containers"][0]["image"] == WEB_V2 for p in pods_of(api, "app=web")
                )
            ),
        )
        wait_for(
            "the old pod to be deleted",
            lambda: (
                not any(
                    p["metadata"]["uid"] == old["metadata"]["uid"] for p in pods_of(api, "app=web")
                )
            ),
        )
        mark = len(seen)
        wait_for("load after the rollout", lambda: len(seen) > mark + 20)
    finally:
        stop.set()
        t.join(timeout=10)
    assert "v1" in seen
    assert "v2" in seen
    first_v2 = seen.index("v2")
    assert "v1" not in seen[mark:], "the proxy still sends load to the deleted pod"
    errors = seen.count("error")
    assert errors <= max(2, len(seen) // 50), f"{errors} failed of {len(seen)} requests"
    assert first_v2 < mark
    # the old pod's processes are gone (SIGTERM by PID, then deletion confirmed)
    wait_for("the old pod's processes to exit", lambda: not any(map(pid_running, old_pids)))


def test_job_exit_codes_and_termination_message(api: Api) -> None:
    ok = job("job-ok", "echo all good > /dev/termination-log; exit 0")
    bad = job(
        "job-bad",
        "echo '3 failed, 12 passed' > \"$MSG\"; exit 1",
        terminationMessagePath="/var/run/ci/message",
        env=[{"name": "MSG", "value": "/var/run/ci/message"}],
    )
    for j in (ok, bad):
        api.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", j)
    assert wait_for("job-ok to finish", lambda: job_condition(api, "job-ok")) == "Complete"
    assert wait_for("job-bad to finish", lambda: job_condition(api, "job-bad")) == "Failed"
    (ok_pod,) = pods_of(api, "job-name=job-ok")
    (bad_pod,) = pods_of(api, "job-name=job-bad")
    assert ok_pod["status"]["phase"] == "Succeeded"
    assert bad_pod["status"]["phase"] == "Failed"
    term = bad_pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 1
    assert term["message"].strip() == "3 failed, 12 passed"
    ok_term = ok_pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (ok_term["exitCode"], ok_term["message"].strip()) == (0, "all good")


PATCH = """\
diff --git a/version.txt b/version.txt
--- a/version.txt
+++ b/version.txt
@@ -1 +1 @@
-v1
+v1-patched
"""


def overlay_pod(name: str, patch_key: str, restart: str) -> dict[str, Any]:
    """The patch-overlay shape the operator uses: an init container copies the image's
    tree into an emptyDir and `git apply`s a diff from a ConfigMap; the main container
    serves the patched copy."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "initContainers": [
                {
                    "name": "apply-patch",
                    "image": WEB_V1,
                    "command": [
                        "sh",
                        "-c",
                        "cp -R /srv/www/. /work/ && cd /work && "
                        f"git apply --whitespace=nowarn /patch/{patch_key}",
                    ],
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/work"},
                        {"name": "patch", "mountPath": "/patch", "readOnly": True},
                    ],
                }
            ],
            "containers": [
                {
                    "name": "web",
                    "image": WEB_V1,
                    "command": SERVE,
                    "workingDir": "/work",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/version.txt", "port": "http"}},
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }
            ],
            "volumes": [
                {"name": "work", "emptyDir": {}},
                {"name": "patch", "configMap": {"name": "overlay"}},
            ],
        },
    }


def test_init_container_applies_configmap_patch_before_main(api: Api, node: StandIn) -> None:
    api.request(
        "POST",
        f"/api/v1/namespaces/{NS}/configmaps",
        {"metadata": {"name": "overlay"}, "data": {"fix.diff": PATCH, "bad.diff": "garbage\n"}},
    )
    api.request(
        "POST", f"/api/v1/namespaces/{NS}/pods", overlay_pod("overlay-ok", "fix.diff", "Always")
    )
    api.request(
        "POST", f"/api/v1/namespaces/{NS}/pods", overlay_pod("overlay-bad", "bad.diff", "Never")
    )
    api.request(
        "POST", f"/api/v1/namespaces/{NS}/pods", overlay_pod("overlay-crash", "bad.diff", "Always")
    )

    def ready(name: str) -> bool:
        pod = get(api, f"/api/v1/namespaces/{NS}/pods/{name}") or {}
        conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
        return conds.get("Ready") == "True"

    wait_for("overlay-ok to be Ready", lambda: ready("overlay-ok"))
    port = node.pod_port(NS, "overlay-ok", 8080)
    assert port is not None
    assert http_get(port, "/version.txt").strip() == "v1-patched"
    pod = api.get(f"/api/v1/namespaces/{NS}/pods/overlay-ok")
    init = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert init["exitCode"] == 0

    def failed() -> dict[str, Any] | None:
        p = api.get(f"/api/v1/namespaces/{NS}/pods/overlay-bad")
        return p if p["status"].get("phase") == "Failed" else None

    def crash_looping() -> dict[str, Any] | None:
        p = api.get(f"/api/v1/namespaces/{NS}/pods/overlay-crash")
        (init,) = p["status"].get("initContainerStatuses") or [{}]
        waiting = init.get("state", {}).get("waiting", {})
        return p if waiting.get("reason") == "CrashLoopBackOff" else None

    crash = wait_for("overlay-crash's init container in CrashLoopBackOff", crash_looping)
    assert crash["status"]["phase"] == "Pending"
    assert crash["status"]["initContainerStatuses"][0]["restartCount"] >= 1
    assert crash["status"]["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"]
    conds = {c["type"]: c["status"] for c in crash["status"]["conditions"]}
    assert conds["Ready"] == "False"
    assert "waiting" in crash["status"]["containerStatuses"][0]["state"]

    bad = wait_for("overlay-bad to fail in its init container", failed)
    assert bad["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] != 0
    main_state = bad["status"]["containerStatuses"][0]["state"]
    assert "waiting" in main_state, "the main container ran although the patch did not apply"


def query(node: StandIn, promql: str) -> list[dict[str, Any]]:
    url = f"{node.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        import json  # noqa: PLC0415

        return list(json.loads(resp.read())["data"]["result"])


def test_prometheus_scrapes_annotated_catalog_pod(api: Api, node: StandIn) -> None:
    dep = deployment(
        "catalog",
        CATALOG,
        annotations={"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
        probe_path="/healthz",
    )
    api.request("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", dep)
    api.request("POST", f"/api/v1/namespaces/{NS}/services", service("catalog", 8080))
    wait_for("Deployment catalog to be Available", lambda: available(api, "catalog"))
    (pod,) = pods_of(api, "app=catalog")
    up = wait_for(
        'Prometheus to see up{job="catalog"} == 1',
        lambda: [
            r for r in query(node, f'up{{job="catalog",namespace="{NS}"}}') if r["value"][1] == "1"
        ],
    )
    assert up[0]["metric"]["pod"] == pod["metadata"]["name"]
    port = node.service_port(NS, "catalog", 8080)
    assert '"id": 7' in http_get(port, "/products/7").replace('"id":7', '"id": 7')


def test_load_and_prober_jobs_through_service_seen_as_loadgen_and_prober(
    api: Api, node: StandIn
) -> None:
    """render_generator_job (the operator image's `python -m sreforge.load`) against the
    catalog through its Service, as the load's Job and as the independent prober's (the
    same mix over one id layout): their pods are scraped as job="loadgen" and
    job="prober", each with its own series."""
    wait_for("Deployment catalog to be Available", lambda: available(api, "catalog"))
    # a rate and id range the catalog serves on a busy 2-core machine (each first
    # lookup of an id costs it ~0.2 s of CPU): what is tested is the path, not capacity
    profile = LoadProfile(
        rate=5,
        duration_seconds=15,
        path="/products/{id}",
        id_range=(1, 20),
        expect_json_id=True,
        timeout_ms=5000,
        probe_rate=2,
    )
    target = f"http://catalog.{NS}.svc.cluster.local:8080"
    for name, probe in (("loadgen", False), ("prober", True)):
        j = render_generator_job(name, NS, profile, target, OPERATOR, ids_seed=1, probe=probe)
        tmpl = j["spec"]["template"]["metadata"]
        tmpl["labels"]["app"] = name  # as render_load labels them: the scrape's job
        tmpl["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"}
        api.request("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", j)
    for job, series, least in (
        ("loadgen", "sreforge_load_requests_total", 10),
        ("prober", "sreforge_probe_requests_total", 4),
    ):
        wait_for(
            f'Prometheus to see successful requests of job="{job}"',
            lambda job=job, series=series, least=least: [
                r
                for r in query(node, f'{series}{{job="{job}",namespace="{NS}",outcome="success"}}')
                if float(r["value"][1]) >= least
            ],
        )
    # each Job's own series only: the load's pod exports no prober series, and back
    assert not query(node, 'sreforge_probe_requests_total{job="loadgen"}')
    assert not query(node, 'sreforge_load_requests_total{job="prober"}')
    for job, series in (
        ("loadgen", "sreforge_load_requests_total"),
        ("prober", "sreforge_probe_requests_total"),
    ):
        condition = wait_for(f"the {job} Job to finish", lambda job=job: job_condition(api, job))
        assert condition == "Complete", job
        # the last scrape before the generator exited: the proxy never refused a request
        # and the requests reached a catalog pod that answered with the right product
        last = {
            r["metric"]["outcome"]: float(r["value"][1])
            for r in query(node, f'max_over_time({series}{{job="{job}"}}[10m])')
        }
        assert last.get("connect_error", 0) == 0, (job, last)
        assert last.get("invalid", 0) == last.get("http_error", 0) == 0, (job, last)
        assert last.get("success", 0) >= 0.5 * sum(last.values()), (job, last)


def test_deleting_the_deployment_stops_its_processes(api: Api, node: StandIn) -> None:
    wait_for("Deployment web to be Available", lambda: available(api, "web"))
    pods = pods_of(api, "app=web")
    pids = [p for pod in pods for p in node.pids(NS, pod["metadata"]["name"])]
    assert pids
    assert all(map(pid_running, pids))
    api.request(
        "DELETE",
        f"/apis/apps/v1/namespaces/{NS}/deployments/web",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    wait_for(
        "the GC to delete the pods and the stand-in to confirm", lambda: not pods_of(api, "app=web")
    )
    wait_for("the processes to exit", lambda: not any(map(pid_running, pids)))


def test_converges_from_a_list_and_stops_everything_on_exit(
    cluster: ControlPlane, images: dict[str, Image], tmp_path: Path
) -> None:
    """A pod bound to a node before its stand-in starts runs once it starts (list, then
    watch); leaving the context manager stops every process it started."""
    cluster.request(
        "POST",
        f"/api/v1/namespaces/{NS}/configmaps",
        {"metadata": {"name": "overlay-early"}, "data": {"fix.diff": PATCH}},
    )
    pod = overlay_pod("early", "fix.diff", "Always")
    pod["spec"]["volumes"][1]["configMap"]["name"] = "overlay-early"
    pod["spec"]["nodeName"] = "standin-early"
    cluster.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    # a shell that forks: its children go with it, as with a container's cgroup
    forks = job("forks", f"sleep {FORK_MARK} & sleep {FORK_MARK} & wait")["spec"]["template"]
    forks["metadata"]["name"] = "forks"
    forks["spec"]["nodeName"] = "standin-early"
    cluster.request(
        "POST", f"/api/v1/namespaces/{NS}/pods", {"apiVersion": "v1", "kind": "Pod", **forks}
    )
    with StandIn(cluster, tmp_path, images, node_name="standin-early", prometheus=False) as s:
        wait_for(
            "the early pod to run",
            lambda: (
                s.pod_port(NS, "early", 8080)
                and (api_ready := s.runner(NS, "early")) is not None
                and api_ready.ready
            ),
        )
        port = s.pod_port(NS, "early", 8080)
        assert port is not None
        assert http_get(port, "/version.txt").strip() == "v1-patched"
        wait_for("the forked sleeps", lambda: len(marked_sleeps()) == 2)
        pids = s.all_pids()
        assert pids
        assert all(map(pid_running, pids))
    assert not any(map(pid_running, pids))
    assert not marked_sleeps(), "a forked child outlived its pod"
    assert (tmp_path / "pods").is_dir()


def web_pod(name: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "web",
                    "image": WEB_V1,
                    "command": SERVE,
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}},
                }
            ],
        },
    }


def test_reconnects_when_the_api_connections_drop(
    cluster: ControlPlane, images: dict[str, Image], tmp_path: Path
) -> None:
    """The stand-in talks to the apiserver through a TCP relay whose connections are cut
    (a network fault): its watches fail, it lists again and keeps running pods, starts
    new ones and handles deletions."""
    api_port = int(urllib.parse.urlsplit(cluster.server).port or 443)
    relay = ServiceProxies(lambda _key: [api_port])
    key = ("relay", "kube-apiserver", 443)
    try:
        via = SimpleNamespace(
            server=f"https://127.0.0.1:{relay.ensure(key)}",
            token=cluster.token,
            ca_file=cluster.ca_file,
        )
        node = "standin-flaky"
        with StandIn(via, tmp_path, images, node_name=node, prometheus=False) as s:

            def running(name: str) -> bool:
                r = s.runner(NS, name)
                return r is not None and r.ready

            cluster.request("POST", f"/api/v1/namespaces/{NS}/pods", web_pod("flaky-a", node))
            wait_for("flaky-a to run", lambda: running("flaky-a"))
            pids_a = s.pids(NS, "flaky-a")
            assert relay.drop_connections(key) >= 2, "the pod and Service watches were open"
            cluster.request("POST", f"/api/v1/namespaces/{NS}/pods", web_pod("flaky-b", node))
            wait_for("flaky-b to run after the fault", lambda: running("flaky-b"))
            assert all(map(pid_running, pids_a)), "the fault stopped a running pod"
            relay.drop_connections(key)
            cluster.request("DELETE", f"/api/v1/namespaces/{NS}/pods/flaky-a")
            wait_for("flaky-a's processes to stop", lambda: not any(map(pid_running, pids_a)))

            def deleted() -> bool:
                try:
                    cluster.request("GET", f"/api/v1/namespaces/{NS}/pods/flaky-a")
                except urllib.error.HTTPError as e:
                    return e.code == 404
                return False

            wait_for("the stand-in to confirm flaky-a's deletion", deleted)
            assert running("flaky-b")
    finally:
        relay.close()
