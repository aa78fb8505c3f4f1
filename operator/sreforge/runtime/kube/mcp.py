"""The operator's MCP endpoint: each handed-off Incident's tools (sreforge.mcp) over
streamable HTTP, at `/incidents/<namespace>/<name>/mcp` on one port of the operator's pod.

Who may call an Incident's tools is the API server's answer, not a secret of ours:
- the caller sends a bearer token that the API server vouches for (TokenReview) with the
  audience `sreforge-mcp`, so a token meant for the API server itself is refused;
- its user may `get` the Incident's `mcp` subresource (SubjectAccessReview).
At the hand-off the operator makes `<incident>-agent`, a ServiceAccount with a Role that
grants exactly that on exactly that Incident (policy.agent_access). The credential is the
agent's own ServiceAccount token: held by the pods that run as it and by whoever may
request tokens for it, never by another Incident's agent, whose token the endpoint refuses.

The tools are those of a local run (sreforge.mcp.tools.IncidentTools) over Kubernetes
sources: the brief from `status.brief`, the target's pods' logs through the API, the deploy
history and a read-only workspace made in the operator's /tmp from the scenario's source
and history (the same repository a local run hands off), PromQL against the Incident's
Prometheus. `submit` creates a Submission, graded like any other, annotated with what the
agent's calls before it looked at (sreforge.mcp.trajectory.summarise; never the verdict's).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import uvicorn

from sreforge.api.resources import API_VERSION, MAX_INLINE_PATCH, IncidentSpec
from sreforge.mcp import server as tool_server
from sreforge.mcp import trajectory
from sreforge.mcp.shape import Refused
from sreforge.mcp.tools import Incident, IncidentTools, LogSource
from sreforge.runtime import handoff, sources
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.runtime.kube.policy import MCP_AUDIENCE, MCP_SUBRESOURCE, mcp_path
from sreforge.runtime.kube.render import telemetry_scope
from sreforge.runtime.kube.status import FINISHING, condition_of
from sreforge.telemetry import label_matchers

log = logging.getLogger("sreforge.mcp")

PATH = re.compile(r"/incidents/([a-z0-9][-a-z0-9]{0,62})/([a-z0-9][-a-z0-9.]{0,252})/mcp/?")
MOUNT = "/mcp"  # each Incident's app serves here; the dispatcher rewrites the path
AUTH_CACHE_SECONDS = 30.0  # a token's answer is asked again after this
LOG_TAIL_LINES = 4000  # per pod
MCP_LABEL = "sreforge.dev/via"  # on Submissions made through the tools: "mcp"
TRAJECTORY_ANNOTATION = "sreforge.dev/trajectory"  # ... with what the agent looked at


# ----------------------------------------------------------------------- who may call
class Authorizer:
    """Token -> allowed for (namespace, Incident), asked of the API server, kept a while."""

    def __init__(self, kube: Kube, ttl: float = AUTH_CACHE_SECONDS) -> None:
        self.kube = kube
        self.ttl = ttl
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str], tuple[float, bool, str]] = {}

    def allowed(self, token: str, ns: str, name: str) -> tuple[bool, str]:
        key = (hashlib.sha256(token.encode()).hexdigest(), ns, name)
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1], hit[2]
        user = self.kube.review_token(token, MCP_AUDIENCE)
        if user is None:
            ok, why = False, f"the token is not a valid token for the audience {MCP_AUDIENCE}"
        else:
            ok, reason = self.kube.may(
                user,
                ns,
                {
                    "group": API_VERSION.split("/")[0],
                    "resource": "incidents",
                    "subresource": MCP_SUBRESOURCE,
                    "name": name,
                    "verb": "get",
                },
            )
            who = user.get("username", "?")
            why = "" if ok else f"{who} may not use the tools of Incident {ns}/{name}"
            if not ok and reason:
                why += f" ({reason})"
        with self._lock:
            self._seen[key] = (now, ok, why)
            if len(self._seen) > 4096:  # old answers out
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.ttl}
        return ok, why


# ----------------------------------------------------------------------- submissions
def _submission_state(sub: dict[str, Any]) -> dict[str, Any]:
    graded = condition_of(sub, "Graded")
    st = sub.get("status") or {}
    out: dict[str, Any] = {"submission": sub["metadata"]["name"]}
    if graded is not None and graded.status == "True":
        out["state"] = handoff.GRADED
        out["verdict"] = {
            "reason": st.get("reason", graded.reason),
            "passed": st.get("passed"),
            "score": st.get("score"),
            "message": graded.message,
        }
    elif graded is None or graded.reason in ("Queued", "Grading"):
        out["state"] = handoff.GRADING
    else:
        out["state"] = "refused"
        out["reason"], out["message"] = graded.reason, graded.message
    return out


class KubeDesk:
    """An Incident's submission desk on Kubernetes: `submit` creates a Submission (graded
    like any other), one at a time; a write-up given before it goes with it."""

    def __init__(
        self,
        kube: Kube,
        ns: str,
        incident: str,
        record: Path | None = None,
        handed_off: float | None = None,
    ) -> None:
        self.kube = kube
        self.ns = ns
        self.incident = incident
        self.record = record  # the agent's calls so far (trajectory.jsonl)
        self.handed_off = handed_off
        self._lock = threading.Lock()
        self._rca: str | None = None

    def _looked_at(self) -> str:
        """What the agent's calls before this submit looked at (trajectory.summarise), for
        the Submission's annotation TRAJECTORY_ANNOTATION: a record, never the verdict's."""
        calls = trajectory.read(self.record) if self.record is not None else []
        return json.dumps(trajectory.summarise(calls, self.handed_off), sort_keys=True)

    def _mine(self) -> list[dict[str, Any]]:
        subs = [
            s
            for s in self.kube.list_submissions(self.ns)
            if ((s.get("spec") or {}).get("incidentRef") or {}).get("name") == self.incident
            and (s["metadata"].get("labels") or {}).get(MCP_LABEL) == "mcp"
        ]
        return sorted(subs, key=lambda s: str(s["metadata"].get("creationTimestamp", "")))

    def submit(self, patch: str | None) -> str:
        if patch is None:
            raise Refused(
                "patch: give the fix as a unified diff (git apply -p1) against the workspace; "
                "the workspace these tools show is read-only"
            )
        if len(patch.encode()) > MAX_INLINE_PATCH:
            raise Refused(f"patch: larger than {MAX_INLINE_PATCH} bytes")
        with self._lock:
            over = _finished(self.kube.get_incident(self.ns, self.incident))
            if over is not None:
                raise Refused(f"{over}: it takes no more submissions; see submission_status")
            for sub in self._mine():
                state = _submission_state(sub)
                if state["state"] == handoff.GRADING:
                    raise Refused(
                        f"Submission {sub['metadata']['name']} is being graded; one at a "
                        "time: follow it with submission_status"
                    )
            spec: dict[str, Any] = {
                "incidentRef": {"name": self.incident},
                "patch": {"inline": patch},
            }
            if self._rca:
                spec["rca"] = self._rca
            made = self.kube.create_submission(
                self.ns,
                {
                    "apiVersion": API_VERSION,
                    "kind": "Submission",
                    "metadata": {
                        "generateName": f"{self.incident[:40]}-mcp-",
                        "labels": {MCP_LABEL: "mcp"},
                        "annotations": {TRAJECTORY_ANNOTATION: self._looked_at()},
                    },
                    "spec": spec,
                },
            )
        name = made["metadata"]["name"]
        return (
            f"accepted: Submission {self.ns}/{name} ({patch.count(chr(10))} line(s)) goes "
            "through CI and is rolled out under live traffic; submission_status shows where "
            "it stands"
        )

    def submit_rca(self, text: str) -> str:
        if len(text) > handoff.MAX_RCA_CHARS:
            raise Refused(f"text: {len(text)} characters; at most {handoff.MAX_RCA_CHARS}")
        with self._lock:
            self._rca = text
        return (
            f"kept: a root-cause write-up of {len(text)} characters; it goes with the next "
            "submit (a Submission already made keeps the one it was made with)"
        )

    def status(self) -> dict[str, Any]:
        mine = self._mine()
        if not mine:
            return {"state": handoff.OPEN}
        return _submission_state(mine[-1])


# ----------------------------------------------------------------------- the tools
def _handed_off(inc: dict[str, Any]) -> None:
    """Refused unless the Incident's tools may be served now: from the hand-off on (a
    finished Incident's stay readable, its verdict included; `submit` refuses)."""
    meta = inc["metadata"]
    if not (inc.get("status") or {}).get("brief"):
        raise Refused(
            f"Incident {meta['namespace']}/{meta['name']} is not handed off yet: "
            "its alert has not fired"
        )


def _finished(inc: dict[str, Any] | None) -> str | None:
    """Why the Incident takes no more submissions (gone, finished, or its verdict that ends
    the run recorded while the baseline comes back), or None."""
    if inc is None:
        return "the Incident is gone"
    c = condition_of(inc, "Finished")
    if c is not None and c.status == "True":
        return f"the Incident is finished ({c.reason})"
    waiting = condition_of(inc, "AwaitingSubmission")
    if waiting is not None and waiting.reason == FINISHING:
        return f"the Incident is finished ({waiting.message})"
    return None


def _prepare_history(scenario: Any, repo_root: Path, into: Path) -> tuple[Path, Path]:
    """The workspace and its bare history, as a local hand-off makes them."""
    workspace, history = into / "workspace", into / "history.git"
    if history.is_dir():
        return workspace, history
    trees = into / "trees"
    shutil.rmtree(trees, ignore_errors=True)
    healthy, regressed = trees / "healthy", trees / "regressed"
    sources.scenario_trees(scenario, repo_root, healthy, regressed)
    shutil.rmtree(workspace, ignore_errors=True)
    handoff.scenario_workspace(scenario, healthy, regressed, workspace, history)
    shutil.rmtree(trees, ignore_errors=True)
    return workspace, history


@dataclass
class _Served:
    uid: str
    app: Any
    manager: Any
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Endpoints:
    """The ASGI app: routes `/incidents/<ns>/<name>/mcp` to that Incident's MCP server,
    once the caller is allowed (Authorizer) and the Incident is handed off."""

    def __init__(self, kube: Kube, cfg: OperatorConfig, root: Path) -> None:
        self.kube = kube
        self.cfg = cfg
        self.root = root
        self.auth = Authorizer(kube)
        self._served: dict[tuple[str, str], _Served] = {}
        self._making: dict[tuple[str, str], asyncio.Lock] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        m = PATH.fullmatch(scope["path"])
        if m is None:
            await _answer(send, 404, "the tools of an Incident are at /incidents/<ns>/<name>/mcp")
            return
        ns, name = m.groups()
        token = _bearer(scope)
        if token is None:
            await _answer(send, 401, "give the agent's token: Authorization: Bearer <token>")
            return
        try:
            ok, why = await asyncio.to_thread(self.auth.allowed, token, ns, name)
            inc = await asyncio.to_thread(self.kube.get_incident, ns, name) if ok else None
        except Exception as exc:  # the API server did not answer: nobody is let in
            log.warning("MCP %s/%s: cannot check the caller: %s", ns, name, exc)
            await _answer(send, 503, "the API server did not answer; try again")
            return
        if not ok:
            await _answer(send, 403, why)
            return
        try:
            if inc is None:
                raise Refused(f"no Incident {ns}/{name}")
            _handed_off(inc)
            served = await self._serve(ns, name, inc)
        except Refused as exc:
            await self._close(ns, name)
            await _answer(send, 409, str(exc))
            return
        inner = {**scope, "path": MOUNT, "raw_path": MOUNT.encode(), "root_path": ""}
        await served.app(inner, receive, send)

    async def _serve(self, ns: str, name: str, inc: dict[str, Any]) -> _Served:
        key = (ns, name)
        uid = inc["metadata"]["uid"]
        lock = self._making.setdefault(key, asyncio.Lock())
        async with lock:
            served = self._served.get(key)
            if served is not None and served.uid == uid:
                return served
            if served is not None:  # an Incident of the same name made anew
                await self._close(ns, name)
            record = self.root / uid / trajectory.FILE
            tools = await asyncio.to_thread(self._tools, inc, record)
            server = tool_server.build(tools, trajectory.Trajectory(record))
            app = server.streamable_http_app(streamable_http_path=MOUNT, host="0.0.0.0")
            served = _Served(uid=uid, app=app, manager=server.session_manager)
            started = asyncio.Event()

            async def run() -> None:
                async with served.manager.run():
                    started.set()
                    await served.done.wait()

            served.task = asyncio.create_task(run())
            await started.wait()
            self._served[key] = served
            log.info("MCP tools of Incident %s/%s served", ns, name)
            return served

    async def _close(self, ns: str, name: str) -> None:
        served = self._served.pop((ns, name), None)
        if served is None:
            return
        served.done.set()
        if served.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(served.task, 5)
        await asyncio.to_thread(shutil.rmtree, self.root / served.uid, True)

    def _tools(self, inc: dict[str, Any], record: Path) -> IncidentTools:
        """The Incident's tools (blocking: prepares its workspace on first use), in the
        directory of `record`, the trajectory file its server writes and its desk reads."""
        meta, st = inc["metadata"], inc.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        spec = IncidentSpec.model_validate(inc.get("spec") or {})
        scenario = self.cfg.scenario(spec.scenario)
        into = record.parent
        into.mkdir(parents=True, exist_ok=True)
        brief = into / "brief.md"
        brief.write_text(st["brief"], encoding="utf-8")
        try:
            workspace, history = _prepare_history(scenario, self.cfg.scenarios_dir.parent, into)
        except Exception as exc:  # the other tools still serve
            log.warning("MCP %s/%s: no deploy history: %s", ns, name, exc)
            workspace, history = into / "workspace", into / "history.git"
            workspace.mkdir(exist_ok=True)
        target_ns = spec.target_namespace or ns
        target = spec.target_deployment or scenario.service.name
        return IncidentTools(
            Incident(
                run_id=st.get("runId", ""),
                alert=st.get("alert", scenario.target_alert),
                service=scenario.service.name,
                brief=brief,
                workspace=workspace,
                prometheus_url=spec.prometheus_url or self.cfg.prometheus_url or "",
                history=history,
                desk=KubeDesk(self.kube, ns, name, record, _when(st.get("firedTime"))),
                log_files=lambda: self._logs(target_ns, target, scenario.service.name),
                # its own alerts, not another Incident's on the same Prometheus
                alert_scope=label_matchers(telemetry_scope(name, ns, target_ns)),
            )
        )

    def _logs(
        self, ns: str, deployment: str, service: str
    ) -> dict[str, list[tuple[str, LogSource]]]:
        """The service's pods (the target Deployment's), each read through the API."""
        dep = self.kube.find_deployment(ns, deployment)
        if dep is None:
            return {}
        selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        container = dep["spec"]["template"]["spec"]["containers"][0]["name"]
        out: list[tuple[str, LogSource]] = []
        for pod in self.kube.pods_of(ns, selector):
            pod_name = pod["metadata"]["name"]

            def read(pod_name: str = pod_name) -> list[str]:
                return self.kube.pod_log(ns, pod_name, container, LOG_TAIL_LINES)

            out.append((pod_name, read))
        return {service: out}

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for ns, name in list(self._served):
                    await self._close(ns, name)
                await send({"type": "lifespan.shutdown.complete"})
                return


def _when(stamp: str | None) -> float | None:
    """An RFC 3339 time of the Incident's status as Unix seconds (None when absent)."""
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None


def _bearer(scope: dict[str, Any]) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer" and token.strip():
                return str(token.strip())
    return None


async def _answer(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="sreforge-mcp"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve(kube: Kube, cfg: OperatorConfig, port: int, host: str = "0.0.0.0") -> uvicorn.Server:
    """Serve the endpoints on `port` in a daemon thread of the operator."""
    root = Path(tempfile.mkdtemp(prefix="sreforge-mcp-"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(
        uvicorn.Config(
            Endpoints(kube, cfg, root),
            log_level="warning",
            lifespan="on",
            access_log=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=3,
        )
    )
    threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name="sreforge-mcp", daemon=True
    ).start()
    log.info("MCP tools of handed-off Incidents on %s:%d%s", host, port, mcp_path("NS", "NAME"))
    return server
