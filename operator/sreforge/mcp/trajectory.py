"""The run's trajectory.jsonl: every tool call the agent made, and a summary of it.

One JSON object a line: `t` (Unix seconds), `tool`, `arguments` (long strings shortened,
with their length and digest), `resultChars`, `resultSha256`, `error` (true when the tool
refused or failed). It records what the agent looked at; none of it enters the verdict.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

FILE = "trajectory.jsonl"
MAX_ARGUMENT_CHARS = 2000  # a longer string argument (a patch) is kept as head + digest


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_ARGUMENT_CHARS:
        return {
            "head": value[:MAX_ARGUMENT_CHARS],
            "chars": len(value),
            "sha256": digest(value),
        }
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    return value


def entry(
    t: float, tool: str, arguments: dict[str, Any], result: str, *, error: bool
) -> dict[str, Any]:
    """One line of the trajectory."""
    return {
        "t": round(t, 3),
        "tool": tool,
        "arguments": _shorten(arguments),
        "resultChars": len(result),
        "resultSha256": digest(result),
        "error": error,
    }


class Trajectory:
    """Appends tool calls to `path`, one line each, from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, sort_keys=True, default=str) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(text)


def read(path: Path) -> list[dict[str, Any]]:
    """The trajectory's calls (a garbled line is skipped), or [] when there is none."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    calls = []
    for line in lines:
        try:
            call = json.loads(line)
        except ValueError:
            continue
        if isinstance(call, dict) and isinstance(call.get("tool"), str):
            calls.append(call)
    return calls


def summarise(calls: list[dict[str, Any]], handed_off: float | None = None) -> dict[str, Any]:
    """What the agent looked at and when it submitted, from its calls."""
    if not calls:
        return {"calls": 0}
    tools = Counter(c["tool"] for c in calls)
    times = [float(c.get("t", 0.0)) for c in calls]
    submits = [c for c in calls if c["tool"] == "submit" and not c.get("error")]
    start = handed_off if handed_off is not None else min(times)
    looked = sorted(
        {
            _looked_at(c)
            for c in calls
            if c["tool"] not in ("submit", "submit_rca") and _looked_at(c)
        }
    )
    return {
        "calls": len(calls),
        "errors": sum(1 for c in calls if c.get("error")),
        "byTool": dict(sorted(tools.items())),
        "firstCallAfterSeconds": round(min(times) - start, 1),
        "lastCallAfterSeconds": round(max(times) - start, 1),
        "submittedAfterSeconds": round(float(submits[0]["t"]) - start, 1) if submits else None,
        "resultChars": sum(int(c.get("resultChars", 0)) for c in calls),
        "lookedAt": looked[:40],
    }


def _looked_at(call: dict[str, Any]) -> str:
    """A short name for what one call looked at: the tool and its main argument."""
    args = call.get("arguments") or {}
    for key in ("query", "service", "commit", "path"):
        value = args.get(key) if isinstance(args, dict) else None
        if isinstance(value, str) and value:
            return f"{call['tool']}: {value[:80]}"
    return str(call["tool"])
