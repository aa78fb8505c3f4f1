"""The run record: what one graded run leaves behind in record.json, as one typed model.

`RunRecord.build` makes it once from the loop's `RunState` (which holds the verdict) and
the few plain values only the runtime knows; the report, the leaderboard, the judge and the
command line read it back through `RunRecord.model_validate_json`. Pure: no I/O.

On the wire the record's own keys are camelCase; the documents it embeds keep their own
names (`verify`, `weights`, `verdict`, `timeline` and the load generator's `/stats` are
snake_case, as their models dump them). Version 1 only grows by optional keys: a record
written before `schemaName`/`schemaVersion` existed loads as version 1, and a reader
ignores keys it does not know. `python -m sreforge.api.record` prints the JSON Schema
published as schemas/run-record.v1.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from sreforge import oracle
from sreforge.api.observation import AlertSample, CIResult, CIStatus
from sreforge.api.scenario import Scenario, SoakBound, VerifySpec, Weights
from sreforge.api.verdict import Reason, SignalName, Verdict

if TYPE_CHECKING:
    from sreforge.loop import RunState

RECORD_SCHEMA: Final = "sreforge.record.v1"  # the key every record has carried since the first
SCHEMA_NAME: Final = "sreforge.record"
SCHEMA_VERSION: Final = 1
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _isoformat(t: datetime) -> str:
    return t.isoformat()


#: A moment of the run: an ISO-8601 string with its UTC offset on the wire.
Timestamp = Annotated[AwareDatetime, PlainSerializer(_isoformat, return_type=str, when_used="json")]


def _moment(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=UTC)


class _Part(BaseModel):
    """A part of the record: camelCase on the wire, tolerant of keys a newer writer added."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class ScenarioRecord(_Part):
    """Which scenario ran; `path` is its directory (the judge reads its root_cause.md)."""

    name: str
    path: str = Field(description="the scenario's directory on the machine that ran it")
    title: str
    target_alert: str

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> ScenarioRecord:
        return cls(
            name=scenario.name,
            path=str(scenario.directory),
            title=scenario.title,
            target_alert=scenario.target_alert,
        )


class SubmissionRecord(_Part):
    """What was graded: a fix patch or an agent's edits, and where its files are.

    `patch` and `rca` name files in the run directory; `sandboxed` is None for a fix.
    """

    kind: Literal["fix", "agent", "mcp"]  # mcp: an agent started by hand (`run --mcp`)
    source: str | None = None
    # how it arrived: the fix file, the agent's exit (its workspace), its `submit` tool
    # call, or the hand-off's timeout (the workspace as it was left)
    submitted_via: Literal["fix", "exit", "mcp", "timeout"] | None = None
    trajectory: str | None = Field(
        default=None, description="file name in the run directory: the agent's tool calls"
    )
    patch: str | None = Field(default=None, description="file name in the run directory")
    rca: str | None = Field(default=None, description="file name in the run directory")
    agent_model: str | None = None
    sandboxed: bool | None = None
    files_changed: list[str] = Field(default_factory=list)


class SignalRecord(_Part):
    """One oracle signal of the verdict, keyed by its name in `signals`."""

    value: bool | float | None
    credit: float = Field(ge=0, le=1)
    weight: float = Field(ge=0, le=1)
    detail: str = ""


class RecordedVerify(VerifySpec):
    """The oracle's settings of the run. On the wire the weights stand beside it (the
    record's `weights`); in the model it is the whole VerifySpec, so a verdict can be
    recomputed from the record."""

    weights: SkipJsonSchema[Weights] = Field(default_factory=Weights, exclude=True)
    # a record from before the soak existed had none (a new record always states its own)
    soak_seconds: tuple[SoakBound, SoakBound] = (0.0, 0.0)


class Timestamps(_Part):
    """When each step of the loop happened; None where the run never got there."""

    started: Timestamp | None = None
    injected: Timestamp | None = None
    fired: Timestamp | None = None
    handed_off: Timestamp | None = None
    submitted: Timestamp | None = None
    ci_finished: Timestamp | None = None
    redeployed: Timestamp | None = None
    cleared: Timestamp | None = None
    recorded: Timestamp | None = None


class CIRecord(_Part):
    """The CI gate's outcome (the files it saw changed are the submission's)."""

    status: CIStatus
    reason: str = ""
    output_tail: str = ""
    duration_seconds: float = 0.0


class LoadRecord(_Part):
    """The load as the run delivered it. `generator` is the load generator's own
    `GET /stats` answer at the end of the run; the `verify...` figures are over the
    verification window. A figure that was not measured is left out, not null."""

    target_rate: int
    generator: dict[str, Any] | None = None
    verify_achieved_rate_mean: float | None = None
    verify_dropped_ratio_max: float | None = None
    # the independent prober's share of good answers over the verification
    verify_probe_success_min: float | None = None
    verify_probe_success_mean: float | None = None

    @model_serializer(mode="wrap")
    def _leave_out_unmeasured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items() if value is not None}


class ContentionLimits(_Part):
    """Above both, a behavioural failure is Inconclusive (sreforge.oracle)."""

    outside_cpu: float
    cpu_wait: float


class ContentionRecord(_Part):
    """Other work on the machine while the fix was verified (the oracle's guard)."""

    verify_outside_cpu_mean: float | None = None
    verify_cpu_wait_mean: float | None = None
    verify_outside_cpu_max: float | None = None
    inconclusive_above: ContentionLimits


class SoakRecord(_Part):
    """The soak of this case (sreforge.oracle.soak), published with its verdict: the
    declared range, the length drawn for this case and the case's seed (the draw can be
    recomputed from it; the run's key, from which later cases are drawn, is never
    published)."""

    range_seconds: tuple[float, float]
    seconds: float = Field(ge=0)
    seed: str


class ControlRecord(_Part):
    """The control window: the healthy build under the same load before the injection."""

    seconds: int
    target_fired: bool
    # pages that fired and restarts of the healthy build during the window (None: a
    # record from before they were watched)
    pages_fired: list[str] | None = None
    restarts: int | None = None
    # the healthy build's highest p95 per route in the window, {"load"|"probe": {route: s}}:
    # how far below each latency page it sat (None: a record from before it was kept)
    p95_by_route: dict[str, dict[str, float]] | None = None


class SessionRecord(_Part):
    """Where a case of a warm session (or a campaign) stands: many cases are graded against
    one injected environment, each with its own record. Absent for a single run."""

    id: str = Field(description="the warm session, one per scenario of a campaign or validation")
    campaign: str | None = None
    label: str = Field(description="the case: a patch's label, the empty patch, an agent")
    case: int = Field(ge=1, description="this case's place in the session, from 1")
    cases: int = Field(ge=1)
    environment: int = Field(
        ge=1, description="the environment that graded it: 1, or more after a restart"
    )
    restarted_because: str | None = Field(
        default=None, description="the fault that made the session start this environment anew"
    )


class RunRecord(_Part):
    """One graded run, as written to record.json (schema sreforge.record, version 1).

    The verdict's headline (`passed`, `score`, `reason`, `signals`, ...) is repeated at the
    top level for readers; `verdict` is the oracle's Verdict itself and `timeline` every
    AlertSample the loop observed.
    """

    schema_id: Literal["sreforge.record.v1"] = Field(default=RECORD_SCHEMA, alias="schema")
    schema_name: Literal["sreforge.record"] = SCHEMA_NAME
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str = Field(min_length=1)
    scenario: ScenarioRecord
    submission: SubmissionRecord
    passed: bool
    score: float = Field(ge=0, le=1)
    pass_threshold: float
    reason: Reason
    message: str
    failing_signals: list[SignalName]
    signals: dict[SignalName, SignalRecord]
    weights: Weights
    verify: RecordedVerify
    timestamps: Timestamps
    time_to_clear_seconds: float | None = None
    new_alerts: list[str] = Field(default_factory=list)
    ci: CIRecord
    load: LoadRecord
    contention: ContentionRecord
    control: ControlRecord | None = None
    session: SessionRecord | None = None
    soak: SoakRecord | None = Field(
        default=None, description="the soak after the window; absent if nothing was rolled out"
    )
    restarts: int | None = Field(
        default=None,
        description="restarts of the patched service after its rollout (most seen); absent "
        "where not observed",
    )
    fault: str | None = Field(default=None, description="the harness fault, if one ended the run")
    wall_time_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="seconds each phase took (warmup, setup, agent, ci, deploy, fireWait, "
        "verify, total); a phase the run did not reach is left out",
    )
    verdict: Verdict
    timeline: list[AlertSample] = Field(
        default_factory=list, description="every sample the loop took, in order"
    )

    @model_validator(mode="before")
    @classmethod
    def _weights_into_verify(cls, data: Any) -> Any:
        """The wire keeps the weights beside `verify`; the model's verify holds them too."""
        if isinstance(data, Mapping):
            verify, weights = data.get("verify"), data.get("weights")
            if isinstance(verify, Mapping) and "weights" not in verify and weights is not None:
                return {**data, "verify": {**verify, "weights": weights}}
        return data

    @property
    def graded(self) -> bool:
        """False for a harness outcome (Inconclusive, AlertNeverFired): DESIGN.md leaves
        those out of scores."""
        return self.reason not in (Reason.INCONCLUSIVE, Reason.ALERT_NEVER_FIRED)

    @classmethod
    def build(
        cls,
        state: RunState,
        *,
        scenario: ScenarioRecord,
        submission: SubmissionRecord,
        target_rate: int,
        recorded_at: float,
        generator: Mapping[str, Any] | None = None,
        control: ControlRecord | None = None,
        wall_seconds: Mapping[str, float] | None = None,
        began_at: float | None = None,
        run_id: str | None = None,
        session: SessionRecord | None = None,
    ) -> RunRecord:
        """The record of a run whose loop reached a verdict.

        `state` gives the verdict, the timestamps, the CI result and the samples (from
        which the verification window's load and contention figures are computed);
        `submission.files_changed` is taken from the CI result. The rest is what only the
        runtime knows: the load generator's final stats, the control window, the seconds
        each phase took (`wall_seconds`, plus fireWait, verify and total derived here from
        the state, `recorded_at` and `began_at`).
        """
        verdict = state.verdict
        if verdict is None:
            raise ValueError(f"run {state.run_id} has no verdict to record")
        ci = state.ci or CIResult(status=CIStatus.ERROR, reason="CI did not run")
        verifying = [s for s in state.samples if state.redeployed_at and s.t >= state.redeployed_at]
        loads = [s.load for s in verifying if s.load is not None]
        probes = [s.probe.success_ratio for s in verifying if s.probe and s.probe.success_ratio]
        seed, soak_seconds = state.soak()
        cpu = [s for s in verifying if s.outside_cpu is not None]
        measured = oracle.contention(cpu, 0.0)
        wall = dict(wall_seconds or {})
        if state.fired_at and state.injected_at:
            wall["fireWait"] = state.fired_at - state.injected_at
        if state.redeployed_at:
            wall["verify"] = recorded_at - state.redeployed_at
        if began_at is not None:
            wall["total"] = recorded_at - began_at
        return cls(
            run_id=run_id or state.run_id,
            scenario=scenario,
            submission=submission.model_copy(update={"files_changed": list(ci.files_changed)}),
            passed=verdict.passed,
            score=verdict.score,
            pass_threshold=verdict.pass_threshold,
            reason=verdict.reason,
            message=verdict.message,
            failing_signals=[s.name for s in verdict.signals if s.credit < 1.0],
            signals={
                s.name: SignalRecord(
                    value=s.value, credit=s.credit, weight=s.weight, detail=s.detail
                )
                for s in verdict.signals
            },
            weights=state.verify.weights,
            verify=RecordedVerify.model_validate(
                {**state.verify.model_dump(), "weights": state.verify.weights}
            ),
            timestamps=Timestamps(
                started=_moment(state.started_at),
                injected=_moment(state.injected_at),
                fired=_moment(state.fired_at),
                handed_off=_moment(state.handed_off_at),
                submitted=_moment(state.submitted_at),
                ci_finished=_moment(state.ci_finished_at),
                redeployed=_moment(state.redeployed_at),
                cleared=_moment(verdict.cleared_at),
                recorded=_moment(recorded_at),
            ),
            time_to_clear_seconds=verdict.time_to_clear_seconds,
            new_alerts=list(verdict.new_alerts),
            ci=CIRecord(
                status=ci.status,
                reason=ci.reason,
                output_tail=ci.output_tail,
                duration_seconds=round(ci.duration_seconds, 3),
            ),
            load=LoadRecord(
                target_rate=target_rate,
                generator=None if generator is None else dict(generator),
                verify_achieved_rate_mean=(
                    round(sum(x.achieved_rate for x in loads) / len(loads), 2) if loads else None
                ),
                verify_dropped_ratio_max=max((x.dropped_ratio for x in loads), default=None),
                verify_probe_success_min=min(probes, default=None),
                verify_probe_success_mean=(round(sum(probes) / len(probes), 4) if probes else None),
            ),
            contention=ContentionRecord(
                verify_outside_cpu_mean=measured[0] if measured else None,
                verify_cpu_wait_mean=measured[1] if measured else None,
                verify_outside_cpu_max=max((s.outside_cpu or 0.0 for s in cpu), default=None),
                inconclusive_above=ContentionLimits(
                    outside_cpu=oracle.MIN_OUTSIDE_CPU, cpu_wait=oracle.MAX_CPU_WAIT
                ),
            ),
            control=control,
            session=session,
            soak=(
                SoakRecord(range_seconds=state.verify.soak_seconds, seconds=soak_seconds, seed=seed)
                if state.redeployed_at
                else None
            ),
            restarts=state.most_restarts(),
            fault=state.fault,
            wall_time_seconds={key: round(value, 3) for key, value in wall.items()},
            verdict=verdict,
            timeline=list(state.samples),
        )

    def to_json(self) -> str:
        """record.json's text."""
        return self.model_dump_json(by_alias=True, indent=2)


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the run record (what a reader accepts)."""
    schema = RunRecord.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$comment": f"{SCHEMA_NAME} version {SCHEMA_VERSION}: python -m sreforge.schemas",
        **schema,
    }


def json_schema_text() -> str:
    """schemas/run-record.v1.json's text."""
    return json.dumps(json_schema(), indent=2) + "\n"
