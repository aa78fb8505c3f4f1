"""The tool server's pure rules: bounded results, paths that stay in the workspace, commit
names git is given, times, log lines, alert episodes, the trajectory and its summary, the
submission desk, the generated client config, and the workspace's deploy history."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import types

from sreforge.mcp import shape, trajectory
from sreforge.mcp.agent import Budget, Workspace, openai_tools
from sreforge.mcp.shape import Refused
from sreforge.runtime import handoff, workspace

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"


def test_a_long_result_is_cut_and_says_so() -> None:
    text = "x" * 50_000
    out = shape.cut(text, 1000)
    assert len(out) == 1000
    assert "[cut: 1000 of 50000 characters shown" in out
    assert shape.cut("short", 1000) == "short"


def test_the_newest_log_lines_are_kept() -> None:
    shown, left = shape.cut_lines([str(i) for i in range(10)], 3)
    assert (shown, left) == (["7", "8", "9"], 7)


@pytest.mark.parametrize(
    "raw",
    ["../x", "a/../../b", "/etc/passwd", ".git/config", "a\x00b", "..", "", "a\\..\\b"],
)
def test_a_path_leaving_the_workspace_is_refused(raw: str) -> None:
    with pytest.raises(Refused, match="path"):
        shape.workspace_relative(raw)


def test_a_path_inside_the_workspace_is_kept() -> None:
    assert shape.workspace_relative("catalog/app.py") == "catalog/app.py"
    assert shape.workspace_relative("./catalog") == "catalog"
    assert shape.workspace_relative(".") == ""


@pytest.mark.parametrize("raw", ["--output=/tmp/x", "HEAD; rm", "main", "HEAD~1000", "-p", ""])
def test_only_plain_commit_names_reach_git(raw: str) -> None:
    with pytest.raises(Refused, match="commit"):
        shape.revision(raw)


@pytest.mark.parametrize("raw", ["HEAD", "HEAD~1", "HEAD^", "1a2b3c4", "a" * 40])
def test_commit_names_git_may_get(raw: str) -> None:
    assert shape.revision(raw) == raw


def test_times_absolute_relative_and_bad() -> None:
    now = 1_800_000_000.0
    assert shape.parse_time("-15m", now=now, field="since") == now - 900
    assert shape.parse_time("now", now=now, field="until") == now
    assert shape.parse_time("1700000000", now=now, field="since") == 1_700_000_000.0
    assert (
        shape.parse_time("2026-12-03T17:00:00Z", now=now, field="t")
        == datetime(2026, 12, 3, 17, tzinfo=UTC).timestamp()
    )
    assert shape.parse_time(None, now=now, field="t") is None
    with pytest.raises(Refused, match="since: 'yesterday'"):
        shape.parse_time("yesterday", now=now, field="since")


LOG = """\
2026-12-03 17:00:00,100 INFO catalog: serving /data/catalog.db on http://127.0.0.1:1
2026-12-03 17:00:05,000 INFO catalog.access: 127.0.0.1 "GET /products/3 HTTP/1.1" 200 31.0ms "x"
2026-12-03 17:00:06,000 ERROR aiohttp.server: Error handling request
Traceback (most recent call last):
  File "app.py", line 1, in get_product
RuntimeError: boom
2026-12-03 17:00:09,000 WARNING catalog.access: 127.0.0.1 "GET /products/4 HTTP/1.1" 503 2.0ms "x"
"""


def test_log_lines_keep_their_record_and_filter_by_time_level_and_text() -> None:
    lines = shape.parse_log(LOG.splitlines(), "catalog-abc-1")
    assert len(lines) == 7
    assert lines[5].text == "RuntimeError: boom"
    assert lines[5].level == "ERROR"
    t0 = datetime(2026, 12, 3, 17, 0, 5, tzinfo=UTC).timestamp()
    errors = shape.filter_logs(lines, since=t0, until=None, min_level="warning", contains=None)
    assert next(x.text.split(" ")[0] for x in errors) == "2026-12-03"
    assert len(errors) == 5  # the error, its traceback, the 503
    boom = shape.filter_logs(lines, since=None, until=None, min_level=None, contains="BOOM")
    assert [x.text for x in boom] == ["RuntimeError: boom"]
    assert lines[0].render().startswith("catalog-abc-1 | 2026-12-03")
    with pytest.raises(Refused, match="level: 'LOUD'"):
        shape.filter_logs(lines, since=None, until=None, min_level="loud", contains=None)


def test_json_access_lines_carry_their_time() -> None:
    line = '{"duration_ms": 3.1, "event": "http_request", "ts": "2026-12-03T17:00:05.000+00:00"}'
    assert shape.line_time(line) == datetime(2026, 12, 3, 17, 0, 5, tzinfo=UTC).timestamp()


def test_alert_episodes_split_on_gaps() -> None:
    matrix = [
        {
            "metric": {"__name__": "ALERTS", "alertname": "A", "alertstate": "firing", "x": "1"},
            "values": [[100, "1"], [105, "1"], [110, "1"], [200, "1"], [205, "1"]],
        }
    ]
    episodes = shape.alert_episodes(matrix, 5.0)
    assert [(e["alert"], e["state"], e["seconds"]) for e in episodes] == [
        ("A", "firing", 10.0),
        ("A", "firing", 5.0),
    ]
    assert episodes[0]["labels"] == {"x": "1"}


def test_the_trajectory_keeps_a_digest_not_a_whole_patch(tmp_path: Path) -> None:
    record = trajectory.Trajectory(tmp_path / trajectory.FILE)
    patch = "+" * 10_000
    record.append(trajectory.entry(100.0, "promql_query", {"query": "up"}, "[]", error=False))
    record.append(trajectory.entry(105.0, "workspace_read", {"path": "../x"}, "no", error=True))
    record.append(trajectory.entry(130.0, "submit", {"patch": patch}, "accepted", error=False))
    calls = trajectory.read(tmp_path / trajectory.FILE)
    assert [c["tool"] for c in calls] == ["promql_query", "workspace_read", "submit"]
    kept = calls[2]["arguments"]["patch"]
    assert kept["chars"] == 10_000
    assert len(kept["head"]) == trajectory.MAX_ARGUMENT_CHARS
    assert calls[0]["resultSha256"] == trajectory.digest("[]")
    summary = trajectory.summarise(calls, handed_off=90.0)
    assert summary["calls"] == 3
    assert summary["errors"] == 1
    assert summary["submittedAfterSeconds"] == 40.0
    assert summary["firstCallAfterSeconds"] == 10.0
    assert "promql_query: up" in summary["lookedAt"]
    assert trajectory.summarise([]) == {"calls": 0}


def test_the_desk_takes_one_submission_and_refuses_a_second_with_the_reason(
    tmp_path: Path,
) -> None:
    desk = handoff.Desk(lambda: "", tmp_path / "rca.txt")
    with pytest.raises(Refused, match="nothing to submit"):
        desk.submit(None)  # the workspace is unchanged
    assert desk.status() == {"state": "open"}
    assert desk.submit("diff --git a/x b/x\n").startswith("accepted")
    assert desk.wait(0)
    assert desk.via_mcp
    with pytest.raises(Refused, match="is being graded"):
        desk.submit("diff --git a/y b/y\n")
    assert desk.submit_rca("the cache went away").startswith("kept")
    assert (tmp_path / "rca.txt").read_text() == "the cache went away"
    desk.graded("Passed", passed=True, score=0.97, message="cleared")
    assert desk.status()["verdict"]["reason"] == "Passed"
    with pytest.raises(Refused, match="already graded"):
        desk.submit("diff --git a/z b/z\n")


def test_the_client_config_names_the_url_for_http_and_stdio() -> None:
    url = "http://127.0.0.1:5/abc/mcp"
    config = handoff.client_config(url)["mcpServers"]
    assert config["sreforge"] == {"type": "http", "url": url}
    assert config["sreforge-stdio"]["args"] == ["mcp", "--connect", url]
    text = handoff.client_config_text(url, Path("/w"), "run-1")
    start = text.index("{")
    assert json.loads(text[start:])["mcpServers"]["sreforge"]["url"] == url


def test_the_commit_message_is_the_patch_header_without_expectations() -> None:
    patch = "# fix: a thing\n#\n# because.\n#\n# expect: NotCleared\n\ndiff --git a/x b/x\n"
    assert workspace.commit_message(patch, "svc") == "fix: a thing\n\nbecause.\n"
    assert workspace.commit_message("diff --git a/x b/x\n", "svc") == "svc: update\n"


def test_the_workspace_is_a_repository_with_the_release_on_top_of_the_baseline(
    tmp_path: Path,
) -> None:
    healthy, regressed = tmp_path / "healthy", tmp_path / "regressed"
    for tree, body in ((healthy, "cache = True\n"), (regressed, "cache = False\n")):
        (tree / "svc").mkdir(parents=True)
        (tree / "svc" / "app.py").write_text(body)
    (healthy / "svc" / "old.py").write_text("gone\n")
    patch = (SCENARIO / "history" / "01-drop-cache-layer.patch").read_text()
    ws = tmp_path / "ws"
    revs = workspace.prepare(healthy, regressed, ws, service="catalog", regression_patch=patch)
    log = subprocess.run(
        ["git", "log", "--format=%h %an|%s"], cwd=ws, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert log == [
        f"{revs['release']} Jonas Weber|refactor: drop the cache layer, the DB is fast enough",
        f"{revs['baseline']} Priya Raman|release: catalog as deployed last week",
    ]
    assert (ws / "svc" / "app.py").read_text() == "cache = False\n"
    assert not (ws / "svc" / "old.py").exists()
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    # the message says what its author said, not the root cause's words
    assert "stampede" not in "\n".join(log).lower()


def test_the_agent_edits_only_its_workspace(tmp_path: Path) -> None:
    edits = Workspace(tmp_path)
    assert edits.write_file("svc/app.py", "x = 1\n").startswith("wrote")
    assert edits.read_file("svc/app.py") == "x = 1\n"
    for bad in ("../escape.py", "/etc/passwd", ".git/hooks/pre-commit"):
        with pytest.raises(Refused):
            edits.write_file(bad, "boom")
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(Refused, match="outside the workspace"):
        edits.read_file("link/passwd")
    with pytest.raises(Refused, match="patch"):
        edits.apply_patch("diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n")


def test_a_budget_is_spent_by_steps_or_tokens() -> None:
    assert Budget(max_steps=2, max_tokens=100).spent() is None
    assert "step budget" in str(Budget(max_steps=2, max_tokens=100, steps=2).spent())
    assert "token budget" in str(Budget(max_steps=9, max_tokens=100, tokens=100).spent())


def test_mcp_tools_become_function_tools() -> None:
    tool = types.Tool(
        name="promql_query",
        description="a query",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}},
    )
    (spec,) = openai_tools([tool])
    assert spec["function"]["name"] == "promql_query"
    assert spec["function"]["parameters"]["properties"]["query"] == {"type": "string"}
