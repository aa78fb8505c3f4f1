"""Agents plug in over MCP: a real MCP client session (the official SDK) against a real
local run of latency-cache-stampede, and the reference agent driven by scripted models.

One warm session grades four cases, so the environment is paid for once:

1. `--mcp`: this test is the agent. Over the run's MCP URL it reads every tool (alerts,
   PromQL, logs, deploy history, the workspace, the brief), is refused everything
   harness-internal (path traversal, another run's server, the root cause, the scenario's
   load and verification settings), gets tool errors for bad arguments while the server
   stays up, reaches the same tools over the stdio bridge, submits a wrong fix
   (decoys/break-tests.patch) and is refused a second submit while it is graded;
2. `--fix` of the same patch: graded exactly like the MCP submission (reason, pass, CI);
3. `sreforge agent` in its sandbox against a scripted model (ScriptedChatCompletions, a
   network-level TEST DOUBLE of a model's API) that applies the same wrong fix: it fails;
4. `sreforge agent` against a scripted model that investigates through the tools and
   applies fixes/restore-simplecache.patch: it passes.
"""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from mcp import Client, StdioServerParameters
from tests.chat_double import ScriptedChatCompletions

from sreforge import leaderboard, report
from sreforge.api.record import RunRecord
from sreforge.api.verdict import Reason
from sreforge.mcp import trajectory
from sreforge.mcp.shape import MAX_RESULT_CHARS
from sreforge.runtime import sandbox
from sreforge.runtime.local import CaseSpec, RunOptions
from sreforge.runtime.session import SessionResult, run_session
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
FIX = SCENARIO / "fixes" / "restore-simplecache.patch"
WRONG = SCENARIO / "decoys" / "break-tests.patch"  # the cache keyed wrong: CI red
SESSION_TIMEOUT = 900.0

pytestmark = [
    pytest.mark.graded,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="needs Debian's prometheus: bash scripts/setup.sh",
    ),
    pytest.mark.skipif(
        sandbox.available() is not None, reason=f"no agent sandbox: {sandbox.available()}"
    ),
]

INVESTIGATION: list[tuple[str, dict[str, Any]]] = [
    ("alerts", {"history_minutes": 10}),
    (
        "promql_query",
        {
            "query": "histogram_quantile(0.95, sum by (le) "
            "(rate(sreforge_load_request_duration_seconds_bucket[30s])))"
        },
    ),
    ("service_logs", {"service": "catalog", "contains": "/products/", "max_lines": 20}),
]


def solver() -> ScriptedChatCompletions:
    return ScriptedChatCompletions(
        [
            INVESTIGATION,
            [("deploy_history", {"max_count": 5})],
            # the cause is one below the newest commit (a harmless release bump)
            [("deploy_show", {"commit": "HEAD~1", "path": "catalog/app.py"})],
            [("apply_patch", {"patch": FIX.read_text()})],
            [("submit", {})],
        ]
    )


def wrong() -> ScriptedChatCompletions:
    return ScriptedChatCompletions(
        [
            [("deploy_history", {})],
            [("apply_patch", {"patch": WRONG.read_text()})],
            [("submit", {})],
        ]
    )


def agent_command(double: ScriptedChatCompletions, model: str) -> str:
    return (
        f"{sys.executable} -m sreforge.mcp.agent --base-url {double.base_url} "
        f"--model {model} --max-steps 10 --max-tokens 400000"
    )


@dataclass
class Live:
    """The session running in a thread, what it told the hand-offs, and what it graded."""

    handoffs: queue.Queue[tuple[str, str]] = field(default_factory=queue.Queue)
    result: SessionResult | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None
    doubles: dict[str, ScriptedChatCompletions] = field(default_factory=dict)

    def finished(self) -> SessionResult:
        assert self.thread is not None
        self.thread.join(SESSION_TIMEOUT)
        assert not self.thread.is_alive(), "the session did not end in time"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    state = Live()
    state.doubles = {"wrong": wrong().start(), "solver": solver().start()}
    venv = Path(sys.executable).parent.parent
    interpreter = Path(sys.executable).resolve().parent.parent  # where the venv's python is
    shares = [venv, ROOT / "operator"]
    if not interpreter.is_relative_to("/usr") and not interpreter.is_relative_to("/opt"):
        shares.append(interpreter)  # the OS's own is in every sandbox already
    options = RunOptions(
        runs_dir=tmp_path_factory.mktemp("mcp") / "runs",
        sustain_seconds=10,
        soak_seconds=(0.0, 0.0),  # the soak has its own test (test_soak.py)
        agent_timeout_seconds=300,
        agent_shares=shares,
        live=False,
        progress=lambda line: print(line, file=sys.stderr),
        mcp_ready=lambda url, text: state.handoffs.put((url, text)),
    )
    cases = [
        CaseSpec("mcp-client", mcp=True),
        CaseSpec("fix", fix=WRONG),
        CaseSpec("agent-wrong", agent=agent_command(state.doubles["wrong"], "scripted-wrong")),
        CaseSpec("agent-solver", agent=agent_command(state.doubles["solver"], "scripted-solver")),
    ]

    def run() -> None:
        try:
            state.result = run_session(load_scenario(SCENARIO), ROOT, options, cases)
        except BaseException as exc:
            state.error = exc

    state.thread = threading.Thread(target=run, name="mcp-session", daemon=True)
    state.thread.start()
    yield state
    if state.thread.is_alive():
        state.thread.join(SESSION_TIMEOUT)
    for double in state.doubles.values():
        double.stop()


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


HARNESS_WORDS = (
    "known_answers",  # [load] of scenario.toml
    "sustain_seconds",  # [verify]
    "clear_budget",
    "pass_threshold",
    "max_in_flight",
    "soak",
)


async def _client_session(url: str, workspace: Path) -> dict[str, Any]:
    """Everything the test asks of the server as an agent would; returns what it saw."""
    seen: dict[str, Any] = {"errors": {}}
    root_cause = (SCENARIO / "root_cause.md").read_text()
    secrets = ("harness-internal: never shown", "Correct fixes restore caching")
    assert all(s in root_cause for s in secrets)
    async with Client(url) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        seen["tools"] = names

        async def ok(tool: str, args: dict[str, Any]) -> str:
            result = await c.call_tool(tool, args)
            assert not result.is_error, f"{tool}({args}): {_text(result)}"
            text = _text(result)
            assert len(text) <= MAX_RESULT_CHARS
            for word in HARNESS_WORDS:
                assert word not in text, f"{tool} showed {word!r}"
            assert not any(s in text for s in secrets), f"{tool} showed the root cause"
            return text

        async def refused(tool: str, args: dict[str, Any]) -> str:
            result = await c.call_tool(tool, args)
            assert result.is_error, f"{tool}({args}) was not refused: {_text(result)[:300]}"
            text = _text(result)
            assert len(text) < 2000
            seen["errors"][f"{tool} {json.dumps(args)}"] = text
            return text

        seen["brief"] = await ok("brief", {})
        seen["alerts"] = json.loads(await ok("alerts", {"history_minutes": 15}))
        seen["up"] = json.loads(await ok("promql_query", {"query": 'up{job="catalog"}'}))
        seen["range"] = json.loads(
            await ok(
                "promql_range",
                {
                    "query": "sum(rate(sreforge_load_requests_total[10s]))",
                    "start": "-2m",
                    "step": "5s",
                },
            )
        )
        # every series of the run: the load generator's and prober's are Prometheus data the
        # alerts read (as with SREFORGE_PROMETHEUS_URL), so only the cap is checked here
        everything = await c.call_tool("promql_query", {"query": '{__name__=~".+"}'})
        assert not everything.is_error
        seen["everything"] = _text(everything)
        assert len(seen["everything"]) <= MAX_RESULT_CHARS
        seen["logs"] = await ok("service_logs", {"service": "catalog", "max_lines": 50})
        seen["errors_only"] = await ok(
            "service_logs", {"service": "catalog", "level": "ERROR", "since": "-30m"}
        )
        seen["history"] = await ok("deploy_history", {})
        # the stampede's cause is one below the newest commit (a harmless release bump)
        seen["show"] = await ok("deploy_show", {"commit": "HEAD~1", "path": "catalog/app.py"})
        seen["list"] = await ok("workspace_list", {})
        seen["read"] = await ok("workspace_read", {"path": "catalog/app.py"})
        seen["status_before"] = json.loads(await ok("submission_status", {}))

        # everything harness-internal, and bad arguments: tool errors, the server stays up
        for path in (
            "../../record.json",
            "../handoff/history.git/config",
            str(SCENARIO / "root_cause.md"),
            "../../../scenarios/latency-cache-stampede/scenario.toml",
            ".git/config",
        ):
            await refused("workspace_read", {"path": path})
        await refused("workspace_list", {"path": "../.."})
        await refused("deploy_show", {"commit": "--output=/tmp/x"})
        await refused("deploy_show", {"commit": "HEAD", "path": "../root_cause.md"})
        for service in ("loadgen", "prober", "prometheus", "../logs/loadgen", "harness"):
            await refused("service_logs", {"service": service})
        await refused("service_logs", {"service": "catalog", "level": "LOUD"})
        await refused("service_logs", {"service": "catalog", "max_lines": 100000})
        seen["bad_promql"] = await refused("promql_query", {"query": "sum(rate(up[1m]"})
        await refused("promql_range", {"query": "up", "start": "-1h", "step": "0.1s"})
        await refused("promql_range", {"query": "up", "start": "yesterday"})
        await refused("alerts", {"history_minutes": 0})
        await refused("service_logs", {"service": 3})  # not a string: the SDK's validation
        await refused("no_such_tool", {})
        seen["still_up"] = await ok("brief", {})

        # the same tools over stdio: `sreforge mcp RUN_DIR` as a client would start it
        bridge = StdioServerParameters(
            command=sys.executable, args=["-m", "sreforge.cli", "mcp", str(workspace.parent)]
        )
        async with Client(bridge) as stdio:
            seen["stdio_brief"] = _text(await stdio.call_tool("brief", {}))

        # the submission: a wrong fix, once; a second is refused while it is graded
        seen["submitted"] = await ok("submit", {"patch": WRONG.read_text()})
        seen["second"] = await refused("submit", {"patch": FIX.read_text()})
        seen["status_after"] = json.loads(await ok("submission_status", {}))
        seen["rca"] = await ok("submit_rca", {"text": "The product cache was removed."})
    assert (workspace / "catalog" / "app.py").read_text() == seen["read"]
    return seen


async def _submit_anyway(url: str) -> None:
    async with Client(url) as c:
        await c.call_tool("submit", {"patch": WRONG.read_text()})  # refused if already in


@pytest.fixture(scope="module")
def client_view(live: Live) -> dict[str, Any]:
    url, text = live.handoffs.get(timeout=400)
    config = json.loads(text[text.index("{") :])
    workspace = Path(text.split("workspace: ", 1)[1].splitlines()[0])
    # another run's agent knows the port (the network is shared), not this run's secret
    base, _token, tail = url.rsplit("/", 2)
    other_urls = {}
    for what, other in (
        ("another token", f"{base}/someone-elses-token/{tail}"),
        ("no token", f"{base}/{tail}"),
        ("root", f"{base}/"),
    ):
        resp = requests.post(
            other,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
            timeout=5,
        )
        other_urls[what] = resp.status_code
    try:
        seen = asyncio.run(_client_session(url, workspace))
    except BaseException:
        asyncio.run(_submit_anyway(url))  # never leave the session waiting for this case
        raise
    seen["url"], seen["config"], seen["other_urls"] = url, config, other_urls
    return seen


def test_every_tool_answers_from_the_live_incident(client_view: dict[str, Any]) -> None:
    seen = client_view
    assert {"alerts", "promql_query", "promql_range", "service_logs", "deploy_history"} <= seen[
        "tools"
    ]
    assert {"deploy_show", "brief", "submit", "submit_rca", "submission_status"} <= seen["tools"]
    assert "CatalogLatencyHigh" in seen["brief"]
    assert "Product pages" in seen["brief"] or "product" in seen["brief"].lower()
    firing = {a["alert"]: a for a in seen["alerts"]["firing"]}
    assert "activeSince" in firing["CatalogLatencyHigh"]
    assert any(e["alert"] == "CatalogLatencyHigh" for e in seen["alerts"]["history"])
    assert seen["up"]["result"][0]["metric"]["job"] == "catalog"
    assert seen["range"]["resultType"] == "matrix"
    assert len(seen["range"]["result"][0]["values"]) >= 3
    assert "[cut: " in seen["everything"]  # every series of the run: capped, and says so
    assert '"GET /products/' in seen["logs"]
    assert " 200 " in seen["logs"]
    assert "ms " in seen["logs"]
    assert "line(s) matched" in seen["errors_only"]
    assert "refactor: drop the cache layer" in seen["history"]
    assert "Priya Raman" in seen["history"]
    assert "-from .cache import SimpleCache" in seen["show"]
    assert "catalog/app.py" in seen["list"]
    assert ".git" not in seen["list"]
    assert seen["status_before"] == {"state": "open"}
    assert seen["stdio_brief"] == seen["brief"]
    assert seen["config"]["mcpServers"]["sreforge"]["url"] == seen["url"]


def test_harness_internals_and_bad_arguments_are_tool_errors(
    client_view: dict[str, Any],
) -> None:
    errors = client_view["errors"]
    assert any("leaves the workspace" in e for e in errors.values())
    assert any("is absolute" in e for e in errors.values())
    assert any("repository's metadata" in e for e in errors.values())
    assert any("not a commit id" in e for e in errors.values())
    assert errors['service_logs {"service": "loadgen"}'].count("services: ") == 1
    assert "loadgen" not in errors['service_logs {"service": "loadgen"}'].split("services: ")[1]
    assert "bad_data" in client_view["bad_promql"] or "parse error" in client_view["bad_promql"]
    assert client_view["still_up"] == client_view["brief"]


def test_another_runs_server_is_out_of_reach(client_view: dict[str, Any]) -> None:
    assert client_view["other_urls"] == {"another token": 404, "no token": 404, "root": 404}


def test_one_submission_is_graded_and_a_second_refused(client_view: dict[str, Any]) -> None:
    assert client_view["submitted"].startswith("accepted")
    assert "is being graded" in client_view["second"]
    assert client_view["status_after"]["state"] in ("grading", "graded")
    assert client_view["rca"].startswith("kept")


def _record(result: SessionResult, index: int) -> tuple[RunRecord, Path]:
    record = result.record_of(index)
    assert record is not None, f"case {index + 1} was not graded"
    return record, result.directory.parent / record.run_id


def test_an_mcp_submit_is_graded_exactly_like_the_same_fix(
    live: Live, client_view: dict[str, Any]
) -> None:
    assert client_view["submitted"]
    result = live.finished()
    mcp, mcp_dir = _record(result, 0)
    fix, _ = _record(result, 1)
    assert mcp.submission.kind == "mcp"
    assert mcp.submission.submitted_via == "mcp"
    assert fix.submission.submitted_via == "fix"
    assert (mcp.reason, mcp.passed) == (fix.reason, fix.passed) == (Reason.CI_RED, False)
    assert (mcp.ci.status, mcp.ci.reason) == (fix.ci.status, fix.ci.reason)
    assert (mcp_dir / "submission.patch").read_text() == WRONG.read_text()
    assert (mcp_dir / "rca.txt").read_text() == "The product cache was removed."
    calls = trajectory.read(mcp_dir / trajectory.FILE)
    assert mcp.submission.trajectory == trajectory.FILE
    tools = [c["tool"] for c in calls]
    assert tools[0] == "brief"
    assert "submit" in tools
    assert all(len(c["resultSha256"]) == 64 for c in calls)
    assert sum(c["error"] for c in calls) >= 15
    # every refused call is in the trajectory too, with its arguments
    assert any(c["arguments"].get("commit") == "--output=/tmp/x" for c in calls)
    assert any(c["tool"] == "no_such_tool" and c["error"] for c in calls)
    # the case keeps the service's logs it could see, named like its instances
    kept = sorted((mcp_dir / "logs").glob("catalog-*.log"))
    assert kept, "no service log kept in the case's directory"
    assert any('"GET /products/' in p.read_text(errors="replace") for p in kept)


def test_the_reference_agent_fails_with_a_wrong_fix_and_passes_with_the_solver(
    live: Live,
) -> None:
    result = live.finished()
    wrong_record, wrong_dir = _record(result, 2)
    solved, solved_dir = _record(result, 3)
    assert wrong_record.submission.submitted_via == "mcp"
    assert wrong_record.submission.sandboxed is True
    assert (wrong_record.reason, wrong_record.passed) == (Reason.CI_RED, False)
    assert solved.submission.submitted_via == "mcp"
    assert (solved.reason, solved.passed) == (Reason.PASSED, True), solved.message
    assert solved.submission.files_changed == ["catalog/app.py"]
    # the scripted model got every tool's result back before its next step
    results = live.doubles["solver"].tool_results()
    assert any("refactor: drop the cache layer" in r for r in results)
    assert any("-from .cache import SimpleCache" in r for r in results)
    assert any(r.startswith("applied: catalog/app.py") for r in results)
    calls = trajectory.read(solved_dir / trajectory.FILE)
    assert [c["tool"] for c in calls] == [
        "brief",
        "alerts",
        "promql_query",
        "service_logs",
        "deploy_history",
        "deploy_show",
        "submit",
    ]
    # report.html and the leaderboard summarise it; the verdict does not read it
    _png, html = report.write_report(solved_dir)
    page = html.read_text()
    assert "Agent&#x27;s tool calls" in page or "Agent's tool calls" in page
    assert "deploy_show" in page
    rows = {r.runId: r for r in leaderboard.collect(result.directory.parent)}
    assert rows[solved.run_id].toolCalls == 7
    assert rows[solved.run_id].submittedAfterSeconds is not None
    assert rows[wrong_record.run_id].toolCalls == 3
    assert not any("tool" in s.detail for s in solved.signals.values())  # not in the grade
    assert (wrong_dir / "logs" / "agent.log").read_text().count('"submitted": true') == 1
