"""report.html and `sreforge runs` summarise an agent's trajectory; the verdict never reads it.

A real graded run's files (tests/fixtures/runs/restore-simplecache) made an agent's run by
giving it a trajectory.jsonl of tool calls."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

from sreforge import leaderboard, report
from sreforge.api.record import RunRecord
from sreforge.mcp import trajectory

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "restore-simplecache"


def _agent_run(tmp_path: Path) -> tuple[Path, RunRecord]:
    run = tmp_path / "runs" / "agent-run"
    shutil.copytree(RUN, run)
    raw = json.loads((run / "record.json").read_text())
    raw["runId"] = "agent-run"
    raw["submission"] |= {"kind": "agent", "submittedVia": "mcp", "trajectory": trajectory.FILE}
    (run / "record.json").write_text(json.dumps(raw))
    record = RunRecord.model_validate(raw)
    assert record.timestamps.handed_off is not None
    t0 = record.timestamps.handed_off.timestamp()
    log = trajectory.Trajectory(run / trajectory.FILE)
    for dt, tool, args, error in (
        (2.0, "alerts", {"history_minutes": 30}, False),
        (4.5, "promql_query", {"query": "rate(http_requests_total[1m])"}, False),
        (6.0, "workspace_read", {"path": "../record.json"}, True),
        (9.0, "deploy_show", {"commit": "HEAD"}, False),
        (30.25, "submit", {"patch": None}, False),
    ):
        log.append(trajectory.entry(t0 + dt, tool, args, f"result of {tool}", error=error))
    return run, record


def test_the_report_shows_what_the_agent_looked_at_and_when_it_submitted(
    tmp_path: Path,
) -> None:
    run, record = _agent_run(tmp_path)
    _png, html = report.write_report(run)
    page = html.read_text()
    assert "Agent's tool calls (not graded)" in page
    assert "promql_query: rate(http_requests_total[1m])" in page
    assert re.search(r"submitted after hand-off \(s\)</th><td>30\.[23]", page)
    assert page.count("<td>refused</td>") == 1
    # the verdict is the record's own: the same score and reason as without a trajectory
    plain = report.render_html(record, None)
    assert "Agent's tool calls" not in plain
    assert f"reason <b>{record.reason.value}</b>" in page
    assert f"reason <b>{record.reason.value}</b>" in plain


def test_the_leaderboard_counts_the_calls_and_the_seconds_to_submit(tmp_path: Path) -> None:
    run, record = _agent_run(tmp_path)
    (row,) = leaderboard.collect(run.parent)
    assert row.toolCalls == 5
    assert row.submittedAfterSeconds in (30.2, 30.3)
    assert row.passed == record.passed
    table = leaderboard.format_table([row], leaderboard.summary([row]))
    assert "CALLS" in table.splitlines()[0]
    assert datetime.fromisoformat(row.started or "") == record.timestamps.started
