"""The hand-off of one case: the workspace, the agent's process, and the submission desk.

The workspace is the regressed tree as a repository (sreforge.runtime.workspace), its
history also copied where only the harness reads it. An agent runs (sandboxed unless told)
until it exits or submits. A local case's hand-off (sreforge.runtime.local) waits on the
desk: an agent's `submit` (the workspace's diff, or a patch it gives) becomes the case's
submission, graded on the same path as `--fix`. The desk takes one submission; a second is
refused with the reason, and `status` tells the agent where its submission stands (the
verdict once recorded).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from sreforge.api.scenario import Scenario
from sreforge.mcp.shape import Refused, iso
from sreforge.runtime import sandbox, workspace

MAX_RCA_CHARS = 64 * 1024
# After an agent's submit through MCP: how long it may go on (a write-up) before it is ended.
AGENT_GRACE_SECONDS = 30.0
KEPT_LOG_BYTES = 4 * 1024 * 1024
OPEN, GRADING, GRADED = "open", "grading", "graded"
# In the case's handoff/ folder (the run directory: never in an agent's view), mode 0600:
# the tool server's URL, for `sreforge mcp RUN_DIR`.
URL_FILE = "mcp-url"


class Desk:
    """One case's submission desk (`sreforge.mcp.tools.SubmissionDesk`), thread-safe."""

    def __init__(self, workspace_diff: Callable[[], str], rca_path: Path) -> None:
        self._diff = workspace_diff
        self._rca = rca_path
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self.state = OPEN
        self.patch: str | None = None
        self.submitted_at: float | None = None
        self.via_mcp = False
        self.verdict: dict[str, Any] | None = None

    # ----- the agent's side (MCP tools) ------------------------------------------------
    def submit(self, patch: str | None) -> str:
        with self._lock:
            if self.state == GRADING:
                raise Refused(
                    f"a submission is being graded (submitted {iso(self.submitted_at or 0)}); "
                    "one submission per incident: follow it with submission_status"
                )
            if self.state == GRADED:
                raise Refused(
                    "this incident's submission was already graded: see submission_status"
                )
            text = patch if patch is not None else self._diff()
            if not text.strip():
                raise Refused(
                    "patch: nothing to submit (no patch given and the workspace is unchanged)"
                )
            self.patch, self.submitted_at, self.via_mcp = text, time.time(), True
            self.state = GRADING
            self._arrived.set()
        lines = text.count("\n")
        return (
            f"accepted: a patch of {lines} line(s) goes through CI and is rolled out under "
            "live traffic now; submission_status shows where it stands"
        )

    def submit_rca(self, text: str) -> str:
        if len(text) > MAX_RCA_CHARS:
            raise Refused(f"text: {len(text)} characters; at most {MAX_RCA_CHARS}")
        with self._lock:
            if self.state == GRADED:
                raise Refused("this incident was already graded: the write-up is closed")
            self._rca.write_text(text, encoding="utf-8")
        return f"kept: a root-cause write-up of {len(text)} characters"

    def status(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"state": self.state}
            if self.submitted_at is not None:
                out["submittedAt"] = iso(self.submitted_at)
            if self.verdict is not None:
                out["verdict"] = self.verdict
            return out

    # ----- the harness's side ----------------------------------------------------------
    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a submission; True once one arrived."""
        return self._arrived.wait(timeout)

    def close(self) -> None:
        """No more submissions: the hand-off ended without one through MCP."""
        with self._lock:
            if self.state == OPEN:
                self.state = GRADING
                self.submitted_at = time.time()

    def graded(self, reason: str, passed: bool, score: float, message: str) -> None:
        with self._lock:
            self.state = GRADED
            self.verdict = {
                "reason": reason,
                "passed": passed,
                "score": round(score, 3),
                "message": message,
            }


def write_url(path: Path, url: str) -> None:
    """Keep the URL (it holds the run's secret) readable by this user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(url + "\n")


def read_url(run_dir: Path) -> str:
    """The tool server URL of the run (or warm-session case) in `run_dir`."""
    path = run_dir / "handoff" / URL_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(
            f"{run_dir}: no MCP server was started there (no {path.relative_to(run_dir)}); "
            "a run serves one from its hand-off to an agent or --mcp on"
        ) from exc


def client_config(url: str, name: str = "sreforge") -> dict[str, Any]:
    """An MCP client configuration for a run's URL: streamable HTTP (Claude Code's
    `.mcp.json`, and any client that speaks it) and the stdio bridge for the others."""
    return {
        "mcpServers": {
            name: {"type": "http", "url": url},
            f"{name}-stdio": {"command": "sreforge", "args": ["mcp", "--connect", url]},
        }
    }


def client_config_text(url: str, workspace: Path, run_id: str) -> str:
    """What `sreforge run --mcp` prints on stdout for an agent started by hand."""
    config = json.dumps(client_config(url), indent=2)
    return (
        f"MCP server of run {run_id}: {url}\n"
        f"workspace: {workspace}\n"
        "Point an MCP client at the URL, fix the workspace, then call the `submit` tool.\n"
        "Claude Code: save this as .mcp.json (or `claude mcp add --transport http sreforge "
        f"{url}`); Codex CLI: `codex mcp add sreforge -- sreforge mcp --connect {url}`.\n"
        f"{config}\n"
    )


def prepare_workspace(
    healthy: Path,
    regressed: Path,
    dest: Path,
    history: Path,
    *,
    service: str,
    regression_patch: str,
    commits: Sequence[workspace.Commit] = (),
) -> dict[str, str]:
    """`dest` becomes the regressed tree as a repository with its deploy history, and
    `history` a bare copy of it, the one the tool server reads: nothing an agent writes in
    its workspace's .git (hooks, fsmonitor, a pager) ever runs in the harness."""
    revisions = workspace.prepare(
        healthy,
        regressed,
        dest,
        service=service,
        regression_patch=regression_patch,
        history=commits,
    )
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--no-hardlinks", str(dest), str(history)],
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return revisions


def scenario_workspace(
    scenario: Scenario, healthy: Path, regressed: Path, dest: Path, history: Path
) -> dict[str, str]:
    """prepare_workspace for `scenario`: its service's name, its regression as the newest
    deploy and its declared history before it."""
    return prepare_workspace(
        healthy,
        regressed,
        dest,
        history,
        service=scenario.service.name,
        regression_patch=scenario.regression_path.read_text("utf-8"),
        commits=workspace.history_of(scenario),
    )


def log_files(
    logs: Path, scenario: Scenario, revisions: dict[str, str], *, own_patched: str
) -> dict[str, list[tuple[str, Path]]]:
    """The logs a case's agent may read, by service, each instance named like a pod after
    its commit: the service's builds (another case's patched build left out), its upstreams',
    Redis's. Never the harness's own (load generator, prober, Prometheus)."""
    svc = scenario.service.name
    builds: list[tuple[str, Path]] = []
    for path in sorted(logs.glob(f"{svc}-*.log")):
        label = path.stem.removeprefix(f"{svc}-")
        if label.startswith("patched"):
            if label != own_patched:
                continue
            rev = "candidate"
        elif label == "healthy":
            rev = revisions.get("baseline", "previous")
        else:
            rev = revisions.get("release", "current")
        suffix = label.rsplit("-", 1)[1] if "-" in label else "0"
        builds.append((f"{svc}-{rev}-{suffix}", path))
    out: dict[str, list[tuple[str, Path]]] = {svc: builds}
    for up in scenario.service.upstreams:
        path = logs / f"upstream-{up.name}.log"
        if path.exists():
            out[up.name] = [(f"{up.name}-0", path)]
    if (logs / "redis.log").exists():
        out["redis"] = [("redis-0", logs / "redis.log")]
    return out


def keep_logs(sources: dict[str, list[tuple[str, Path]]], dest: Path, *, since: float) -> None:
    """Copy into `dest` the tail of each log the case could see (the environment's own
    logs/ keeps them whole): at most KEPT_LOG_BYTES each, only those written since `since`."""
    dest.mkdir(parents=True, exist_ok=True)
    for instances in sources.values():
        for instance, path in instances:
            try:
                if path.stat().st_mtime < since:
                    continue
                with path.open("rb") as f:
                    f.seek(max(0, path.stat().st_size - KEPT_LOG_BYTES))
                    data = f.read()
            except OSError:
                continue
            (dest / f"{instance}.log").write_bytes(data)


def run_agent(
    argv: list[str],
    workspace_dir: Path,
    brief: Path,
    desk: Desk,
    *,
    extra_env: dict[str, str],
    log: Path,
    timeout: float,
    shares: list[Path] | None,
    say: Callable[[str], None],
) -> Literal["exit", "mcp", "timeout"]:
    """Run the agent (in its sandbox unless `shares` is None) until it exits, its workspace
    then being the submission, or submits through MCP, after which it has
    AGENT_GRACE_SECONDS (a write-up) before it is ended. Returns how the submission came."""
    confined = shares is not None
    say(
        f"running the agent: {argv[0]} (timeout {timeout:.0f}s, "
        + (
            "sandboxed: it sees the OS, /workspace, /handoff/brief.md"
            if confined
            else "UNSANDBOXED: it can read everything this user can"
        )
        + ")"
    )
    via: Literal["exit", "mcp", "timeout"] = "exit"
    with contextlib.ExitStack() as stack:
        if shares is not None:
            box = stack.enter_context(sandbox.Sandbox(workspace_dir, brief, shares))
            argv, env = box.argv(argv), box.env(dict(os.environ), extra_env)
        else:
            env = {**os.environ, **extra_env}
        out = stack.enter_context(log.open("ab"))
        proc = subprocess.Popen(
            argv,
            cwd=workspace_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if desk.wait(0.2):
                say("the agent submitted through MCP")
                end_process(proc, AGENT_GRACE_SECONDS)
                break
            if time.monotonic() > deadline:
                say("agent timed out: grading what it left in the workspace")
                via = "timeout"
                end_process(proc, 0)
                break
    return "mcp" if desk.via_mcp else via


def end_process(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Let `proc` exit within `grace` seconds, then terminate it, then kill it (by PID)."""
    try:
        proc.wait(grace)
        return
    except subprocess.TimeoutExpired:
        pass
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
