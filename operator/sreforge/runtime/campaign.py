"""`sreforge campaign`: submitters x trials on warm sessions, one per scenario.

The cases of a scenario run trial by trial (every submitter's first trial, then every
second one, ...), so whatever drifts in an environment falls on all submitters alike.
campaign.json (api/campaign.py) holds every trial and the per scenario x submitter
pass@1, pass^k and 95% interval.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sreforge.api.campaign import Campaign, Trial, summarise
from sreforge.api.scenario import Scenario
from sreforge.catalogue import EMPTY  # `--fix empty`: the catalogue's label of the empty patch
from sreforge.runtime.local import CaseSpec, RunOptions
from sreforge.runtime.session import run_session


@dataclass(frozen=True)
class Submitter:
    """Who is graded: a patch, or an agent command. A patch inside a scenario's directory
    belongs to that scenario alone; any other is offered to every scenario."""

    label: str
    fix: Path | None = None
    agent: str | None = None
    scenario: str | None = None

    def applies_to(self, scenario: Scenario) -> bool:
        return self.scenario is None or self.scenario == scenario.name


def patch_submitter(arg: str, scenarios: list[Scenario], scratch: Path) -> Submitter:
    """A `--fix` argument: a patch file, or `empty`. Raises ValueError naming the file."""
    if arg == EMPTY:
        scratch.mkdir(parents=True, exist_ok=True)
        empty = scratch / "empty.patch"
        empty.write_text("", encoding="utf-8")
        return Submitter(EMPTY, fix=empty)
    path = Path(arg).resolve()
    if not path.is_file():
        raise ValueError(f"--fix {arg}: no such file")
    for s in scenarios:
        if path.is_relative_to(s.directory.resolve()):
            return Submitter(
                str(path.relative_to(s.directory.resolve())), fix=path, scenario=s.name
            )
    return Submitter(arg, fix=path)


def new_campaign_id() -> str:
    stamp = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"campaign-{stamp}-{secrets.token_hex(2)}"


def run_campaign(
    scenarios: list[Scenario],
    submitters: list[Submitter],
    trials: int,
    options: RunOptions,
    repo_root: Path,
    *,
    campaign_id: str | None = None,
    on_session: Callable[[Campaign], None] | None = None,
) -> Campaign:
    """Grade every submitter `trials` times on each scenario it applies to; writes
    RUNS_DIR/<campaign id>/campaign.json after each scenario and returns the campaign."""
    cid = campaign_id or new_campaign_id()
    out_dir = options.runs_dir / cid
    out_dir.mkdir(parents=True, exist_ok=True)
    campaign = Campaign(
        campaign_id=cid, trials=trials, started=datetime.now(tz=UTC).isoformat(timespec="seconds")
    )
    for scenario in scenarios:
        mine = [s for s in submitters if s.applies_to(scenario)]
        if not mine:
            continue
        cases = [
            CaseSpec(
                sub.label,
                fix=sub.fix,
                agent=sub.agent,
                rca=options.rca,
                agent_model=options.agent_model,
                trial=t,
            )
            for t in range(1, trials + 1)
            for sub in mine
        ]
        result = run_session(scenario, repo_root, options, cases, campaign=cid)
        campaign.sessions.append(result.id)
        for i, case in enumerate(cases):
            record = result.record_of(i)
            graded = record is not None and record.graded  # not Inconclusive/NeverFired
            campaign.results.append(
                Trial(
                    scenario=scenario.name,
                    submitter=case.label,
                    trial=case.trial,
                    run_id=record.run_id if record else None,
                    passed=record.passed if record is not None and graded else None,
                    reason=record.reason.value if record else "NotRun",
                    score=record.score if record else None,
                )
            )
        campaign.summary = summarise(campaign.results, trials)
        write(out_dir / "campaign.json", campaign)
        if on_session is not None:
            on_session(campaign)
    campaign.finished = datetime.now(tz=UTC).isoformat(timespec="seconds")
    write(out_dir / "campaign.json", campaign)
    return campaign


def write(path: Path, campaign: Campaign) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(campaign.model_dump(mode="json", by_alias=True), indent=2), encoding="utf-8"
    )
    tmp.replace(path)


def table(campaign: Campaign) -> str:
    """The summary as printed by `sreforge campaign`."""
    lines = [
        f"{'SCENARIO':<30} {'SUBMITTER':<40} {'TRIALS':>6} {'PASSED':>6} "
        f"{'PASS@1':>6} {'PASS^K':>9} {'95% INTERVAL':>14} {'INCONCL':>7}"
    ]
    for s in campaign.summary:
        p1 = "-" if s.pass_at_1 is None else f"{s.pass_at_1:.2f}"
        pk = "-" if s.pass_hat_k is None else f"{s.pass_hat_k:.2f} k={s.k}"
        ci = "-" if s.interval95 is None else f"[{s.interval95[0]:.2f}, {s.interval95[1]:.2f}]"
        lines.append(
            f"{s.scenario:<30} {s.submitter[:40]:<40} {s.trials:>6} {s.passed:>6} "
            f"{p1:>6} {pk:>9} {ci:>14} {s.inconclusive:>7}"
        )
    return "\n".join(lines)
