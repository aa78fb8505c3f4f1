"""The closed loop of one Incident run as a pure state machine: `step(state, event) -> actions`.

The local runtime and the Kubernetes operator both drive this one machine; it does no I/O.
State is a plain pydantic model, persisted in the run directory or in CR status, so a
restarted driver resumes where it stopped.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from sreforge import oracle
from sreforge.api.observation import AlertSample, CIResult, CIStatus
from sreforge.api.scenario import VerifySpec
from sreforge.api.verdict import Reason, Verdict


class Phase(StrEnum):
    PENDING = "Pending"
    INJECTING = "Injecting"
    AWAITING_FIRE = "AwaitingFire"
    AWAITING_SUBMISSION = "AwaitingSubmission"
    CI = "CI"
    DEPLOYING = "Deploying"
    VERIFYING = "Verifying"
    RESTORING = "Restoring"
    DONE = "Done"


# The phases in which a driver samples the alerts (outside them nothing is observed).
SAMPLED_PHASES = frozenset(
    {
        Phase.AWAITING_FIRE,
        Phase.AWAITING_SUBMISSION,
        Phase.CI,
        Phase.DEPLOYING,
        Phase.VERIFYING,
    }
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Events: what the driver observed.
class Start(_Frozen):
    kind: Literal["start"] = "start"
    t: float


class Injected(_Frozen):
    kind: Literal["injected"] = "injected"
    t: float


class Sampled(_Frozen):
    kind: Literal["sampled"] = "sampled"
    sample: AlertSample


class Submitted(_Frozen):
    kind: Literal["submitted"] = "submitted"
    t: float


class CIFinished(_Frozen):
    kind: Literal["ci-finished"] = "ci-finished"
    t: float
    result: CIResult


class Deployed(_Frozen):
    kind: Literal["deployed"] = "deployed"
    t: float


class DeployFailed(_Frozen):
    kind: Literal["deploy-failed"] = "deploy-failed"
    t: float
    reason: str


class Restored(_Frozen):
    kind: Literal["restored"] = "restored"
    t: float


class Fault(_Frozen):
    """An infrastructure fault of the harness: the run ends Inconclusive, never graded."""

    kind: Literal["fault"] = "fault"
    t: float
    reason: str


Event = Annotated[
    Start
    | Injected
    | Sampled
    | Submitted
    | CIFinished
    | Deployed
    | DeployFailed
    | Restored
    | Fault,
    Field(discriminator="kind"),
]


# Actions: what the driver must do next.
class Action(StrEnum):
    INJECT = "inject"  # deploy the regressed build and start the load
    SAMPLE = "sample"  # take one AlertSample after sample_interval_seconds
    HAND_OFF = "hand-off"  # give the agent the brief and the workspace
    RUN_CI = "run-ci"  # apply the patch to a pristine copy, run the pristine tests
    DEPLOY = "deploy"  # roll out the patched build
    RECORD = "record"  # persist the verdict
    RESTORE = "restore"  # put the baseline (regressed) build back, stop what the run started
    FINISH = "finish"


class RunState(BaseModel):
    """Everything the loop knows about one run; rebuildable from what it records."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    target_alert: str
    verify: VerifySpec
    phase: Phase = Phase.PENDING
    started_at: float | None = None
    injected_at: float | None = None
    fired_at: float | None = None
    handed_off_at: float | None = None
    submitted_at: float | None = None
    ci_finished_at: float | None = None
    ci: CIResult | None = None
    redeployed_at: float | None = None
    active_before_redeploy: frozenset[str] = frozenset()
    verdict: Verdict | None = None
    restored_at: float | None = None
    fault: str | None = None
    samples: list[AlertSample] = Field(default_factory=list)

    def observations(self) -> oracle.VerifyObservations:
        return oracle.VerifyObservations(
            target_alert=self.target_alert,
            ci=self.ci or CIResult(status=CIStatus.ERROR, reason="CI never ran"),
            redeployed_at=self.redeployed_at,
            active_before_redeploy=self.active_before_redeploy,
            samples=[s for s in self.samples if self.redeployed_at and s.t >= self.redeployed_at],
        )

    def last_active(self) -> frozenset[str]:
        """Alerts pending or firing at the last known sample."""
        for s in reversed(self.samples):
            if s.firing is not None:
                return s.firing | s.pending
        return frozenset()


class TransitionError(ValueError):
    """An event that makes no sense in the current phase (a driver bug, not a user error)."""


def _inconclusive(state: RunState, reason: str) -> Verdict:
    base = oracle.evaluate(
        state.observations().model_copy(
            update={"ci": state.ci or CIResult(status=CIStatus.ERROR, reason=reason)}
        ),
        state.verify,
    )
    return base.model_copy(
        update={
            "passed": False,
            "reason": Reason.INCONCLUSIVE,
            "message": f"harness fault: {reason}",
        }
    )


def _finish_with(state: RunState, verdict: Verdict) -> list[Action]:
    state.verdict = verdict
    state.phase = Phase.RESTORING
    return [Action.RECORD, Action.RESTORE]


def step(state: RunState, event: Event) -> list[Action]:
    """Advance `state` in place by one event and return the actions the driver must take.

    Idempotent on replays the driver may send after a restart: an event already reflected
    in the state (same phase change) yields no new actions.
    """
    if isinstance(event, Fault):
        state.fault = event.reason
        if state.phase is Phase.DONE:
            return []
        if state.phase is Phase.RESTORING:
            state.phase = Phase.DONE
            return [Action.FINISH]
        return _finish_with(state, _inconclusive(state, event.reason))

    if isinstance(event, Sampled):
        return _on_sample(state, event.sample)

    match (state.phase, event):
        case (Phase.PENDING, Start(t=t)):
            state.started_at = t
            state.phase = Phase.INJECTING
            return [Action.INJECT]
        case (Phase.INJECTING, Injected(t=t)):
            state.injected_at = t
            state.phase = Phase.AWAITING_FIRE
            return [Action.SAMPLE]
        case (Phase.AWAITING_SUBMISSION, Submitted(t=t)):
            state.submitted_at = t
            state.phase = Phase.CI
            return [Action.RUN_CI]
        case (Phase.CI, CIFinished(t=t, result=result)):
            state.ci = result
            state.ci_finished_at = t
            if result.green:
                state.phase = Phase.DEPLOYING
                return [Action.DEPLOY]
            return _finish_with(state, oracle.evaluate(state.observations(), state.verify))
        case (Phase.DEPLOYING, Deployed(t=t)):
            state.redeployed_at = t
            state.active_before_redeploy = state.last_active()
            state.phase = Phase.VERIFYING
            return [Action.SAMPLE]
        case (Phase.DEPLOYING, DeployFailed()):
            return _finish_with(state, oracle.evaluate(state.observations(), state.verify))
        case (Phase.RESTORING, Restored(t=t)):
            state.restored_at = t
            state.phase = Phase.DONE
            return [Action.FINISH]
        case _:
            raise TransitionError(f"event {event.kind!r} is not expected in phase {state.phase}")


def _on_sample(state: RunState, sample: AlertSample) -> list[Action]:
    if state.phase in (Phase.PENDING, Phase.INJECTING, Phase.RESTORING, Phase.DONE):
        return []  # outside the observed run: not part of the timeline
    state.samples.append(sample)
    if state.phase is Phase.AWAITING_FIRE:
        assert state.injected_at is not None
        if sample.firing is not None and state.target_alert in sample.firing:
            state.fired_at = sample.t
            state.handed_off_at = sample.t
            state.phase = Phase.AWAITING_SUBMISSION
            return [Action.HAND_OFF]
        waited = sample.t - state.injected_at
        if waited > state.verify.fire_timeout_seconds:
            return _finish_with(state, oracle.never_fired(state.verify, state.target_alert, waited))
        return [Action.SAMPLE]
    if state.phase is Phase.VERIFYING:
        obs = state.observations()
        if oracle.window_complete(obs, state.verify, sample.t):
            return _finish_with(state, oracle.evaluate(obs, state.verify))
        return [Action.SAMPLE]
    # Waiting for the agent, CI or the rollout: the timeline keeps being recorded.
    return [Action.SAMPLE]
