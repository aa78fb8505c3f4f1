"""Pure helpers of the tool server: bounded results, safe paths, log lines, alert history.

Nothing here reads a file or the network, so unit tests reach every rule directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from sreforge.errors import SreforgeError

# A tool's whole answer never exceeds this many characters; the cut says so.
MAX_RESULT_CHARS = 20_000
CUT_MARKER = "\n[cut: {shown} of {total} characters shown; narrow the request to see the rest]"


class Refused(SreforgeError, ValueError):
    """A tool call the server will not do; the message names the argument and why."""


def cut(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text`, or its first part with an explicit marker when it is longer than `limit`."""
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(shown=limit, total=len(text))
    return text[: max(0, limit - len(marker))] + marker


def cut_lines(lines: Sequence[str], max_lines: int) -> tuple[list[str], int]:
    """The last `max_lines` of `lines` (the newest matter most) and how many were left out."""
    if len(lines) <= max_lines:
        return list(lines), 0
    return list(lines[len(lines) - max_lines :]), len(lines) - max_lines


def workspace_relative(raw: str, *, field: str = "path") -> str:
    """A path inside the workspace, as given relative to it; refuses anything that leaves it
    (absolute, `..`, a drive, NUL) or names the repository's own metadata."""
    if not isinstance(raw, str) or not raw.strip():
        raise Refused(f"{field}: give a path relative to the workspace")
    if "\x00" in raw or "\\" in raw:
        raise Refused(f"{field}: {raw!r} holds a character a path here may not hold")
    path = PurePosixPath(raw.strip())
    if path.is_absolute():
        raise Refused(f"{field}: {raw!r} is absolute; paths are relative to the workspace")
    if ".." in path.parts:
        raise Refused(f"{field}: {raw!r} leaves the workspace ('..' is refused)")
    if path.parts and path.parts[0] == ".git":
        raise Refused(f"{field}: {raw!r} is the repository's metadata; use deploy_history")
    text = str(path)
    return "" if text == "." else text


_REVISION = re.compile(r"(?:[0-9a-fA-F]{4,40}|HEAD)(?:~[0-9]{1,3}|\^{1,3})?")


def revision(raw: str, *, field: str = "commit") -> str:
    """A commit name git may be given: a hex id, HEAD, HEAD~N or HEAD^ (never an option)."""
    text = raw.strip() if isinstance(raw, str) else ""
    if not _REVISION.fullmatch(text):
        raise Refused(f"{field}: {raw!r} is not a commit id (hex, HEAD, HEAD~N or HEAD^)")
    return text


def parse_time(raw: str | float | None, *, now: float, field: str) -> float | None:
    """A moment as a Unix time: seconds, RFC 3339, or relative (`-15m`, `-2h`, `-30s`, now)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, int | float):
        return float(raw)
    text = raw.strip()
    if text == "now":
        return now
    rel = re.fullmatch(r"-?([0-9]+(?:\.[0-9]+)?)([smh])", text)
    if rel:
        factor = {"s": 1, "m": 60, "h": 3600}[rel.group(2)]
        return now - float(rel.group(1)) * factor
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise Refused(
            f"{field}: {raw!r} is not a time (Unix seconds, RFC 3339, or relative like -15m)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# ----- logs ------------------------------------------------------------------------------
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)")
_JSON_TS = re.compile(r'"ts":\s*"([^"]+)"')
_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")


@dataclass(frozen=True)
class LogLine:
    """One line of a service's log, with when it was written and its level (if it says)."""

    t: float | None
    level: str | None
    source: str  # which instance of the service wrote it
    text: str

    def render(self) -> str:
        return f"{self.source} | {self.text}"


def line_time(text: str) -> float | None:
    """The time a log line carries: a leading `2026-12-03 17:49:10,123` stamp or JSON `ts`."""
    m = _STAMP.match(text)
    raw = m.group(1).replace(",", ".") if m else None
    if raw is None:
        j = _JSON_TS.search(text[:200])
        raw = j.group(1) if j else None
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the substrates log in UTC
    return moment.timestamp()


def line_level(text: str) -> str | None:
    m = _LEVEL.search(text[:120])
    if m is None:
        return None
    level = m.group(1)
    return {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(level, level)


def parse_log(lines: Iterable[str], source: str) -> list[LogLine]:
    """A log's lines, each with a time and level; a line without its own (a traceback's)
    takes the line before's, so it stays with the record it belongs to."""
    out: list[LogLine] = []
    last_t: float | None = None
    last_level: str | None = None
    for raw in lines:
        text = raw.rstrip("\n")
        if not text:
            continue
        t = line_time(text)
        if t is not None:
            last_t, last_level = t, line_level(text)
        out.append(LogLine(last_t, last_level if t is None else line_level(text), source, text))
    return out


def filter_logs(
    lines: Iterable[LogLine],
    *,
    since: float | None,
    until: float | None,
    min_level: str | None,
    contains: str | None,
) -> list[LogLine]:
    """The lines in [since, until] at `min_level` or above that contain `contains`."""
    if min_level is not None:
        min_level = min_level.upper()
        if min_level == "WARN":
            min_level = "WARNING"
        if min_level not in LEVELS:
            raise Refused(f"level: {min_level!r} is not one of {', '.join(LEVELS)}")
    floor = LEVELS.index(min_level) if min_level else None
    needle = contains.lower() if contains else None
    out = []
    for line in lines:
        if since is not None and (line.t is None or line.t < since):
            continue
        if until is not None and (line.t is None or line.t > until):
            continue
        if floor is not None and (line.level is None or LEVELS.index(line.level) < floor):
            continue
        if needle is not None and needle not in line.text.lower():
            continue
        out.append(line)
    return sorted(out, key=lambda x: x.t or 0.0)  # stable: a record's lines stay together


# ----- alerts ----------------------------------------------------------------------------
def alert_episodes(matrix: Sequence[dict[str, Any]], step: float) -> list[dict[str, Any]]:
    """Episodes of each alert from an `ALERTS` range query: name, state, labels, from, to.

    Consecutive samples (no gap longer than two steps) of one series are one episode."""
    episodes: list[dict[str, Any]] = []
    for series in matrix:
        metric = dict(series.get("metric", {}))
        name = metric.pop("alertname", "?")
        state = metric.pop("alertstate", "?")
        metric.pop("__name__", None)
        times = sorted(float(t) for t, _v in series.get("values", []))
        start = prev = None
        for t in times:
            if start is None:
                start = prev = t
                continue
            assert prev is not None
            if t - prev > 2 * step:
                episodes.append(_episode(name, state, metric, start, prev))
                start = t
            prev = t
        if start is not None and prev is not None:
            episodes.append(_episode(name, state, metric, start, prev))
    return sorted(episodes, key=lambda e: (e["from"], e["alert"]))


def _episode(
    name: str, state: str, labels: dict[str, Any], start: float, end: float
) -> dict[str, Any]:
    return {
        "alert": name,
        "state": state,
        "labels": labels,
        "from": _iso(start),
        "to": _iso(end),
        "seconds": round(end - start, 1),
    }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso(t: float) -> str:
    """A Unix time as RFC 3339 UTC, to the second."""
    return _iso(t)
