"""Warm sessions: many cases graded against one injected environment of a scenario.

Setting an environment up (Prometheus, the healthy build, the load, the quiet check, the
injection and the first fire) costs more than most cases. A session pays it once: each
case is handed off, graded under the same load and restored, and the next waits until
the alert fires again on the restored baseline (the loop's `cases`). A harness fault
ends an environment; the session starts a new one for the cases left, and their records
say so (`session.environment`, `session.restartedBecause`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sreforge.api.record import RunRecord
from sreforge.api.scenario import Scenario
from sreforge.runtime.local import CaseSpec, LocalRun, RunOptions, SessionContext, new_run_id


@dataclass
class Environment:
    """One environment of a session: the cases it graded and how it ended."""

    number: int
    directory: str
    first_case: int
    graded: int = 0
    began: float = 0.0
    ended: float = 0.0
    setup_seconds: float | None = None
    fault: str | None = None


@dataclass
class SessionResult:
    id: str
    scenario: str
    directory: Path
    cases: list[CaseSpec]
    records: list[RunRecord] = field(default_factory=list)  # one per case, in case order
    environments: list[Environment] = field(default_factory=list)
    began: float = 0.0
    ended: float = 0.0

    def record_of(self, index: int) -> RunRecord | None:
        """The record of case `index` (from 0), or None if the session never graded it."""
        return self.records[index] if index < len(self.records) else None

    def to_json(self) -> dict[str, Any]:
        """session.json: what ran where, and when."""
        return {
            "schema": "sreforge.session.v1",
            "id": self.id,
            "scenario": self.scenario,
            "began": self.began,
            "ended": self.ended,
            "seconds": round(self.ended - self.began, 3),
            "environments": [dataclasses.asdict(e) for e in self.environments],
            "cases": [
                {
                    "case": i + 1,
                    "label": c.label,
                    "trial": c.trial,
                    "runId": r.run_id if r else None,
                    "reason": r.reason.value if r else None,
                    "passed": r.passed if r else None,
                }
                for i, c in enumerate(self.cases)
                for r in [self.record_of(i)]
            ],
        }


def run_session(
    scenario: Scenario,
    repo_root: Path,
    options: RunOptions,
    cases: list[CaseSpec],
    campaign: str | None = None,
) -> SessionResult:
    """Grade `cases` in order on warm environments of `scenario`; returns every record.

    The control window (`options.control_seconds`) runs in the first environment only.
    KeyboardInterrupt propagates after the case in progress was recorded Inconclusive.
    """
    sid = new_run_id(scenario.name)
    result = SessionResult(
        sid, scenario.name, (options.runs_dir / sid).resolve(), cases, began=time.time()
    )
    result.directory.mkdir(parents=True)
    reason: str | None = None
    try:
        while len(result.records) < len(cases):
            number = len(result.environments) + 1
            first = len(result.records) + 1
            ctx = SessionContext(
                id=sid,
                environment=number,
                campaign=campaign,
                first_case=first,
                cases=len(cases),
                restarted_because=reason,
            )
            opts = options if number == 1 else dataclasses.replace(options, control_seconds=0)
            env_opts = dataclasses.replace(opts, runs_dir=result.directory)
            env = Environment(number, f"env{number}", first, began=time.time())
            result.environments.append(env)
            if reason is not None:
                options.progress(f"session {sid}: a new environment for case {first}: {reason}")
            run = LocalRun(
                scenario,
                repo_root,
                env_opts,
                cases[first - 1 :],
                session=ctx,
                case_root=options.runs_dir,
            )
            try:
                run.execute()
            finally:
                env.ended = time.time()
                env.graded = len(run.records)
                env.setup_seconds = run.env_wall.get("setup")
                env.fault = run.state.fault
                result.records.extend(run.records)
            last = run.records[-1] if run.records else None
            reason = run.state.fault or (
                f"{last.reason.value}: {last.message}"
                if last is not None
                else "the environment ended before its last case"
            )
    finally:
        result.ended = time.time()
        (result.directory / "session.json").write_text(
            json.dumps(result.to_json(), indent=2), encoding="utf-8"
        )
    return result
