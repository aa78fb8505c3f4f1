"""The tool server on its own, quickly: a real MCP client session (the official SDK) over
streamable HTTP against `ToolServer`, with a real Prometheus evaluating a rule that always
fires, a real workspace repository and real log files. Not graded (no service, no load):
the graded run is tests/integration/test_mcp_run.py."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from tests.chat_double import ScriptedChatCompletions

from sreforge.mcp import agent, trajectory
from sreforge.mcp.server import ToolServer
from sreforge.mcp.tools import Incident, IncidentTools
from sreforge.runtime import ci, handoff, workspace
from sreforge.runtime.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="needs Debian's prometheus: bash scripts/setup.sh"
)

RULES = """\
groups:
  - name: test
    rules:
      - alert: AlwaysOn
        expr: vector(1)
        labels: {severity: ticket}
"""

LOG = """\
{t} INFO catalog: serving /data/catalog.db
{t} INFO catalog.access: 127.0.0.1 "GET /products/7 HTTP/1.1" 200 812.4ms "Mozilla/5.0"
{t} ERROR aiohttp.server: Error handling request
Traceback (most recent call last):
RuntimeError: database is locked
"""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Path, handoff.Desk]]:
    tmp = tmp_path_factory.mktemp("tools")
    rules = tmp / "rules.yml"
    rules.write_text(RULES)
    prom = PrometheusServer(tmp / "prometheus", [rules], ["self"])
    prom.start()
    healthy, regressed, ws = tmp / "healthy", tmp / "regressed", tmp / "workspace"
    for tree, text in ((healthy, "CACHE = True\n"), (regressed, "CACHE = False\n")):
        (tree / "catalog").mkdir(parents=True)
        (tree / "catalog" / "app.py").write_text(text)
    workspace.prepare(
        healthy,
        regressed,
        ws,
        service="catalog",
        regression_patch=(SCENARIO / "history" / "01-drop-cache-layer.patch").read_text(),
    )
    history = tmp / "history.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ws), str(history)], check=True)
    (ws / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned-by-agent\n")
    logs = tmp / "logs"
    logs.mkdir()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S,000", time.gmtime())
    (logs / "catalog-regressed.log").write_text(LOG.format(t=stamp) + "x" * 100 + "\n")
    (tmp / "brief.md").write_text((SCENARIO / "brief.md").read_text())
    desk = handoff.Desk(lambda: ci.diff_trees(regressed, ws), tmp / "rca.txt")
    incident = Incident(
        run_id="run-a",
        alert="CatalogLatencyHigh",
        service="catalog",
        brief=tmp / "brief.md",
        workspace=ws,
        prometheus_url=prom.url,
        history=history,
        desk=desk,
        log_files=lambda: {"catalog": [("catalog-abc1234-1", logs / "catalog-regressed.log")]},
    )
    record = trajectory.Trajectory(tmp / trajectory.FILE)
    server = ToolServer(IncidentTools(incident), record).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the rule's first evaluation
        if "AlwaysOn" in json.dumps(IncidentTools(incident).alerts(5)):
            break
        time.sleep(0.5)
    try:
        yield server.url, tmp, desk
    finally:
        server.stop()
        prom.stop()


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def _session(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Client(url) as c:
        for name, args in (
            ("alerts", {"history_minutes": 5}),
            ("promql_query", {"query": "ALERTS"}),
            ("promql_query", {"query": "sum(rate(up[1m]"}),
            ("promql_range", {"query": "vector(1)", "start": "-1m", "step": "10s"}),
            ("service_logs", {"service": "catalog", "level": "ERROR"}),
            ("service_logs", {"service": "catalog", "max_lines": 2}),
            ("deploy_history", {}),
            ("deploy_show", {"commit": "HEAD"}),
            ("deploy_show", {"commit": "HEAD", "path": "../../etc/passwd"}),
            ("workspace_read", {"path": "../brief.md"}),
            ("brief", {}),
            ("service_logs", {"service": ["catalog"]}),  # the SDK's own validation refuses it
        ):
            result = await c.call_tool(name, args)
            out[f"{name} {json.dumps(args)}"] = (result.is_error, _text(result))
    # the same tools over stdio, as a client that starts servers as commands reaches them
    bridge = StdioServerParameters(
        command=sys.executable, args=["-m", "sreforge.cli", "mcp", "--connect", url]
    )
    async with Client(bridge) as stdio:
        out["stdio tools"] = (False, " ".join(t.name for t in (await stdio.list_tools()).tools))
        result = await stdio.call_tool("workspace_read", {"path": "../brief.md"})
        out["stdio refused"] = (result.is_error, _text(result))
    return out


def test_tools_answer_and_refuse_over_a_real_session(
    served: tuple[str, Path, handoff.Desk],
) -> None:
    url, tmp, _desk = served
    seen = asyncio.run(_session(url))

    def ok(key: str) -> str:
        error, text = seen[key]
        assert not error, f"{key}: {text}"
        return text

    def refused(key: str) -> str:
        error, text = seen[key]
        assert error, f"{key} was not refused: {text}"
        return text

    alerts = json.loads(ok('alerts {"history_minutes": 5}'))
    assert alerts["firing"][0]["alert"] == "AlwaysOn"
    assert "activeSince" in alerts["firing"][0]
    assert alerts["history"][0]["alert"] == "AlwaysOn"
    assert "AlwaysOn" in ok('promql_query {"query": "ALERTS"}')
    assert "parse error" in refused('promql_query {"query": "sum(rate(up[1m]"}')
    series = json.loads(ok('promql_range {"query": "vector(1)", "start": "-1m", "step": "10s"}'))
    assert len(series["result"][0]["values"]) >= 6
    errors = ok('service_logs {"service": "catalog", "level": "ERROR"}')
    assert "RuntimeError: database is locked" in errors
    assert "GET /products/7" not in errors
    newest = ok('service_logs {"service": "catalog", "max_lines": 2}')
    assert "[cut: the oldest" in newest
    assert "catalog-abc1234-1 | " in newest
    history = ok("deploy_history {}")
    assert "refactor: drop the cache layer" in history
    assert "release: catalog as deployed last week" in history
    assert "+CACHE = False" in ok('deploy_show {"commit": "HEAD"}')
    assert "leaves the workspace" in refused(
        'deploy_show {"commit": "HEAD", "path": "../../etc/passwd"}'
    )
    assert "leaves the workspace" in refused('workspace_read {"path": "../brief.md"}')
    assert "CatalogLatencyHigh" in ok("brief {}")
    assert "service" in refused('service_logs {"service": ["catalog"]}')
    # the agent's .git/config is never run by the harness: history is read from its copy
    assert not Path("/tmp/pwned-by-agent").exists()
    assert "deploy_history" in ok("stdio tools").split()
    assert "leaves the workspace" in refused("stdio refused")
    calls = trajectory.read(tmp / trajectory.FILE)
    assert len(calls) == len(seen) - 1  # listing the tools is no tool call
    assert [c["error"] for c in calls].count(True) == 5
    assert calls[-2]["arguments"] == {"service": ["catalog"]}  # recorded as sent


FIX = """\
diff --git a/catalog/app.py b/catalog/app.py
--- a/catalog/app.py
+++ b/catalog/app.py
@@ -1 +1 @@
-CACHE = False
+CACHE = True
"""


def test_the_reference_agent_investigates_edits_and_submits_once(
    served: tuple[str, Path, handoff.Desk],
) -> None:
    """`sreforge agent`'s loop against ScriptedChatCompletions (a network-level TEST DOUBLE
    of a model's API): its tool calls reach the server, the results go back to the model,
    its edit is the workspace's diff, and it stops after its one submit."""
    url, tmp, desk = served
    double = ScriptedChatCompletions(
        [
            [("deploy_history", {"max_count": 2}), ("write_file", {"path": "../x", "content": ""})],
            [("apply_patch", {"patch": FIX})],
            [("submit", {})],
            [("submit", {})],  # never asked: the agent stops once it has submitted
        ]
    ).start()
    try:
        outcome = asyncio.run(
            agent.run_agent(
                url,
                tmp / "workspace",
                agent.ChatModel(double.base_url, "scripted"),
                agent.Budget(max_steps=10),
                say=lambda _line: None,
            )
        )
    finally:
        double.stop()
    assert outcome["submitted"] is True
    assert outcome["steps"] == 3
    assert outcome["tokens"] > 0
    first = double.requests[0]
    assert first["model"] == "scripted"
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"deploy_history", "submit", "apply_patch", "write_file"} <= names
    assert "CatalogLatencyHigh" in first["messages"][1]["content"]  # the brief
    results = double.tool_results()
    assert "refactor: drop the cache layer" in results[0]
    assert results[1].startswith("ERROR: path: '../x' leaves the workspace")
    assert results[2] == "applied: catalog/app.py"
    assert desk.via_mcp
    assert desk.patch is not None
    assert "+CACHE = True" in desk.patch
    assert desk.status()["state"] == "grading"
