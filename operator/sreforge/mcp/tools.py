"""The tools of one incident, as plain methods: what `sreforge mcp` serves.

`IncidentTools` reads the run's Prometheus (alerts, PromQL), the service's logs, the
deploy history (a harness-held copy of the workspace repository's history, so nothing an
agent writes into its `.git` runs here), the brief and the workspace; `submit` and
`submit_rca` hand text to the run's `SubmissionDesk`, which grades it exactly as a
`--fix`. Each method returns the text the agent sees or raises `Refused`; results are
bounded (`shape.cut`). It knows nothing of the run directory, the scenario's files, the
load or the verification settings: it is given only what the agent may see.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import requests

from sreforge.mcp import shape
from sreforge.mcp.shape import Refused

PROMETHEUS_TIMEOUT_SECONDS = 15.0
PROMETHEUS_QUERY_TIMEOUT_SECONDS = 10.0
MAX_RANGE_POINTS = 2000  # per series: a range query asking for more is refused
MAX_LOG_LINES = 500
MAX_FILE_CHARS = 60_000


# a log file, or (on Kubernetes) what reads a pod's log through the API, as lines
LogSource = Path | Callable[[], list[str]]


class SubmissionDesk(Protocol):
    """Where submissions go: the run that grades them (sreforge.runtime.local)."""

    def submit(self, patch: str | None) -> str:
        """Take a patch (None: the workspace's diff) for grading; raises Refused."""

    def submit_rca(self, text: str) -> str:
        """Keep a root-cause write-up beside the verdict."""

    def status(self) -> dict[str, Any]:
        """Where the submission stands: open, grading, graded (with the verdict)."""


@dataclass
class Incident:
    """What the agent of one incident may see, and where its submissions go."""

    run_id: str
    alert: str
    service: str
    brief: Path
    workspace: Path
    prometheus_url: str
    history: Path  # a bare copy of the workspace repository as handed off
    desk: SubmissionDesk
    # service name -> [(instance, its log file, or what reads its lines)] in start order
    log_files: Callable[[], Mapping[str, Sequence[tuple[str, LogSource]]]] = field(default=dict)
    handed_off_at: float = field(default_factory=time.time)
    # PromQL label matchers of this incident's alerts on a shared Prometheus (Kubernetes:
    # `incident="x",namespace=~"a|b"`); "" when the Prometheus is the run's own
    alert_scope: str = ""


class IncidentTools:
    """The incident's tools; every answer is text for the agent."""

    def __init__(self, incident: Incident) -> None:
        self.incident = incident
        self._http = requests.Session()

    # ----- the hand-off ----------------------------------------------------------------
    def brief(self) -> str:
        inc = self.incident
        text = inc.brief.read_text(encoding="utf-8", errors="replace")
        services = ", ".join(sorted(inc.log_files())) or inc.service
        return shape.cut(
            f"{text.rstrip()}\n\n---\nfiring alert: {inc.alert}\nservice: {inc.service}\n"
            f"services with logs: {services}\n"
            "workspace: the deployed source (a git repository: see deploy_history)\n"
        )

    # ----- Prometheus ------------------------------------------------------------------
    def _prometheus(self, path: str, params: dict[str, str]) -> Any:
        if not self.incident.prometheus_url:
            raise Refused("Prometheus is not running for this incident")
        url = self.incident.prometheus_url.rstrip("/") + path
        # Prometheus gives up on a query after this, so an agent's heavy query cannot hold
        # the Prometheus the oracle reads from
        params = {**params, "timeout": f"{PROMETHEUS_QUERY_TIMEOUT_SECONDS:g}s"}
        try:
            resp = self._http.get(url, params=params, timeout=PROMETHEUS_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            raise Refused(f"Prometheus did not answer: {exc.__class__.__name__}") from exc
        try:
            body = resp.json()
        except ValueError as exc:
            raise Refused(f"Prometheus answered {resp.status_code} without JSON") from exc
        if body.get("status") != "success":
            kind = body.get("errorType", "error")
            raise Refused(f"query: Prometheus refused it ({kind}): {body.get('error', '?')}")
        return body.get("data")

    def promql_query(self, query: str, time_: str | None = None) -> str:
        if not query or not query.strip():
            raise Refused("query: give a PromQL expression")
        params = {"query": query}
        at = shape.parse_time(time_, now=time.time(), field="time")
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._prometheus("/api/v1/query", params)
        return shape.cut(json.dumps(data, sort_keys=True))

    def promql_range(self, query: str, start: str, end: str, step: str) -> str:
        if not query or not query.strip():
            raise Refused("query: give a PromQL expression")
        now = time.time()
        t0 = shape.parse_time(start, now=now, field="start")
        t1 = shape.parse_time(end, now=now, field="end") or now
        if t0 is None:
            raise Refused("start: give a start time (Unix seconds, RFC 3339, or like -15m)")
        seconds = _duration(step, field="step")
        if t1 <= t0:
            raise Refused("start: must be before end")
        if (t1 - t0) / seconds > MAX_RANGE_POINTS:
            raise Refused(
                f"step: {(t1 - t0) / seconds:.0f} points per series; at most "
                f"{MAX_RANGE_POINTS}: widen the step or narrow the range"
            )
        data = self._prometheus(
            "/api/v1/query_range",
            {"query": query, "start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{seconds:g}"},
        )
        return shape.cut(json.dumps(data, sort_keys=True))

    def alerts(self, history_minutes: int = 30) -> str:
        if not 1 <= history_minutes <= 24 * 60:
            raise Refused("history_minutes: between 1 and 1440")
        now = time.time()
        scope = f"{{{self.incident.alert_scope}}}" if self.incident.alert_scope else ""
        current = self._prometheus("/api/v1/query", {"query": f"ALERTS{scope}"})
        since = self._prometheus("/api/v1/query", {"query": f"ALERTS_FOR_STATE{scope}"})
        active_since = {_key(s["metric"]): float(s["value"][1]) for s in since.get("result", [])}
        out: dict[str, Any] = {"now": shape.iso(now), "firing": [], "pending": []}
        for s in current.get("result", []):
            labels = dict(s["metric"])
            state = labels.pop("alertstate", "?")
            labels.pop("__name__", None)
            name = labels.pop("alertname", "?")
            item: dict[str, Any] = {"alert": name, "labels": labels}
            began = active_since.get(_key({**labels, "alertname": name}))
            if began is not None:
                item["activeSince"] = shape.iso(began)
            out.setdefault(state, []).append(item)
        step = 5.0
        history = self._prometheus(
            "/api/v1/query_range",
            {
                "query": f"ALERTS{scope}",
                "start": f"{now - history_minutes * 60:.3f}",
                "end": f"{now:.3f}",
                "step": f"{step:g}",
            },
        )
        out["history"] = shape.alert_episodes(history.get("result", []), step)
        return shape.cut(json.dumps(out, indent=1, sort_keys=True))

    # ----- logs ------------------------------------------------------------------------
    def service_logs(
        self,
        service: str,
        *,
        since: str | None = "-15m",
        until: str | None = None,
        level: str | None = None,
        contains: str | None = None,
        max_lines: int = 200,
    ) -> str:
        sources = self.incident.log_files()
        if service not in sources:
            known = ", ".join(sorted(sources)) or "none yet"
            raise Refused(f"service: no service {service!r} here; services: {known}")
        if not 1 <= max_lines <= MAX_LOG_LINES:
            raise Refused(f"max_lines: between 1 and {MAX_LOG_LINES}")
        now = time.time()
        t0 = shape.parse_time(since, now=now, field="since")
        t1 = shape.parse_time(until, now=now, field="until")
        lines: list[shape.LogLine] = []
        for instance, source in sources[service]:
            raw = _read_tail(source) if isinstance(source, Path) else source()
            lines.extend(shape.parse_log(raw, instance))
        picked = shape.filter_logs(lines, since=t0, until=t1, min_level=level, contains=contains)
        shown, left_out = shape.cut_lines([x.render() for x in picked], max_lines)
        head = f"{len(picked)} line(s) matched"
        if left_out:
            head += f"; [cut: the oldest {left_out} left out, the newest {len(shown)} shown]"
        return shape.cut(head + "\n" + "\n".join(shown))

    # ----- deploy history --------------------------------------------------------------
    def _git(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat"}
        )
        done = subprocess.run(
            [
                "git",
                "--no-pager",
                f"--git-dir={self.incident.history}",
                "-c",
                "core.hooksPath=/dev/null",
                *args,
            ],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            check=False,
            env=env,
        )
        if done.returncode != 0:
            raise Refused(f"git: {done.stderr.strip().splitlines()[-1] if done.stderr else '?'}")
        return done.stdout

    def deploy_history(self, max_count: int = 20) -> str:
        if not 1 <= max_count <= 200:
            raise Refused("max_count: between 1 and 200")
        return shape.cut(
            self._git(
                "log",
                f"--max-count={max_count}",
                "--format=commit %H%nAuthor: %an <%ae>%nDate:   %aI%n%n%w(0,4,4)%B",
                "--stat",
                "HEAD",
            )
        )

    def deploy_show(self, commit: str, path: str | None = None) -> str:
        rev = shape.revision(commit)
        args = ["show", "--no-ext-diff", "--no-textconv", "--format=fuller", rev, "--"]
        if path:
            args.append(shape.workspace_relative(path))
        return shape.cut(self._git(*args))

    # ----- the workspace (read-only) ---------------------------------------------------
    def _inside(self, raw: str) -> Path:
        rel = shape.workspace_relative(raw)
        root = self.incident.workspace.resolve()
        target = (root / rel).resolve()
        if target != root and not target.is_relative_to(root):
            raise Refused(f"path: {raw!r} leads outside the workspace")
        return target

    def workspace_list(self, path: str = ".") -> str:
        target = self._inside(path)
        if not target.is_dir():
            raise Refused(f"path: {path!r} is not a directory of the workspace")
        root = self.incident.workspace.resolve()
        names = []
        for p in sorted(target.rglob("*")):
            rel = p.relative_to(root)
            if rel.parts[0] == ".git" or "__pycache__" in rel.parts:
                continue
            names.append(f"{rel}/" if p.is_dir() else str(rel))
        return shape.cut("\n".join(names) or "(empty)")

    def workspace_read(self, path: str) -> str:
        target = self._inside(path)
        if not target.is_file():
            raise Refused(f"path: {path!r} is not a file of the workspace")
        data = target.read_bytes()[: MAX_FILE_CHARS * 4]
        if b"\x00" in data[:8192]:
            raise Refused(f"path: {path!r} is binary")
        return shape.cut(data.decode("utf-8", errors="replace"), MAX_FILE_CHARS)

    # ----- submissions -----------------------------------------------------------------
    def submit(self, patch: str | None = None) -> str:
        return self.incident.desk.submit(patch if patch and patch.strip() else None)

    def submit_rca(self, text: str) -> str:
        if not text or not text.strip():
            raise Refused("text: the root-cause write-up is empty")
        return self.incident.desk.submit_rca(text)

    def submission_status(self) -> str:
        return json.dumps(self.incident.desk.status(), indent=1, sort_keys=True)


def _key(labels: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted((k, str(v)) for k, v in labels.items() if k not in ("__name__", "alertstate"))
    )


def _duration(raw: str, *, field: str) -> float:
    text = str(raw).strip()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError as exc:
        raise Refused(f"{field}: {raw!r} is not a duration (like 15s, 1m)") from exc
    if value <= 0:
        raise Refused(f"{field}: must be positive")
    return value


def _read_tail(path: Path, limit: int = 4 * 1024 * 1024) -> list[str]:
    """The last `limit` bytes of a log file as lines (a log can be large)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > limit else lines
