"""`sreforge runs [--runs-dir DIR] [--json]`: every recorded run, and a per-scenario summary.

One row per run directory whose record.json loads as a `RunRecord`. Ungraded runs (`Inconclusive`,
a harness fault, and `AlertNeverFired`, where nothing was ever handed off) are listed but
counted apart: DESIGN.md leaves them out of scores, so they are excluded from the pass rate
and the mean score.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sreforge.api.record import RunRecord
from sreforge.api.verdict import Reason
from sreforge.mcp import trajectory

UNGRADED_REASONS = frozenset({Reason.INCONCLUSIVE.value, Reason.ALERT_NEVER_FIRED.value})
INTERPRETERS = re.compile(r"python[0-9.]*|pypy[0-9.]*|sh|bash|node|env|uv|uvx")


@dataclass(frozen=True)
class RunRow:
    scenario: str
    runId: str
    label: str  # the fix or agent: basename of submission.source
    passed: bool
    score: float
    reason: str
    timeToClearSeconds: float | None
    durationSeconds: float | None
    started: str | None
    campaign: str | None = None  # the campaign (or None) whose warm session graded the run
    # the agent's MCP tool calls (trajectory.jsonl): how many, and when it submitted after
    # the hand-off; never part of the verdict
    toolCalls: int | None = None
    submittedAfterSeconds: float | None = None

    @property
    def graded(self) -> bool:
        return self.reason not in UNGRADED_REASONS


@dataclass(frozen=True)
class ScenarioSummary:
    scenario: str
    runs: int
    graded: int
    passed: int
    ungraded: int  # Inconclusive / AlertNeverFired: not in pass rate nor mean score
    passRate: float | None
    meanScore: float | None


def _label(source: str | None) -> str:
    """Basename of submission.source: a patch path, or for an agent command the basename of
    its first word that is not an interpreter or an option ("python agents/a.py -x" -> a.py)."""
    if not source:
        return "-"
    text = source.strip()
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    for word in words:
        name = Path(word.rstrip("/")).name
        if name and not word.startswith("-") and not INTERPRETERS.fullmatch(name):
            return name
    return Path(text).name or "-"


def _row(record: RunRecord, run_dir: Path | None = None) -> RunRow:
    started = record.timestamps.started
    session = record.session
    calls: dict[str, Any] = {}
    if run_dir is not None and record.submission.trajectory:
        handed = record.timestamps.handed_off
        calls = trajectory.summarise(
            trajectory.read(run_dir / record.submission.trajectory),
            None if handed is None else handed.timestamp(),
        )
    return RunRow(
        scenario=record.scenario.name,
        runId=record.run_id,
        label=session.label if session is not None else _label(record.submission.source),
        passed=record.passed,
        score=record.score,
        reason=record.reason.value,
        timeToClearSeconds=record.time_to_clear_seconds,
        durationSeconds=record.wall_time_seconds.get("total"),
        started=None if started is None else started.isoformat(),
        campaign=None if session is None else session.campaign,
        toolCalls=calls.get("calls"),
        submittedAfterSeconds=calls.get("submittedAfterSeconds"),
    )


# What else a runs directory holds: a warm session's environments, a campaign's summary.
NOT_RUNS = ("session.json", "campaign.json")


def collect_with_skipped(runs_dir: Path) -> tuple[list[RunRow], list[Path]]:
    """All readable runs under runs_dir (by start time), and the run dirs that were skipped
    (no record.json yet, unreadable, or not a run record)."""
    rows: list[RunRow] = []
    skipped: list[Path] = []
    if not Path(runs_dir).is_dir():
        return rows, skipped
    for d in sorted(p for p in Path(runs_dir).iterdir() if p.is_dir()):
        if any((d / name).exists() for name in NOT_RUNS):
            continue
        try:
            record = RunRecord.model_validate_json((d / "record.json").read_bytes())
            rows.append(_row(record, d))
        except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
            skipped.append(d)
    # grouped by campaign (single runs first), in start order within each group
    rows.sort(key=lambda r: (r.campaign or "", r.started or "", r.runId))
    return rows, skipped


def collect(runs_dir: Path) -> list[RunRow]:
    """All readable runs under runs_dir; unreadable dirs are skipped (see collect_with_skipped)."""
    return collect_with_skipped(runs_dir)[0]


def summary(rows: list[RunRow]) -> list[ScenarioSummary]:
    """Per scenario (sorted by name): runs, passed, pass rate and mean score over graded runs."""
    out = []
    for name in sorted({r.scenario for r in rows}):
        mine = [r for r in rows if r.scenario == name]
        graded = [r for r in mine if r.graded]
        passed = sum(r.passed for r in graded)
        out.append(
            ScenarioSummary(
                scenario=name,
                runs=len(mine),
                graded=len(graded),
                passed=passed,
                ungraded=len(mine) - len(graded),
                passRate=passed / len(graded) if graded else None,
                meanScore=sum(r.score for r in graded) / len(graded) if graded else None,
            )
        )
    return out


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(rows: list[RunRow], sums: list[ScenarioSummary], skipped: int = 0) -> str:
    lines = [
        f"{'SCENARIO':<26} {'RUN':<46} {'FIX/AGENT':<30} {'VERDICT':<7} {'SCORE':>6} "
        f"{'REASON':<16} {'TTC(s)':>7} {'DUR(s)':>7} {'CALLS':>5} {'SUBMIT(s)':>9}  STARTED"
    ]
    grouped = any(r.campaign for r in rows)  # headers only where there are campaigns
    group: object = ()
    for r in rows:
        if grouped and r.campaign != group:
            lines.append(f"-- campaign {r.campaign}" if r.campaign else "-- single runs")
        group = r.campaign
        verdict = "PASS" if r.passed else ("FAIL" if r.graded else "n/a")
        lines.append(
            f"{r.scenario:<26} {r.runId:<46} {r.label:<30} {verdict:<7} {r.score:>6.3f} "
            f"{r.reason:<16} {_num(r.timeToClearSeconds, '.1f'):>7} "
            f"{_num(r.durationSeconds, '.1f'):>7} {_num(r.toolCalls, 'd'):>5} "
            f"{_num(r.submittedAfterSeconds, '.1f'):>9}  {r.started or '-'}"
        )
    lines += [
        "",
        f"{'SCENARIO':<26} {'RUNS':>5} {'GRADED':>6} {'PASSED':>6} {'PASS RATE':>9} "
        f"{'MEAN SCORE':>10} {'UNGRADED':>8}",
    ]
    for s in sums:
        rate = "-" if s.passRate is None else f"{s.passRate:.0%}"
        lines.append(
            f"{s.scenario:<26} {s.runs:>5} {s.graded:>6} {s.passed:>6} {rate:>9} "
            f"{_num(s.meanScore, '.3f'):>10} {s.ungraded:>8}"
        )
    lines.append(
        f"\n{len(rows)} runs"
        + (f", {skipped} unreadable run dirs skipped" if skipped else "")
        + " (ungraded = Inconclusive/AlertNeverFired: not in pass rate or mean score)"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default: runs")
    parser.add_argument("--json", action="store_true", help="one JSON object: runs, scenarios")


def cli(args: argparse.Namespace) -> int:
    runs_dir: Path = args.runs_dir
    if not runs_dir.is_dir():
        print(f"error: {runs_dir}: no such directory", file=sys.stderr)
        return 2
    rows, skipped = collect_with_skipped(runs_dir)
    sums = summary(rows)
    if args.json:
        print(
            json.dumps(
                {
                    "runs": [asdict(r) | {"graded": r.graded} for r in rows],
                    "scenarios": [asdict(s) for s in sums],
                    "skipped": len(skipped),
                },
                indent=2,
            )
        )
    else:
        print(format_table(rows, sums, len(skipped)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sreforge runs", description=__doc__)
    add_arguments(parser)
    return cli(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
