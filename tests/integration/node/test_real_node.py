"""The operator as a user installs it, on a real node: real pods, real image swaps, real
rollouts, real Services and DNS (tests/localcluster.py).

The chart installs the operator (image `sreforge/operator:dev`) and its bundled Prometheus
(`sreforge/prometheus`, the scenario's rules); the healthy catalog runs as a Deployment in
`sreforge-demo`; the scenario's own `incident.yaml` is applied as shipped. The alert fires
because the regressed build, swapped in by the operator, is slow under the built-in
generator's load (a Job's pod); the fix passes only if its build, applied by the overlay's
init containers on a read-only root filesystem, is fast under the same load.

One Incident, two Submissions in order: an empty patch (CI green, the alert never clears:
fails), then the reference fix (passes, score >= 0.85) while the operator's pod is deleted
mid-verification (the Deployment's next pod resumes the same run: one verdict).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.kubeenv import REPO_ROOT, wait_for
from tests.localcluster import LocalCluster
from tests.reliability_cases import case

from sreforge.scenarios import load_scenario

pytestmark = [pytest.mark.kube, pytest.mark.graded]

SCENARIO = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
FIX = SCENARIO.directory / "fixes" / "restore-simplecache.patch"
SYSTEM_NS = "sreforge-system"
DEMO_NS = "sreforge-demo"
OPERATOR_IMAGE = "sreforge/operator:dev"
RUNNER_IMAGE = "sreforge/runner:dev"  # the load, prober and patch pods: no scenarios
PROMETHEUS_IMAGE = "sreforge/prometheus:v3.16.0"
HEALTHY = "sreforge/catalog:healthy"
SOAK_LOW, SOAK_HIGH = 20, 40
# the stampede Incident's control window: its load on the healthy build before the injection
CONTROL_SECONDS = 20
INCIDENT = "stampede-1"  # the name scenarios/latency-cache-stampede/incident.yaml gives it


def kubectl_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def catalog_manifest(ns: str = DEMO_NS) -> dict[str, Any]:
    """The healthy catalog as a user deploys it: scraped, with a readiness probe, hardened."""
    labels = {"app": "catalog"}
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "catalog", "namespace": ns, "labels": labels},
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
                            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                            "containers": [
                                {
                                    "name": "catalog",
                                    "image": HEALTHY,
                                    "imagePullPolicy": "Never",
                                    "ports": [{"name": "http", "containerPort": 8080}],
                                    "readinessProbe": {
                                        "httpGet": {"path": "/healthz", "port": "http"},
                                        "periodSeconds": 2,
                                    },
                                    "securityContext": {
                                        "readOnlyRootFilesystem": True,
                                        "allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                                }
                            ],
                            "volumes": [{"name": "tmp", "emptyDir": {}}],
                        },
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "catalog", "namespace": ns},
                "spec": {
                    "selector": labels,
                    "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
                },
            },
        ],
    }


def helm_install(cluster: LocalCluster, work: Path) -> None:
    values = {
        "image": {
            "repository": OPERATOR_IMAGE.split(":", maxsplit=1)[0],
            "tag": OPERATOR_IMAGE.split(":")[1],
            "pullPolicy": "Never",
        },
        "runnerImage": {
            "repository": RUNNER_IMAGE.split(":", maxsplit=1)[0],
            "tag": RUNNER_IMAGE.split(":")[1],
        },
        "agent": {"namespace": DEMO_NS},
        "prometheus": {
            "enabled": True,
            "image": {
                "repository": PROMETHEUS_IMAGE.split(":", maxsplit=1)[0],
                "tag": PROMETHEUS_IMAGE.split(":")[1],
                "pullPolicy": "Never",
            },
        },
    }
    (work / "values.json").write_text(json.dumps(values))
    cluster.kubectl("create", "namespace", DEMO_NS)
    helm = cluster.bin_dir / "helm"
    res = subprocess.run(
        [
            str(helm),
            "upgrade",
            "--install",
            "sreforge",
            str(REPO_ROOT / "charts" / "sreforge"),
            "-n",
            SYSTEM_NS,
            "--create-namespace",
            "-f",
            str(work / "values.json"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--wait",
            "--timeout",
            "3m",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, f"helm install failed:\n{res.stdout}\n{res.stderr}"


@pytest.fixture(scope="module")
def demo(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    cluster = local_cluster
    helm_install(cluster, tmp_path_factory.mktemp("helm"))
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(catalog_manifest()))
    cluster.kubectl("rollout", "status", "-n", DEMO_NS, "deploy/catalog", "--timeout=120s")
    try:
        yield cluster
    finally:
        for ns in (SYSTEM_NS, DEMO_NS):
            print(f"--- pods and events in {ns}")
            print(cluster.kubectl("get", "pods", "-o", "wide", "-n", ns, check=False).stdout)
            print(cluster.kubectl("get", "events", "-n", ns, check=False).stdout[-4000:])
        for kind in ("incidents", "submissions"):
            out = cluster.kubectl("get", kind, "-n", DEMO_NS, "-o", "yaml", check=False)
            print(f"--- {kind}\n{out.stdout[-6000:]}")
        logs = cluster.kubectl(
            "logs", "-n", SYSTEM_NS, "deploy/sreforge-operator", "--tail=80", check=False
        )
        print(f"--- operator log\n{logs.stdout}{logs.stderr}")


@pytest.fixture(autouse=True)
def own_namespaces(request: pytest.FixtureRequest) -> Iterator[None]:
    """The namespaces a test creates are deleted when it ends: an Incident left waiting for
    a Submission keeps its load (and the regressed build it saturates) running, and took
    the node's CPU from every test after it."""
    if "demo" not in request.fixturenames:
        yield
        return
    cluster: LocalCluster = request.getfixturevalue("demo")
    before = set(namespaces(cluster))
    yield
    mine = sorted(set(namespaces(cluster)) - before - {DEMO_NS, SYSTEM_NS})
    if mine:
        cluster.kubectl("delete", "namespace", *mine, "--wait=false", check=False)


def namespaces(cluster: LocalCluster) -> list[str]:
    out = cluster.kubectl("get", "namespaces", "-o", "name", check=False).stdout
    return [line.removeprefix("namespace/") for line in out.split()]


def incident(cluster: LocalCluster, ns: str = DEMO_NS, name: str = INCIDENT) -> dict[str, Any]:
    return kubectl_json(cluster, "get", "incident", "-n", ns, name)  # type: ignore[no-any-return]


def submission(cluster: LocalCluster, name: str, ns: str = DEMO_NS) -> dict[str, Any]:
    return kubectl_json(cluster, "get", "submission", "-n", ns, name)  # type: ignore[no-any-return]


def submit(
    cluster: LocalCluster, name: str, patch: str, ns: str = DEMO_NS, inc: str = INCIDENT
) -> None:
    body = {
        "apiVersion": "sreforge.dev/v1alpha1",
        "kind": "Submission",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"incidentRef": {"name": inc}, "patch": {"inline": patch}},
    }
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(body))


def graded(cluster: LocalCluster, name: str, timeout: float, ns: str = DEMO_NS) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        sub = submission(cluster, name, ns)
        return sub if (sub.get("status") or {}).get("passed") is not None else None

    result: dict[str, Any] = wait_for(
        f"Submission {name} to be graded", done, timeout=timeout, interval=2
    )
    return result


MCP_PORT = 8090
PAIR = "inc"  # both Incidents of the two-Incident test, each in a namespace of its own


def agent_token(cluster: LocalCluster, ns: str, audience: str | None = "sreforge-mcp") -> str:
    """A token of the Incident's agent ServiceAccount (TokenRequest), for the MCP endpoint."""
    args = ["create", "token", f"{PAIR}-agent", "-n", ns, "--duration=10m"]
    if audience:
        args.append(f"--audience={audience}")
    return cluster.kubectl(*args).stdout.strip()


def raw_call(url: str, token: str | None) -> tuple[int, str]:
    """An MCP initialize request as a bare HTTP POST: the endpoint's status and body."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(2000).decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def agent_calls(
    url: str, token: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[set[str], list[tuple[bool, str]]]:
    """One MCP session of the Incident's agent (its token): the tools it lists, and each
    call's (whether it was an error, its text), in order."""
    auth = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=auth, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as c,
    ):
        tools = {t.name for t in (await c.list_tools()).tools}
        out = []
        for tool, args in calls:
            r = await c.call_tool(tool, args)
            out.append(
                (bool(r.is_error), "\n".join(str(getattr(x, "text", "")) for x in r.content))
            )
    return tools, out


def agent_session(url: str, token: str, patch: str) -> dict[str, Any]:
    """What the Incident's agent sees through its tools, and its submit of `patch`."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("brief", {}),
        ("alerts", {"history_minutes": 15}),
        ("promql_query", {"query": 'up{job="catalog"}'}),
        ("service_logs", {"service": "catalog", "since": None, "contains": "GET"}),
        ("deploy_history", {}),
        ("workspace_read", {"path": "catalog/app.py"}),
        ("workspace_read", {"path": "../../../etc/passwd"}),
        ("submission_status", {}),
        ("submit", {}),
        ("submit", {"patch": patch}),
        ("submit", {"patch": patch}),
        ("submission_status", {}),
    ]
    tools, answers = asyncio.run(agent_calls(url, token, calls))
    seen: dict[str, Any] = {"tools": tools}
    for (tool, _), answer in zip(calls, answers, strict=True):
        seen.setdefault(tool, []).append(answer)
    return seen


def mcp_base(cluster: LocalCluster) -> str:
    """The operator's MCP endpoint from the node: its pod IP (in the cluster, the URL's
    Service name resolves)."""
    (op,) = kubectl_json(
        cluster, "get", "pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    return f"http://{op['status']['podIP']}:{MCP_PORT}"


def _refused_but_the_agent(cluster: LocalCluster, base: str, ours: str, theirs: str) -> None:
    """At `ours`'s endpoint: no token, a token of its agent for the API server, and the
    agent token of `theirs` (an Incident of the same name) are refused; each agent's own
    token is let in; RBAC agrees."""
    url = {ns: f"{base}/incidents/{ns}/{PAIR}/mcp" for ns in (ours, theirs)}
    token = {ns: agent_token(cluster, ns) for ns in (ours, theirs)}
    for at, given, code, says in (
        (ours, None, 401, "Authorization: Bearer"),
        (ours, agent_token(cluster, ours, audience=None), 403, "audience sreforge-mcp"),
        (ours, token[theirs], 403, f"system:serviceaccount:{theirs}:{PAIR}-agent may not"),
        (theirs, token[ours], 403, f"system:serviceaccount:{ours}:{PAIR}-agent may not"),
        (ours, token[ours], 200, '"serverInfo"'),
        (theirs, token[theirs], 200, '"serverInfo"'),
    ):
        got, text = raw_call(url[at], given)
        assert (got, says in text) == (code, True), (at, code, got, text)
    got, text = raw_call(f"{base}/incidents/{ours}/{PAIR}/other", token[ours])
    assert (got, "/incidents/<ns>/<name>/mcp" in text) == (404, True), (got, text)
    for account, allowed in ((ours, "yes"), (theirs, "no")):
        can = cluster.kubectl(
            "auth",
            "can-i",
            "get",
            f"incidents.sreforge.dev/{PAIR}",
            "--subresource=mcp",
            "-n",
            ours,
            f"--as=system:serviceaccount:{account}:{PAIR}-agent",
            check=False,
        )
        assert can.stdout.strip() == allowed, (account, can.stdout, can.stderr)


def _tools_for_the_incidents_agent_alone(
    cluster: LocalCluster, ours: str, theirs: str, patch: str
) -> str:
    """The operator's MCP endpoint serves Incident `ours/inc`'s tools to its agent
    ServiceAccount alone (`theirs/inc`'s agent is refused there); the agent's own session
    gets every tool, and its `submit` of `patch` becomes a Submission (its name returned)."""
    access = incident(cluster, ours, PAIR)["status"]["mcp"]
    path = f"/incidents/{ours}/{PAIR}/mcp"
    assert access == {
        "url": f"http://sreforge-mcp.{SYSTEM_NS}.svc:{MCP_PORT}{path}",
        "serviceAccountName": f"{PAIR}-agent",
        "audience": "sreforge-mcp",
    }, access
    base = mcp_base(cluster)
    with case("security (real node): the MCP endpoint refuses all but the Incident's agent"):
        _refused_but_the_agent(cluster, base, ours, theirs)

    seen = agent_session(base + path, agent_token(cluster, ours), patch)
    print(json.dumps({k: [t[:300] for _, t in v] for k, v in seen.items() if k != "tools"}))
    assert {"brief", "alerts", "promql_query", "service_logs", "deploy_history"} <= seen["tools"]

    def ok(tool: str, i: int = 0) -> str:
        error, text = seen[tool][i]
        assert not error, (tool, i, text)
        return str(text)

    def refused(tool: str, i: int) -> str:
        error, text = seen[tool][i]
        assert error, (tool, i, text)
        return str(text)

    assert SCENARIO.brief_path.read_text().strip()[:200] in ok("brief")
    firing = json.loads(ok("alerts"))["firing"]
    # its own alert only, though the other Incident's fires on the same Prometheus
    pairs = {(a["alert"], a["labels"].get("namespace")) for a in firing}
    assert (SCENARIO.target_alert, ours) in pairs, firing
    assert {at for _, at in pairs} == {ours}, firing
    assert json.loads(ok("promql_query"))["result"], "no up series of the catalog"
    logs = ok("service_logs")
    assert "line(s) matched" in logs, logs[:500]
    assert "GET /products" in logs, logs[:500]
    history = ok("deploy_history")
    assert history.count("commit ") >= 2, history[:500]  # the release on the previous one
    assert "def " in ok("workspace_read", 0)  # the regressed source, read-only
    assert "leaves the workspace" in refused("workspace_read", 1)
    assert json.loads(ok("submission_status", 0)) == {"state": "open"}
    assert "give the fix as a unified diff" in refused("submit", 0)
    made = ok("submit", 1)
    assert "being graded" in refused("submit", 2)
    assert json.loads(ok("submission_status", 1))["state"] == "grading"
    return made.split(f"Submission {ours}/", 1)[1].split(" ", 1)[0]


def _graded_through_the_tools(cluster: LocalCluster, ns: str, name: str, patch: str) -> None:
    """The agent's Submission carries its patch and what it looked at before it; the agent
    reads the verdict through its tools, which refuse another submit once the run is over."""
    sub = submission(cluster, name, ns)
    assert sub["spec"]["patch"]["inline"] == patch  # the agent's patch, as given
    # what the agent looked at before it submitted goes with it (never the verdict's): the
    # eight calls and the refused submit before it, two of them refused
    looked = json.loads(sub["metadata"]["annotations"]["sreforge.dev/trajectory"])
    assert (looked["calls"], looked["errors"]) == (9, 2), looked
    assert looked["byTool"]["workspace_read"] == 2, looked
    assert "service_logs: catalog" in looked["lookedAt"], looked
    url = f"{mcp_base(cluster)}/incidents/{ns}/{PAIR}/mcp"
    calls = [("submission_status", {}), ("submit", {"patch": patch})]
    _, ((error, text), (refused, why)) = asyncio.run(
        agent_calls(url, agent_token(cluster, ns), calls)
    )
    assert not error, text
    # the run is over: its tools stay readable, a new submit is refused
    assert refused, why
    assert "the Incident is finished" in why, why
    status = json.loads(text)
    assert status["state"] == "graded", status
    assert status["submission"] == name
    verdict = {k: status["verdict"][k] for k in ("passed", "reason", "score")}
    assert verdict == {k: sub["status"][k] for k in verdict}, (status, sub["status"])


def test_stampede_incident_graded_on_real_pods(demo: LocalCluster) -> None:
    cluster = demo
    t0 = time.monotonic()
    # as shipped, but for a soak of 20-40 s instead of the scenario's minutes: the soak's
    # key must survive the operator's restart below (the same length is drawn again)
    shipped = yaml.safe_load((SCENARIO.directory / "incident.yaml").read_text())
    shipped["spec"]["verify"]["soakSeconds"] = [SOAK_LOW, SOAK_HIGH]
    # and a control window first: the healthy build under the same load, its alerts read
    shipped["spec"]["controlSeconds"] = CONTROL_SECONDS
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(shipped))

    def awaiting() -> bool:
        inc = incident(cluster)
        phase = (inc.get("status") or {}).get("phase")
        assert phase not in ("Failed", "Succeeded"), json.dumps(inc.get("status"), indent=1)
        return phase == "AwaitingSubmission"

    wait_for("the Incident to reach AwaitingSubmission", awaiting, timeout=300, interval=2)
    fired_after = time.monotonic() - t0
    inc = incident(cluster)
    assert cond(inc, "AlertFiring")["status"] == "True"  # type: ignore[index]
    assert inc["status"]["alert"] == SCENARIO.target_alert
    # the regressed build really runs in the pod: its image is the scenario's own build
    dep = kubectl_json(cluster, "get", "deploy", "-n", DEMO_NS, "catalog")
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image != HEALTHY
    pods = kubectl_json(cluster, "get", "pods", "-n", DEMO_NS, "-l", "app=loadgen")["items"]
    assert pods
    assert all(p["status"]["phase"] == "Running" for p in pods)
    print(f"creation -> AwaitingSubmission: {fired_after:.1f}s")
    # the control window ran before the injection, on the healthy build under the load and
    # the prober (their series are the Incident's: the pods were labelled first), and the
    # scenario's alerts stayed quiet there; its p95 per route is what the rules read
    control = inc["status"]["control"]
    print(f"control window: {control}")
    assert control["seconds"] == CONTROL_SECONDS
    assert (control["targetFired"], control["pagesFired"], control["restarts"]) == (False, [], 0)
    routes = {r.name for r in SCENARIO.load.routes}
    for source in ("load", "probe"):
        seen = control["p95ByRoute"][source]
        assert seen, control  # the window saw its requests
        assert set(seen) <= routes, control
        assert all(0 < s < 1 for s in seen.values()), control  # the healthy build is fast
    said = [
        e
        for e in kubectl_json(cluster, "get", "events", "-n", DEMO_NS)["items"]
        if e["reason"] == "ControlWindow" and e["involvedObject"]["name"] == INCIDENT
    ]
    assert said, "no ControlWindow Event"
    assert f"for {CONTROL_SECONDS}s before the injection" in said[0]["message"]
    # the scenario's Redis, the operator's, owned by the Incident; the catalog points at it
    # and reaches it through its Service by name
    redis = kubectl_json(cluster, "get", "deploy", "-n", DEMO_NS, f"{INCIDENT}-redis")
    assert redis["status"].get("readyReplicas") == 1
    [owner] = redis["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Incident", INCIDENT)
    env = {
        e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["REDIS_URL"] == f"redis://{INCIDENT}-redis.{DEMO_NS}.svc:6379/0"
    redis_host = f"{INCIDENT}-redis"
    ping = (
        f"import socket; s = socket.create_connection(('{redis_host}', 6379), timeout=5); "
        "s.sendall(b'PING\\r\\n'); print(s.recv(16))"
    )
    out = cluster.kubectl("exec", "-n", DEMO_NS, "deploy/catalog", "--", "python", "-c", ping)
    assert "+PONG" in out.stdout, out.stdout + out.stderr

    submit(cluster, "empty", "")
    empty = graded(cluster, "empty", timeout=420)
    assert empty["status"]["passed"] is False, json.dumps(empty["status"], indent=1)
    assert cond(empty, "CIPassed")["status"] == "True"  # type: ignore[index]

    submit(cluster, "fix", FIX.read_text())

    def verifying() -> bool:
        sub = submission(cluster, "fix")
        return (cond(sub, "Deployed") or {}).get("status") == "True"

    wait_for("the fix to be deployed", verifying, timeout=420, interval=1)
    # while the fix is verified, nothing the agent can read tells the soak's length
    status = json.dumps(incident(cluster)["status"]) + json.dumps(submission(cluster, "fix"))
    assert "soak_key" not in status
    assert '"soak"' not in status
    # the operator's pod dies mid-verification; the Deployment's next one resumes the run
    old = kubectl_json(
        cluster, "get", "pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    cluster.kubectl(
        "delete",
        "pod",
        "-n",
        SYSTEM_NS,
        "--grace-period=0",
        "--force",
        *[p["metadata"]["name"] for p in old],
    )
    fix = graded(cluster, "fix", timeout=420)
    assert fix["status"]["passed"] is True, json.dumps(fix["status"], indent=1)
    assert fix["status"]["score"] >= 0.85
    # the soak it was held to is published with the verdict; no container restarted
    assert SOAK_LOW <= fix["status"]["soak"]["seconds"] <= SOAK_HIGH
    assert fix["status"]["restarts"] == 0
    detail = fix["status"]["signals"]["sustained_clear"]["detail"]
    assert f"{fix['status']['soak']['seconds']:g}s soak" in detail, detail
    # the verdict is recorded before the baseline is restored; then the run is Finished
    wait_for(
        "the Incident to finish",
        lambda: (cond(incident(cluster), "Finished") or {}).get("status") == "True",
        timeout=120,
        interval=1,
    )
    inc = incident(cluster)
    assert inc["status"]["phase"] == "Succeeded"
    assert inc["status"]["verdict"]["submission"] == "fix"
    # one CI Job per Submission, whatever the restart
    jobs = kubectl_json(cluster, "get", "jobs", "-n", DEMO_NS)["items"]
    ci = sorted(j["metadata"]["name"] for j in jobs if "-ci-" in j["metadata"]["name"])
    assert len(ci) == 2, ci


def test_two_incidents_of_two_scenarios_on_one_prometheus(demo: LocalCluster) -> None:
    """Two Incidents of different scenarios at the same time, each against its own catalog,
    both read by the chart's one Prometheus (every scenario's rules, scoped by scenario and
    Incident): the stampede gets its reference fix and passes, the pool leak gets an empty
    patch and fails; neither sees the other's alerts or load. Both are named `inc`: each
    one's agent calls its own MCP tools on the operator's endpoint and is refused at the
    other's; the stampede's fix is submitted through them."""
    cluster = demo
    # the first test's Incident, deleted, gives its catalog back (nothing else runs there)
    cluster.kubectl("delete", "incident", "-n", DEMO_NS, INCIDENT, "--timeout=120s", check=False)
    # ... without the Redis URL it put there; its Redis goes with it (garbage collector)
    dep = kubectl_json(cluster, "get", "deploy", "-n", DEMO_NS, "catalog")
    env = dep["spec"]["template"]["spec"]["containers"][0].get("env") or []
    assert "REDIS_URL" not in {e["name"] for e in env}, env
    wait_for(
        "the Incident's Redis to be garbage-collected",
        lambda: (
            cluster.kubectl(
                "get", "deploy", "-n", DEMO_NS, f"{INCIDENT}-redis", check=False
            ).returncode
            != 0
        ),
        timeout=120,
        interval=2,
    )
    pool = load_scenario(REPO_ROOT / "scenarios" / "errors-connection-pool-leak")
    cases = {"pair-a": (SCENARIO, FIX.read_text(), True), "pair-b": (pool, "", False)}
    for ns in cases:
        cluster.kubectl("create", "namespace", ns)
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(catalog_manifest(ns)))
    for ns in cases:
        cluster.kubectl("rollout", "status", "-n", ns, "deploy/catalog", "--timeout=120s")
    for ns, (scenario, _, _) in cases.items():
        body = {
            "apiVersion": "sreforge.dev/v1alpha1",
            "kind": "Incident",
            "metadata": {"name": "inc", "namespace": ns},
            "spec": {
                "scenario": scenario.name,
                "prometheusURL": f"http://prometheus.{SYSTEM_NS}.svc:9090",
                "loadRunner": "builtin",
                "verify": {
                    "sustainSeconds": 30,
                    "soakSeconds": [0, 0],
                    "fireTimeoutSeconds": 180,
                    "clearBudgetSeconds": 60,
                    "passThresholdPercent": 85,
                },
            },
        }
        cluster.kubectl("create", "-f", "-", input_text=json.dumps(body))

    def both_awaiting() -> bool:
        phases = []
        for ns in cases:
            st = incident(cluster, ns, "inc").get("status") or {}
            assert st.get("phase") not in ("Failed", "Succeeded"), json.dumps(st, indent=1)
            phases.append(st.get("phase"))
        return all(p == "AwaitingSubmission" for p in phases)

    wait_for("both Incidents to reach AwaitingSubmission", both_awaiting, timeout=300, interval=2)
    for ns, (scenario, _, _) in cases.items():
        assert incident(cluster, ns, "inc")["status"]["alert"] == scenario.target_alert
    names = {
        "pair-a": _tools_for_the_incidents_agent_alone(
            cluster, "pair-a", "pair-b", cases["pair-a"][1]
        ),
        "pair-b": "sub",
    }
    submit(cluster, "sub", cases["pair-b"][1], "pair-b", PAIR)
    for ns, (scenario, _, passes) in cases.items():
        sub = graded(cluster, names[ns], timeout=420, ns=ns)
        st = sub["status"]
        assert st["passed"] is passes, (scenario.name, json.dumps(st, indent=1))
        if passes:
            assert st["score"] >= 0.85
        else:
            assert st["reason"] == "NotCleared", json.dumps(st, indent=1)
    _graded_through_the_tools(cluster, "pair-a", names["pair-a"], cases["pair-a"][1])


# ----------------------------------------------------------------- confinement (issue #13)
# class of the attempt -> (its decoy of latency-cache-stampede, what its report must show:
# nothing of the harness found to act on)
EXPLOITS: dict[str, tuple[str, dict[str, Any]]] = {
    "redirect-load": (
        "exploit-redirect-load.patch",
        {"generators": {}, "sockets": {}},
    ),
    "rewrite-rules": (
        "exploit-rewrite-rules.patch",
        {"prometheus": [], "rule_files": [], "rewritten": [], "reloaded": {}},
    ),
    "signal-harness": ("exploit-signal-harness.patch", {"alive": [], "stopped": {}}),
    "read-root-cause": ("exploit-read-root-cause.patch", {"root_causes": [], "read": {}}),
    "harness-ports": ("exploit-harness-ports.patch", {"harness": 0, "answers": {}}),
}


def own_incident(cluster: LocalCluster, ns: str, sustain: int = 30, budget: int = 60) -> None:
    """A namespace with the healthy catalog and a stampede Incident against it, waited for
    until the alert fires (AwaitingSubmission)."""
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(catalog_manifest(ns)))
    cluster.kubectl("rollout", "status", "-n", ns, "deploy/catalog", "--timeout=120s")
    body = {
        "apiVersion": "sreforge.dev/v1alpha1",
        "kind": "Incident",
        "metadata": {"name": "inc", "namespace": ns},
        "spec": {
            "scenario": SCENARIO.name,
            "prometheusURL": f"http://prometheus.{SYSTEM_NS}.svc:9090",
            "loadRunner": "builtin",
            "verify": {
                "sustainSeconds": sustain,
                "fireTimeoutSeconds": 180,
                "clearBudgetSeconds": budget,
                "passThresholdPercent": 85,
            },
        },
    }
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(body))


def await_fired(cluster: LocalCluster, *namespaces: str) -> None:
    def fired() -> bool:
        phases = []
        for ns in namespaces:
            st = incident(cluster, ns, "inc").get("status") or {}
            assert st.get("phase") not in ("Failed", "Succeeded"), json.dumps(st, indent=1)
            phases.append(st.get("phase"))
        return all(p == "AwaitingSubmission" for p in phases)

    wait_for(f"{', '.join(namespaces)}: the alert to fire", fired, timeout=300, interval=2)


def deployed(cluster: LocalCluster, name: str, ns: str) -> None:
    def rolled_out() -> bool:
        sub = submission(cluster, name, ns)
        assert (sub.get("status") or {}).get("passed") is None, json.dumps(sub["status"])
        return (cond(sub, "Deployed") or {}).get("status") == "True"

    wait_for(f"{ns}/{name} to be rolled out", rolled_out, timeout=420, interval=1)


def exploit_reports(cluster: LocalCluster, ns: str, sub: str) -> list[dict[str, Any]]:
    """The `sreforge-exploit {...}` lines of the patched pod's log, read while it runs."""
    pods = kubectl_json(cluster, "get", "pods", "-n", ns, "-l", "app=catalog")["items"]
    out: list[dict[str, Any]] = []
    for pod in pods:
        overlay = (pod["metadata"].get("annotations") or {}).get("sreforge.dev/overlay")
        if overlay != sub:
            continue
        log = cluster.kubectl(
            "logs", "-n", ns, pod["metadata"]["name"], "-c", "catalog", check=False
        ).stdout
        out += [
            json.loads(line.removeprefix("sreforge-exploit "))
            for line in log.splitlines()
            if line.startswith("sreforge-exploit {")
        ]
    return out


# in the load's and prober's pods: what listens, and whether a scenario is in the image
LISTENING = """
import json, os
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A":
            ports.add(int(f[1].rsplit(":", 1)[1], 16))
print(json.dumps({"ports": sorted(ports), "scenarios": os.path.exists("/opt/sreforge/scenarios")}))
"""


def _tenant_pods_hold_nothing_of_the_grader(cluster: LocalCluster, ns: str) -> None:
    """The load's and prober's pods (the runner image) hold no scenario and listen on their
    metrics port alone, which answers no control call; the target's pods hold no token."""
    for app in ("loadgen", "prober"):
        (pod,) = kubectl_json(cluster, "get", "pods", "-n", ns, "-l", f"app={app}")["items"]
        name = pod["metadata"]["name"]
        assert pod["spec"]["containers"][0]["image"] == RUNNER_IMAGE
        seen = json.loads(
            cluster.kubectl("exec", "-n", ns, name, "--", "python", "-c", LISTENING).stdout
        )
        assert seen == {"ports": [9100], "scenarios": False}, (app, seen)
        ip = pod["status"]["podIP"]
        for method, path in (("POST", "/target"), ("GET", "/stats"), ("POST", "/stop")):
            req = urllib.request.Request(f"http://{ip}:9100{path}", data=b"{}", method=method)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=5)
            assert refused.value.code in (404, 405), (app, method, path, refused.value.code)
    for pod in kubectl_json(cluster, "get", "pods", "-n", ns, "-l", "app=catalog")["items"]:
        spec = pod["spec"]
        assert spec.get("automountServiceAccountToken") is False, spec
        assert not [v for v in spec.get("volumes") or [] if "projected" in v], spec["volumes"]
        for c in spec["containers"]:
            mounts = [m["mountPath"] for m in c.get("volumeMounts") or []]
            assert not [m for m in mounts if "serviceaccount" in m], mounts


def _grade_exploit(
    cluster: LocalCluster, ns: str, attempt: str, decoy: str, nothing: dict[str, Any]
) -> None:
    sub = attempt
    submit(cluster, sub, (SCENARIO.directory / "decoys" / decoy).read_text(), ns, "inc")
    deployed(cluster, sub, ns)
    reports = wait_for(
        f"{attempt}: the build's report in its log",
        lambda sub=sub: exploit_reports(cluster, ns, sub),
        timeout=60,
        interval=2,
    )
    print(attempt, json.dumps(reports)[:3000])
    assert {r["class"] for r in reports} == {attempt}, reports
    for report in reports:
        for key, value in nothing.items():
            assert report[key] == value, (attempt, key, report)
    st = graded(cluster, sub, timeout=420, ns=ns)["status"]
    print(attempt, st["reason"], st["score"])
    assert st["passed"] is False, (attempt, json.dumps(st, indent=1))
    assert st["score"] < 0.85
    assert st["reason"] == "NotCleared", (attempt, json.dumps(st, indent=1))
    assert st["signals"]["ci_green"]["value"] is True  # graded as a deployed build


def _repoint_service_to_a_healthy_pod(cluster: LocalCluster, ns: str) -> None:
    """The Service now selects a healthy catalog pod of the agent's own: with the empty
    patch the alert would clear (a fast build serves the load)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fast", "namespace": ns, "labels": {"app": "fast"}},
        "spec": catalog_manifest(ns)["items"][0]["spec"]["template"]["spec"],
    }
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
    cluster.kubectl("wait", "-n", ns, "pod/fast", "--for=condition=Ready", "--timeout=120s")
    cluster.kubectl(
        "patch", "-n", ns, "service", "catalog", "-p", '{"spec":{"selector":{"app":"fast"}}}'
    )


# namespace -> (the patch, what is done while it is verified, what the verdict must name)
TAMPERS: dict[str, tuple[str, list[str], str]] = {
    "tamper-scale": (
        "",
        ["scale", "deploy/catalog", "--replicas=0"],
        "Deployment spec.replicas: 1 -> 0",
    ),
    "tamper-probe": (
        FIX.read_text(),
        [
            "patch",
            "deploy/catalog",
            "--type=json",
            "-p",
            '[{"op":"remove","path":"/spec/template/spec/containers/0/readinessProbe"}]',
        ],
        "readinessProbe removed",
    ),
    "tamper-selector": ("", [], "Service spec.selector.app"),
}


@pytest.mark.slow
def test_submissions_that_change_the_rolled_out_target_fail(demo: LocalCluster) -> None:
    """While a Submission's build is verified, someone with rights in the target namespace
    (the reviewers' held-out checks, by hand) scales the Deployment to zero, deletes its
    readiness probe (under the reference fix, which would pass), or points the Service at
    a healthy pod of their own (under the empty patch, which would then clear the alert):
    each run fails NotCleared at once, its message naming the change, and the Incident
    ends (an environment someone changed is not graded again)."""
    cluster = demo
    for ns in TAMPERS:
        own_incident(cluster, ns, sustain=120)  # the fix could not pass before it is changed
    await_fired(cluster, *TAMPERS)
    for ns, (patch, _, _) in TAMPERS.items():
        submit(cluster, "sub", patch, ns, "inc")
    todo = dict(TAMPERS)

    def act_on_the_rolled_out() -> bool:
        for ns, (_, action, _) in list(todo.items()):
            sub = submission(cluster, "sub", ns)
            assert (sub.get("status") or {}).get("passed") is None, json.dumps(sub["status"])
            if (cond(sub, "Deployed") or {}).get("status") != "True":
                continue
            if action:
                cluster.kubectl("-n", ns, *action)
            else:
                _repoint_service_to_a_healthy_pod(cluster, ns)
            del todo[ns]
        return not todo

    wait_for("each build rolled out, then changed", act_on_the_rolled_out, timeout=600, interval=1)
    for ns, (_, _, named) in TAMPERS.items():
        with case(f"tamper (real node): the rolled-out target changed: {ns}"):
            _tamper_failed(cluster, ns, named)


def _tamper_failed(cluster: LocalCluster, ns: str, named: str) -> None:
    st = graded(cluster, "sub", timeout=300, ns=ns)["status"]
    print(ns, st["reason"], st["score"], cond(submission(cluster, "sub", ns), "Verified"))
    assert st["passed"] is False, (ns, json.dumps(st, indent=1))
    assert st["reason"] == "NotCleared", (ns, json.dumps(st, indent=1))
    verified = cond(submission(cluster, "sub", ns), "Verified") or {}
    assert "changed during verification" in verified.get("message", ""), verified
    assert named in verified["message"], verified
    wait_for(
        f"{ns}: the Incident to end",
        lambda ns=ns: (incident(cluster, ns, "inc").get("status") or {}).get("phase") == "Failed",
        timeout=180,
        interval=2,
    )


@pytest.mark.slow
def test_exploit_decoys_never_pass_on_real_pods(demo: LocalCluster) -> None:
    """Each exploit decoy of latency-cache-stampede, graded in turn against one Incident on
    real pods: each fails NotCleared (the regression is still there), its build ran the
    attempt (its report is in the patched pod's log) and found nothing of the harness to
    act on: a pod has its own network, PID and mount namespaces, the generator and prober
    have no control surface, the runner image has no scenarios, and no token is mounted."""
    cluster = demo
    ns = "exploits"
    own_incident(cluster, ns, budget=30)  # a build that clears does so well within 30 s
    await_fired(cluster, ns)
    with case("security (real node): what the tenant namespace's pods hold and serve"):
        _tenant_pods_hold_nothing_of_the_grader(cluster, ns)
    for attempt, (decoy, nothing) in EXPLOITS.items():
        with case(f"security (real node): exploit decoy graded: {attempt}"):
            _grade_exploit(cluster, ns, attempt, decoy, nothing)
        if attempt != list(EXPLOITS)[-1]:
            await_fired(cluster, ns)  # the regressed build is back and fires again
