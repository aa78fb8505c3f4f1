"""The hand-off desk of one case: where an MCP `submit` lands, and what it may see of grading.

A local case's hand-off (sreforge.runtime.local) waits on the desk: an agent's `submit`
(the workspace's diff, or a patch it gives) becomes the case's submission, graded on the
same path as `--fix`. The desk takes one submission; a second is refused with the reason,
and `status` tells the agent where its submission stands (the verdict once recorded).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sreforge.mcp.shape import Refused, iso

MAX_RCA_CHARS = 64 * 1024
OPEN, GRADING, GRADED = "open", "grading", "graded"


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
