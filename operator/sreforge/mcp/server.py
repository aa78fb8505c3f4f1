"""`sreforge mcp`: one incident's tools over the Model Context Protocol (the official SDK).

`ToolServer` serves an `IncidentTools` over streamable HTTP on 127.0.0.1, in a thread of
the harness that runs the incident, at a path holding a per-run secret: the URL is the
credential, so another run's agent (the network is shared) cannot call this run's tools.
Every call is appended to the run's trajectory. `serve_stdio_proxy` serves the same tools
over stdio by forwarding each call to a run's URL, for clients that start servers as
subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp import Client, types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server

from sreforge.mcp import trajectory
from sreforge.mcp.shape import Refused
from sreforge.mcp.tools import IncidentTools

log = logging.getLogger("sreforge.mcp")

INSTRUCTIONS = (
    "Tools of one production incident: read the brief, the firing alerts and their history, "
    "query Prometheus (PromQL), read the service's logs and its deploy history (git log/show "
    "of the deployed source), read the workspace. Fix the workspace (your own editor or "
    "shell) and call submit once: the fix goes through CI and is rolled out under live "
    "traffic. submit_rca keeps a root-cause write-up. Everything else is read-only."
)


class Recorder:
    """Server middleware: every `tools/call` into the trajectory, as the caller sent it and
    as it was answered, a call the SDK refused before the tool ran (an unknown tool, an
    argument of the wrong type) included."""

    def __init__(self, record: trajectory.Trajectory) -> None:
        self.record = record

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, dict) else {}
        name = str(params.get("name", "?"))
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        t = time.time()
        try:
            result = await call_next(ctx)
        except Exception as exc:  # a protocol error (MCPError, invalid params): still a call
            _note(self.record, t, name, arguments, str(exc), error=True)
            raise
        text, error = _result_text(result)
        _note(self.record, t, name, arguments, text, error=error)
        return result


def _result_text(result: Any) -> tuple[str, bool]:
    if isinstance(result, types.CallToolResult):
        return "\n".join(getattr(c, "text", "") for c in result.content), bool(result.is_error)
    if isinstance(result, dict):
        content = result.get("content") or []
        text = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return text, bool(result.get("isError") or result.get("is_error"))
    return "", False


def build(tools: IncidentTools, record: trajectory.Trajectory | None) -> MCPServer[Any]:
    """The MCP server of `tools`; each call is recorded in `record`."""
    server: MCPServer[Any] = MCPServer(
        name="sreforge-incident",
        instructions=INSTRUCTIONS,
        version="1",
        log_level="WARNING",
        middleware=[Recorder(record)] if record is not None else [],
    )

    def call(name: str, arguments: dict[str, Any], fn: Callable[[], str]) -> str:
        del arguments  # recorded by the Recorder middleware, as the caller sent them
        try:
            return fn()
        except Refused as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # a fault of the server, not the caller: no internals shown
            log.exception("tool %s failed", name)
            why = f"the tool failed on the server's side ({exc.__class__.__name__}); try again"
            raise ToolError(why) from None

    @server.tool()
    def brief() -> str:
        """The incident brief: what is firing, what users report, which services have logs."""
        return call("brief", {}, tools.brief)

    @server.tool()
    def alerts(history_minutes: int = 30) -> str:
        """Alerts firing and pending now (with since when), and every alert episode over the
        last `history_minutes` (from Prometheus' ALERTS and ALERTS_FOR_STATE)."""
        args = {"history_minutes": history_minutes}
        return call("alerts", args, lambda: tools.alerts(history_minutes))

    @server.tool()
    def promql_query(query: str, time: str | None = None) -> str:
        """A PromQL instant query against the incident's Prometheus. `time`: Unix seconds,
        RFC 3339, or relative like -5m (default: now). Returns Prometheus' `data` as JSON."""
        args = {"query": query, "time": time}
        return call("promql_query", args, lambda: tools.promql_query(query, time))

    @server.tool()
    def promql_range(query: str, start: str = "-15m", end: str = "now", step: str = "15s") -> str:
        """A PromQL range query: `start`/`end` as Unix seconds, RFC 3339 or relative (-30m),
        `step` like 15s or 1m (at most 2000 points per series)."""
        args = {"query": query, "start": start, "end": end, "step": step}
        return call("promql_range", args, lambda: tools.promql_range(query, start, end, step))

    @server.tool()
    def service_logs(
        service: str,
        *,
        since: str | None = "-15m",
        until: str | None = None,
        level: str | None = None,
        contains: str | None = None,
        max_lines: int = 200,
    ) -> str:
        """A service's logs (every instance, oldest first): from `since` to `until` (Unix
        seconds, RFC 3339 or relative like -10m), at `level` or above (DEBUG, INFO, WARNING,
        ERROR), lines containing `contains`; the newest `max_lines` (at most 500)."""
        args = {
            "service": service,
            "since": since,
            "until": until,
            "level": level,
            "contains": contains,
            "max_lines": max_lines,
        }
        return call(
            "service_logs",
            args,
            lambda: tools.service_logs(
                service,
                since=since,
                until=until,
                level=level,
                contains=contains,
                max_lines=max_lines,
            ),
        )

    @server.tool()
    def deploy_history(max_count: int = 20) -> str:
        """The deploy history: `git log --stat` of the deployed source, newest first."""
        return call(
            "deploy_history", {"max_count": max_count}, lambda: tools.deploy_history(max_count)
        )

    @server.tool()
    def deploy_show(commit: str, path: str | None = None) -> str:
        """`git show` of one deploy's commit (hex id, HEAD, HEAD~N), optionally one path."""
        args = {"commit": commit, "path": path}
        return call("deploy_show", args, lambda: tools.deploy_show(commit, path))

    @server.tool()
    def workspace_list(path: str = ".") -> str:
        """The files under `path` of the workspace (the deployed source), read-only."""
        return call("workspace_list", {"path": path}, lambda: tools.workspace_list(path))

    @server.tool()
    def workspace_read(path: str) -> str:
        """One file of the workspace, by its path relative to the workspace, read-only."""
        return call("workspace_read", {"path": path}, lambda: tools.workspace_read(path))

    @server.tool()
    def submit(patch: str | None = None) -> str:
        """Submit the fix, once: a unified diff against the workspace, or (no `patch`) the
        workspace's own changes. It goes through CI and is rolled out under live traffic;
        follow it with submission_status."""
        return call("submit", {"patch": patch}, lambda: tools.submit(patch))

    @server.tool()
    def submit_rca(text: str) -> str:
        """Keep a root-cause analysis beside the verdict (the last one given counts)."""
        return call("submit_rca", {"text": text}, lambda: tools.submit_rca(text))

    @server.tool()
    def submission_status() -> str:
        """Where the submission stands: open, grading, or graded (with the verdict)."""
        return call("submission_status", {}, tools.submission_status)

    return server


def _note(
    record: trajectory.Trajectory | None,
    t: float,
    tool: str,
    arguments: dict[str, Any],
    result: str,
    *,
    error: bool,
) -> None:
    if record is None:
        return
    try:
        record.append(trajectory.entry(t, tool, arguments, result, error=error))
    except OSError:  # the trajectory is a record, never a reason to fail the call
        log.warning("could not append to %s", record.path)


class ToolServer:
    """`build(tools)` over streamable HTTP on 127.0.0.1 in a thread: `start`, `url`, `stop`."""

    def __init__(
        self, tools: IncidentTools, record: trajectory.Trajectory | None, host: str = "127.0.0.1"
    ) -> None:
        self.token = secrets.token_urlsafe(18)
        self.host = host
        self.path = f"/{self.token}/mcp"
        self.app = build(tools, record).streamable_http_app(
            streamable_http_path=self.path, host=host
        )
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port = int(self._sock.getsockname()[1])
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="on",
            access_log=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=3,  # a client's open event stream must not hold the run
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def start(self, timeout: float = 10.0) -> ToolServer:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="sreforge-mcp",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP tool server did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


async def serve_stdio_proxy(url: str) -> None:
    """Serve, over this process's stdin/stdout, the tools of the run at `url` (forwarded)."""
    async with Client(url) as remote:
        listed = await remote.list_tools()

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=listed.tools)

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> Any:
            return await remote.call_tool(params.name, params.arguments or {})

        proxy: Server[Any] = Server(
            name="sreforge-incident",
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
        async with stdio_server() as (read, write):
            await proxy.run(read, write, proxy.create_initialization_options())
