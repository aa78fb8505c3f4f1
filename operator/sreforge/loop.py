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
from sreforge.api.verdict import Reason, SignalName, Verdict
from sreforge.errors import SreforgeError
from sreforge.oracle import soak


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


# The phases in which the driver's clock samples the firing set (the timeline is recorded
# from the injection until the verdict).
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


class Resumed(_Frozen):
    """The driver restarted with a persisted state: redo what the phase was waiting on."""

    kind: Literal["resumed"] = "resumed"
    t: float


class Injected(_Frozen):
    kind: Literal["injected"] = "injected"
    t: float
    # when the load and the prober stop by themselves (an Incident's load.durationSeconds
    # after they started); None: they run as long as the run
    load_ends_at: float | None = None


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


class TargetChanged(_Frozen):
    """The rolled-out target was changed by someone other than the harness while it was
    verified (its Deployment, its Service, the pods answering it): `change` names it."""

    kind: Literal["target-changed"] = "target-changed"
    t: float
    change: str


class Fault(_Frozen):
    """An infrastructure fault of the harness: the run ends Inconclusive, never graded."""

    kind: Literal["fault"] = "fault"
    t: float
    reason: str


Event = Annotated[
    Start
    | Resumed
    | Injected
    | Sampled
    | Submitted
    | CIFinished
    | Deployed
    | DeployFailed
    | Restored
    | TargetChanged
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
    REOPEN = "reopen"  # a case was graded and the baseline restored: the next case begins
    FINISH = "finish"


# What each phase waits on: the actions to redo when a driver resumes a persisted state
# (every action is idempotent, so redoing one that had finished is safe).
RESUME_ACTIONS: dict[Phase, list[Action]] = {
    Phase.INJECTING: [Action.INJECT],
    Phase.AWAITING_FIRE: [Action.SAMPLE],
    Phase.AWAITING_SUBMISSION: [Action.HAND_OFF],  # the hand-off may not have been written
    Phase.CI: [Action.RUN_CI],
    Phase.DEPLOYING: [Action.DEPLOY],
    Phase.VERIFYING: [Action.SAMPLE],
    Phase.RESTORING: [Action.RECORD, Action.RESTORE],
    Phase.DONE: [Action.FINISH],
}
# Results of background actions: one that arrives after a fault ended the run is stale.
_JOB_RESULTS = (Injected, Submitted, CIFinished, Deployed, DeployFailed)


class RunState(BaseModel):
    """Everything the loop knows about one run; rebuildable from what it records."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    target_alert: str
    verify: VerifySpec
    # How many Submissions (cases) this run grades against its one injected environment:
    # None, until one passes (the operator, `stop_on_pass`); a local run grades one, a warm
    # session its list of cases. Between two cases the baseline (regressed) build is
    # restored and must fire again (`rearm_timeout_seconds`, else the verify spec's
    # fire timeout) before the next hand-off.
    cases: int | None = 1
    stop_on_pass: bool = True
    rearm_timeout_seconds: float | None = None
    graded: int = 0  # Submissions handed in so far
    # Samples kept while waiting for a Submission (None: all; the operator persists the
    # state in CR status, which must stay small however long the agent takes).
    waiting_samples_kept: int | None = None
    # The key each case's soak length is drawn from (oracle.soak). A secret of the harness:
    # it never leaves the runtime (the operator keeps it out of CR status and derives it
    # again on resume); a case's seed and length are published only with its verdict.
    # None: a key anyone could recompute from the run id (tests and replays only).
    soak_key: str | None = None
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
    # when the load stops by itself (Injected.load_ends_at); a case needs it to run through
    # its clear budget, window and soak (load_too_short)
    load_ends_at: float | None = None
    # the rolled-out target was changed during verification (the change, named): the run
    # failed NotCleared and ends, its environment is no longer the one rolled out
    tampered: str | None = None
    samples: list[AlertSample] = Field(default_factory=list)

    def observations(self) -> oracle.VerifyObservations:
        return oracle.VerifyObservations(
            target_alert=self.target_alert,
            ci=self.ci or CIResult(status=CIStatus.ERROR, reason="CI never ran"),
            redeployed_at=self.redeployed_at,
            active_before_redeploy=self.active_before_redeploy,
            samples=[s for s in self.samples if self.redeployed_at and s.t >= self.redeployed_at],
            soak_seconds=self.soak()[1],
        )

    def most_restarts(self) -> int | None:
        """The most restarts of the patched service seen since its rollout (None: never
        observed)."""
        seen = [
            s.restarts
            for s in self.samples
            if s.restarts is not None and self.redeployed_at and s.t >= self.redeployed_at
        ]
        return max(seen, default=None)

    def soak(self) -> tuple[str, float]:
        """(seed, seconds) of the soak of the case being graded (the last one handed in)."""
        key = self.soak_key or soak.derive_key("public", self.run_id)
        seed = soak.case_seed(key, max(self.graded, 1))
        return seed, soak.draw(seed, *self.verify.soak_seconds)

    def last_active(self) -> frozenset[str]:
        """Alerts pending or firing at the last known sample."""
        for s in reversed(self.samples):
            if s.firing is not None:
                return s.firing | s.pending
        return frozenset()


class TransitionError(SreforgeError, ValueError):
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


def _tampered_verdict(state: RunState, change: str) -> Verdict:
    """The rolled-out target was changed while it was verified: whatever the alerts say
    after that is not this build's doing. NotCleared, the score kept to what CI earned."""
    base = oracle.evaluate(state.observations(), state.verify)
    ci = sum(s.credit * s.weight for s in base.signals if s.name == SignalName.CI_GREEN)
    return base.model_copy(
        update={
            "passed": False,
            "reason": Reason.NOT_CLEARED,
            "score": min(base.score, ci),
            "message": f"the rolled-out target was changed during verification: {change}",
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
        if state.started_at is None:
            state.started_at = event.t  # it failed as it started (e.g. the setup)
        if state.phase is Phase.DONE:
            return []
        if state.phase is Phase.RESTORING:
            state.phase = Phase.DONE
            return [Action.FINISH]
        return _finish_with(state, _inconclusive(state, event.reason))

    if isinstance(event, Sampled):
        return _on_sample(state, event.sample)
    if isinstance(event, TargetChanged):
        if state.phase is not Phase.VERIFYING:
            return []  # only what is verified is compared
        state.tampered = event.change
        return _finish_with(state, _tampered_verdict(state, event.change))
    if isinstance(event, _JOB_RESULTS) and state.phase in (Phase.RESTORING, Phase.DONE):
        return []  # a background action finished after a fault had ended the run

    match (state.phase, event):
        case (Phase.PENDING, Start(t=t) | Resumed(t=t)):
            state.started_at = t
            state.phase = Phase.INJECTING
            return [Action.INJECT]
        case (_, Resumed()):
            return list(RESUME_ACTIONS[state.phase])
        case (Phase.INJECTING, Injected(t=t, load_ends_at=ends)):
            state.injected_at = t
            state.load_ends_at = ends
            state.phase = Phase.AWAITING_FIRE
            return [Action.SAMPLE]
        case (Phase.AWAITING_SUBMISSION, Submitted(t=t)):
            state.submitted_at = t
            state.graded += 1
            state.phase = Phase.CI
            short = load_too_short(state, t)
            if short is not None:  # graded blind if it went on: nothing is run
                state.fault = short
                return _finish_with(state, _inconclusive(state, short))
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
            if more_cases(state):
                _rearm(state)
                return [Action.REOPEN, Action.SAMPLE]
            state.phase = Phase.DONE
            return [Action.FINISH]
        case _:
            raise TransitionError(f"event {event.kind!r} is not expected in phase {state.phase}")


def more_cases(state: RunState) -> bool:
    """Another case may be graded against this environment: the last one was handed off
    and graded on its own merits (no harness fault, not Inconclusive: an environment that
    could not observe one case is not trusted with the next), there are cases left, and a
    pass does not end the run."""
    v = state.verdict
    return (
        v is not None
        and v.reason is not Reason.INCONCLUSIVE
        and state.fault is None
        and state.tampered is None
        and state.fired_at is not None
        and state.submitted_at is not None
        and (state.cases is None or state.graded < state.cases)
        and not (state.stop_on_pass and v.passed)
    )


def load_too_short(state: RunState, t: float) -> str | None:
    """Why no case can be graded from `t` on, because the load stops by itself before a
    fix could be held (its clear budget, its sustained window and the longest soak), or
    None. A case graded past the load's end would be graded blind (Inconclusive, the load's
    series gone), so the run ends at the last moment a case could still be held."""
    if state.load_ends_at is None:
        return None
    v = state.verify
    needed = v.clear_budget_seconds + v.sustain_seconds + v.soak_seconds[1]
    left = state.load_ends_at - t
    if left >= needed:
        return None
    return (
        f"the Incident's load stops by itself in {max(0.0, left):.0f}s (load.durationSeconds), "
        f"too soon to hold a fix through its {v.clear_budget_seconds:g}s clear budget, "
        f"{v.sustain_seconds:g}s window and up to {v.soak_seconds[1]:g}s of soak: nothing "
        "more can be graded; give the Incident a longer load.durationSeconds"
    )


def _rearm(state: RunState) -> None:
    """The baseline (regressed) build is back: wait for the alert to fire again before the
    next case. The graded case's part of the state was recorded before the restore."""
    state.phase = Phase.AWAITING_FIRE
    state.injected_at = state.restored_at
    state.fired_at = None
    state.handed_off_at = None
    state.submitted_at = None
    state.ci_finished_at = None
    state.ci = None
    state.redeployed_at = None
    state.active_before_redeploy = frozenset()
    state.verdict = None
    state.restored_at = None
    state.samples = []


def _on_sample(state: RunState, sample: AlertSample) -> list[Action]:
    if state.phase not in SAMPLED_PHASES:
        return []  # outside the observed run: not part of the timeline
    actions = _observe(state, sample)
    kept = state.waiting_samples_kept
    if state.phase is Phase.AWAITING_SUBMISSION and kept is not None:
        del state.samples[:-kept]
    return actions


def _observe(state: RunState, sample: AlertSample) -> list[Action]:
    state.samples.append(sample)
    if state.phase in (Phase.AWAITING_FIRE, Phase.AWAITING_SUBMISSION):
        short = load_too_short(state, sample.t)
        if short is not None:
            state.fault = short
            return _finish_with(state, _inconclusive(state, short))
    if state.phase is Phase.AWAITING_FIRE:
        assert state.injected_at is not None
        if sample.firing is not None and state.target_alert in sample.firing:
            state.fired_at = sample.t
            state.handed_off_at = sample.t
            state.phase = Phase.AWAITING_SUBMISSION
            return [Action.HAND_OFF]
        waited = sample.t - state.injected_at
        if state.graded == 0 and waited > state.verify.fire_timeout_seconds:
            return _finish_with(state, oracle.never_fired(state.verify, state.target_alert, waited))
        rearm = state.rearm_timeout_seconds or state.verify.fire_timeout_seconds
        if state.graded > 0 and waited > rearm:
            # not the next case's failure: the environment no longer shows the incident
            state.fault = (
                f"the baseline build did not fire {state.target_alert} again within "
                f"{waited:.0f}s of the restore"
            )
            return _finish_with(state, _inconclusive(state, state.fault))
        return [Action.SAMPLE]
    if state.phase is Phase.VERIFYING:
        obs = state.observations()
        if oracle.window_complete(obs, state.verify, sample.t):
            return _finish_with(state, oracle.evaluate(obs, state.verify))
        return [Action.SAMPLE]
    # Waiting for the agent, CI or the rollout: the timeline keeps being recorded.
    return [Action.SAMPLE]
