"""`sreforge runs`: the leaderboard over run directories holding a real run's record.json
(tests/fixtures/runs/restore-simplecache) with the fields a row shows replaced."""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sreforge import leaderboard

ROOT = Path(__file__).resolve().parents[2]
REAL_RUN = ROOT / "tests" / "fixtures" / "runs" / "restore-simplecache"
REAL_RECORD = json.loads((REAL_RUN / "record.json").read_text(encoding="utf-8"))


def _record(
    scenario: str,
    run_id: str,
    *,
    passed: bool,
    score: float,
    reason: str,
    source: str = "scenarios/x/fixes/some-fix.patch",
    started: str = "2026-12-02T18:00:00+00:00",
    ttc: float | None = None,
    total: float | None = 60.0,
) -> dict[str, Any]:
    record: dict[str, Any] = copy.deepcopy(REAL_RECORD)
    record.update(runId=run_id, passed=passed, score=score, reason=reason, timeToClearSeconds=ttc)
    record["scenario"]["name"] = scenario
    record["submission"]["source"] = source
    record["timestamps"]["started"] = started
    del record["wallTimeSeconds"]["total"]
    if total is not None:
        record["wallTimeSeconds"]["total"] = total
    return record


def _at(second: int) -> str:
    return f"2026-12-02T18:00:{second:02d}+00:00"


def _write(runs: Path, record: dict[str, Any]) -> None:
    d = runs / record["runId"]
    d.mkdir(parents=True)
    (d / "record.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    a, b = "alpha-scenario", "beta-scenario"
    for rec in [
        _record(a, "a1", passed=True, score=0.98, reason="Passed", ttc=12.5, started=_at(1)),
        _record(a, "a2", passed=False, score=0.35, reason="NotCleared", started=_at(2)),
        _record(a, "a3", passed=True, score=0.90, reason="Passed", ttc=30.0, started=_at(3)),
        _record(a, "a4", passed=False, score=0.0, reason="Inconclusive", started=_at(4)),
        _record(
            b,
            "b1",
            passed=False,
            score=0.0,
            reason="CIRed",
            source="/tmp/decoys/break-tests.patch",
            started=_at(5),
            total=None,
        ),
        _record(
            b, "b2", passed=False, score=0.0, reason="AlertNeverFired", source="", started=_at(6)
        ),
        _record(
            b,
            "b3",
            passed=True,
            score=0.96,
            reason="Passed",
            source="python agents/my_agent.py --fast",
            started=_at(7),
        ),
    ]:
        _write(runs, rec)
    (runs / "corrupt").mkdir()
    (runs / "corrupt" / "record.json").write_text('{"runId": "trunc', encoding="utf-8")
    (runs / "in-progress").mkdir()  # no record.json yet
    (runs / "wrong-shape").mkdir()
    (runs / "wrong-shape" / "record.json").write_text("[1, 2]", encoding="utf-8")
    (runs / "not-a-record").mkdir()  # valid JSON, but not a run record (no verdict, ...)
    not_a_record = {"runId": "n1", "scenario": {"name": "x"}, "passed": True, "score": 1.0}
    (runs / "not-a-record" / "record.json").write_text(json.dumps(not_a_record), encoding="utf-8")
    (runs / "stray-file.txt").write_text("not a run dir", encoding="utf-8")
    return runs


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    leaderboard.add_arguments(parser)
    code = leaderboard.cli(parser.parse_args(list(argv)))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_collect_reads_rows_and_skips_unreadable(runs_dir: Path) -> None:
    rows, skipped = leaderboard.collect_with_skipped(runs_dir)
    assert [r.runId for r in rows] == ["a1", "a2", "a3", "a4", "b1", "b2", "b3"]
    assert sorted(p.name for p in skipped) == [
        "corrupt",
        "in-progress",
        "not-a-record",
        "wrong-shape",
    ]
    assert leaderboard.collect(runs_dir) == rows
    by_id = {r.runId: r for r in rows}
    assert by_id["a1"].label == "some-fix.patch"
    assert by_id["a1"].timeToClearSeconds == 12.5
    assert by_id["a1"].durationSeconds == 60.0
    assert by_id["b1"].label == "break-tests.patch"
    assert by_id["b1"].durationSeconds is None
    assert by_id["b2"].label == "-"
    assert by_id["b3"].label == "my_agent.py"
    assert not by_id["a4"].graded
    assert not by_id["b2"].graded


def test_summary_excludes_ungraded_from_pass_rate_and_mean(runs_dir: Path) -> None:
    sums = {s.scenario: s for s in leaderboard.summary(leaderboard.collect(runs_dir))}
    a, b = sums["alpha-scenario"], sums["beta-scenario"]
    assert (a.runs, a.graded, a.passed, a.ungraded) == (4, 3, 2, 1)
    assert a.passRate == pytest.approx(2 / 3)
    assert a.meanScore == pytest.approx((0.98 + 0.35 + 0.90) / 3)
    assert (b.runs, b.graded, b.passed, b.ungraded) == (3, 2, 1, 1)
    assert b.passRate == pytest.approx(0.5)
    assert b.meanScore == pytest.approx(0.48)


def test_summary_of_only_ungraded_runs_has_no_rate() -> None:
    row = leaderboard.RunRow("s", "r", "-", False, 0.0, "Inconclusive", None, None, None)
    (s,) = leaderboard.summary([row])
    assert (s.runs, s.graded, s.ungraded, s.passRate, s.meanScore) == (1, 0, 1, None, None)


def test_cli_text_table(runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--runs-dir", str(runs_dir))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["SCENARIO", "RUN", "FIX/AGENT", "VERDICT"]
    a1 = next(line for line in lines if " a1 " in line)
    assert "some-fix.patch" in a1
    assert "PASS" in a1
    assert "12.5" in a1
    assert "n/a" in next(line for line in lines if " a4 " in line)  # Inconclusive: ungraded
    alpha = next(line for line in lines if line.startswith("alpha-scenario") and "%" in line)
    assert alpha.split() == ["alpha-scenario", "4", "3", "2", "67%", "0.743", "1"]
    beta = next(line for line in lines if line.startswith("beta-scenario") and "%" in line)
    assert beta.split() == ["beta-scenario", "3", "2", "1", "50%", "0.480", "1"]
    assert "4 unreadable run dirs skipped" in out


def test_cli_json(runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--runs-dir", str(runs_dir), "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"runs", "scenarios"}
    assert data["skipped"] == 4
    assert len(data["runs"]) == 7
    first = data["runs"][0]
    assert first["runId"] == "a1"
    assert first["label"] == "some-fix.patch"
    assert first["passed"] is True
    assert first["reason"] == "Passed"
    rates = {s["scenario"]: s["passRate"] for s in data["scenarios"]}
    assert rates == {"alpha-scenario": pytest.approx(2 / 3), "beta-scenario": 0.5}
    alpha = next(s for s in data["scenarios"] if s["scenario"] == "alpha-scenario")
    assert (alpha["runs"], alpha["passed"], alpha["ungraded"]) == (4, 2, 1)


def test_cli_empty_and_missing_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--runs-dir", str(tmp_path), "--json")
    assert code == 0
    assert json.loads(out) == {"runs": [], "scenarios": [], "skipped": 0}
    code, _, err = _cli(capsys, "--runs-dir", str(tmp_path / "nope"))
    assert code == 2
    assert "no such directory" in err


def test_a_real_run_directory_is_a_row(tmp_path: Path) -> None:
    shutil.copytree(REAL_RUN, tmp_path / REAL_RECORD["runId"])
    (row,) = leaderboard.collect(tmp_path)
    assert row == leaderboard.RunRow(
        scenario="latency-cache-stampede",
        runId=REAL_RECORD["runId"],
        label="restore-simplecache.patch",
        passed=True,
        score=0.9588,
        reason="Passed",
        timeToClearSeconds=24.714,
        durationSeconds=126.053,
        started="2026-12-03T11:47:59.035036+00:00",
    )
    assert row.graded


def test_runs_are_grouped_by_campaign_and_session_folders_are_not_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    single = _record("alpha", "s1", passed=True, score=0.97, reason="Passed", started=_at(9))
    _write(runs, single)
    for i, (label, passed) in enumerate([("fixes/a.patch", True), ("empty", False)]):
        rec = _record(
            "alpha",
            f"c{i}",
            passed=passed,
            score=0.97 if passed else 0.35,
            reason="Passed" if passed else "NotCleared",
            started=_at(1),
        )
        rec["session"] = {
            "id": "alpha-session",
            "campaign": "campaign-1",
            "label": label,
            "case": i + 1,
            "cases": 2,
            "environment": 1,
        }
        _write(runs, rec)
    (runs / "alpha-session").mkdir()  # the session's environments: not a run
    (runs / "alpha-session" / "session.json").write_text("{}", encoding="utf-8")
    (runs / "campaign-1").mkdir()
    (runs / "campaign-1" / "campaign.json").write_text("{}", encoding="utf-8")
    rows, skipped = leaderboard.collect_with_skipped(runs)
    assert skipped == []
    assert [(r.runId, r.campaign, r.label) for r in rows] == [
        ("s1", None, "some-fix.patch"),
        ("c0", "campaign-1", "fixes/a.patch"),  # a case is shown by its session label
        ("c1", "campaign-1", "empty"),
    ]
    table = leaderboard.format_table(rows, leaderboard.summary(rows))
    lines = table.splitlines()
    assert lines.index("-- single runs") < lines.index("-- campaign campaign-1")
