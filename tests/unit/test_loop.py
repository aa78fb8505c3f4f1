"""The closed-loop state machine, driven by hand: no servers, no clocks."""

from __future__ import annotations

import pytest

from sreforge import loop
from sreforge.api import AlertSample, CIResult, CIStatus, LoadStats, Reason, VerifySpec
from sreforge.loop import Action, Phase, RunState

TARGET = "CatalogLatencyHigh"
LOAD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0, success_ratio=1)


def state(**verify: object) -> RunState:
    """A run without a soak unless `soak_seconds` is given (the soak's own tests)."""
    verify = {"soak_seconds": (0, 0), **verify}
    return RunState(
        run_id="r1",
        target_alert=TARGET,
        verify=VerifySpec(fire_timeout_seconds=30, sustain_seconds=20, **verify),  # type: ignore[arg-type]
    )


def sampled(t: float, *firing: str) -> loop.Sampled:
    return loop.Sampled(
        sample=AlertSample(
            t=t, firing=frozenset(firing), load=LOAD, target_series_present=True, service_up=True
        )
    )


def to_handoff(st: RunState) -> None:
    assert loop.step(st, loop.Start(t=0)) == [Action.INJECT]
    assert loop.step(st, loop.Injected(t=1)) == [Action.SAMPLE]
    assert loop.step(st, sampled(2)) == [Action.SAMPLE]
    assert loop.step(st, sampled(3, TARGET)) == [Action.HAND_OFF]
    assert st.phase is Phase.AWAITING_SUBMISSION
    assert st.fired_at == 3


def test_full_run_passes_and_restores() -> None:
    st = state()
    to_handoff(st)
    assert loop.step(st, loop.Submitted(t=4)) == [Action.RUN_CI]
    green = CIResult(status=CIStatus.GREEN)
    assert loop.step(st, loop.CIFinished(t=5, result=green)) == [Action.DEPLOY]
    assert loop.step(st, sampled(5.5, TARGET)) == [Action.SAMPLE]  # timeline during deploy
    assert loop.step(st, loop.Deployed(t=6)) == [Action.SAMPLE]
    assert st.active_before_redeploy == {TARGET}
    t = 6.0
    actions: list[Action] = []
    for t in range(7, 40):
        actions = loop.step(st, sampled(t, TARGET) if t < 10 else sampled(t))
        if actions != [Action.SAMPLE]:
            break
    assert actions == [Action.RECORD, Action.RESTORE]
    assert t == 30  # cleared at 10, window of 20 s
    assert st.verdict is not None
    assert st.verdict.passed
    assert loop.step(st, loop.Restored(t=31)) == [Action.FINISH]
    assert st.phase is Phase.DONE


def inject_and_never_fire(st: RunState) -> list[Action]:
    """Start, inject, then quiet samples until the loop decides; its last actions."""
    loop.step(st, loop.Start(t=0))
    loop.step(st, loop.Injected(t=1))
    actions: list[Action] = []
    for t in range(2, 60):
        actions = loop.step(st, sampled(t))
        if actions != [Action.SAMPLE]:
            break
    return actions


def test_never_fired_is_not_handed_off() -> None:
    st = state()
    actions = inject_and_never_fire(st)
    assert actions == [Action.RECORD, Action.RESTORE]
    assert Action.HAND_OFF not in actions
    assert st.handed_off_at is None
    assert st.verdict is not None
    assert st.verdict.reason is Reason.ALERT_NEVER_FIRED


def test_red_ci_skips_deploy() -> None:
    st = state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    red = CIResult(status=CIStatus.RED, reason="tests failed")
    assert loop.step(st, loop.CIFinished(t=5, result=red)) == [Action.RECORD, Action.RESTORE]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.CI_RED


def test_failed_rollout_is_no_redeploy() -> None:
    st = state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    loop.step(st, loop.CIFinished(t=5, result=CIResult(status=CIStatus.GREEN)))
    assert loop.step(st, loop.DeployFailed(t=6, reason="not ready")) == [
        Action.RECORD,
        Action.RESTORE,
    ]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.NO_REDEPLOY


def test_harness_fault_is_inconclusive_never_passed() -> None:
    st = state()
    to_handoff(st)
    assert loop.step(st, loop.Fault(t=5, reason="prometheus died")) == [
        Action.RECORD,
        Action.RESTORE,
    ]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE
    assert not st.verdict.passed


def test_unexpected_event_is_a_driver_error() -> None:
    st = state()
    with pytest.raises(loop.TransitionError, match="not expected"):
        loop.step(st, loop.Deployed(t=1))


def test_state_survives_a_json_round_trip_mid_run() -> None:
    st = state()
    to_handoff(st)
    again = RunState.model_validate_json(st.model_dump_json())
    assert again == st
    assert loop.step(again, loop.Submitted(t=4)) == [Action.RUN_CI]


# ---- resume after a restart: the loop knows what each persisted phase was waiting on
@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (Phase.INJECTING, [Action.INJECT]),
        (Phase.AWAITING_FIRE, [Action.SAMPLE]),
        (Phase.AWAITING_SUBMISSION, [Action.HAND_OFF]),
        (Phase.CI, [Action.RUN_CI]),
        (Phase.DEPLOYING, [Action.DEPLOY]),
        (Phase.VERIFYING, [Action.SAMPLE]),
        (Phase.RESTORING, [Action.RECORD, Action.RESTORE]),
        (Phase.DONE, [Action.FINISH]),
    ],
)
def test_resumed_redoes_what_the_persisted_phase_waited_on(
    phase: Phase, expected: list[Action]
) -> None:
    st = state()
    to_handoff(st)
    st.phase = phase  # as persisted by a driver that died in this phase
    persisted = RunState.model_validate_json(st.model_dump_json())
    assert loop.step(persisted, loop.Resumed(t=99)) == expected
    assert persisted.phase is phase  # resuming changes nothing by itself
    assert persisted.started_at == 0


def test_resumed_before_the_start_starts() -> None:
    st = state()
    assert loop.step(st, loop.Resumed(t=7)) == [Action.INJECT]
    assert st.phase is Phase.INJECTING
    assert st.started_at == 7


def test_resumed_mid_ci_then_goes_on_as_if_never_stopped() -> None:
    st = state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    again = RunState.model_validate_json(st.model_dump_json())
    assert loop.step(again, loop.Resumed(t=5)) == [Action.RUN_CI]
    green = CIResult(status=CIStatus.GREEN)
    assert loop.step(again, loop.CIFinished(t=6, result=green)) == [Action.DEPLOY]


# ---- many cases against one environment: the operator's regrade, a warm session
def graded_red(st: RunState, t0: float = 0) -> None:
    if t0 == 0:
        to_handoff(st)
    loop.step(st, loop.Submitted(t=t0 + 4))
    red = CIResult(status=CIStatus.RED, reason="tests failed")
    assert loop.step(st, loop.CIFinished(t=t0 + 5, result=red)) == [Action.RECORD, Action.RESTORE]


def graded_green(st: RunState, t0: float) -> None:
    loop.step(st, loop.Submitted(t=t0 + 4))
    loop.step(st, loop.CIFinished(t=t0 + 5, result=CIResult(status=CIStatus.GREEN)))
    loop.step(st, loop.Deployed(t=t0 + 6))
    for t in range(int(t0) + 7, int(t0) + 40):
        if loop.step(st, sampled(t)) != [Action.SAMPLE]:
            break
    assert st.verdict is not None
    assert st.verdict.passed


def operator_state() -> RunState:
    st = state()
    st.cases, st.stop_on_pass = None, True
    return st


def test_a_failed_case_rearms_and_the_next_is_handed_off_when_it_fires_again() -> None:
    st = operator_state()
    graded_red(st)
    assert loop.step(st, loop.Restored(t=6)) == [Action.REOPEN, Action.SAMPLE]
    assert st.phase is Phase.AWAITING_FIRE
    assert st.injected_at == 6  # the baseline is back since the restore
    assert (st.fired_at, st.submitted_at, st.ci, st.verdict) == (None, None, None, None)
    assert st.samples == []
    assert st.graded == 1
    # quiet for a while (the failed fix had cleared it): no hand-off before it fires again
    assert loop.step(st, sampled(7)) == [Action.SAMPLE]
    assert loop.step(st, sampled(8, TARGET)) == [Action.HAND_OFF]
    assert st.fired_at == 8
    assert loop.step(st, loop.Submitted(t=9)) == [Action.RUN_CI]
    assert st.graded == 2


def test_a_baseline_that_does_not_fire_again_is_inconclusive() -> None:
    st = operator_state()
    st.rearm_timeout_seconds = 10
    graded_red(st)
    loop.step(st, loop.Restored(t=6))
    actions: list[Action] = []
    for t in range(7, 30):
        actions = loop.step(st, sampled(t))
        if actions != [Action.SAMPLE]:
            break
    assert actions == [Action.RECORD, Action.RESTORE]
    assert t == 17  # its own timeout, not the fire timeout of the injection (30 s)
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE
    assert "did not fire CatalogLatencyHigh again" in st.verdict.message
    assert loop.step(st, loop.Restored(t=18)) == [Action.FINISH]  # the environment is spent


def test_one_case_ends_the_run() -> None:
    st = state()  # a local run: one case
    graded_red(st)
    assert loop.step(st, loop.Restored(t=6)) == [Action.FINISH]
    assert st.phase is Phase.DONE


def test_a_session_grades_each_case_pass_or_fail_then_ends() -> None:
    st = state()
    st.cases, st.stop_on_pass = 3, False
    graded_red(st)
    loop.step(st, loop.Restored(t=6))
    loop.step(st, sampled(7, TARGET))
    graded_green(st, 7)  # a pass does not end a session
    assert loop.step(st, loop.Restored(t=50)) == [Action.REOPEN, Action.SAMPLE]
    loop.step(st, sampled(51, TARGET))
    graded_red(st, 51)
    assert loop.step(st, loop.Restored(t=60)) == [Action.FINISH]  # three cases graded
    assert st.graded == 3


def test_the_operator_stops_at_the_first_pass() -> None:
    st = operator_state()
    graded_red(st)
    loop.step(st, loop.Restored(t=6))
    loop.step(st, sampled(7, TARGET))
    graded_green(st, 7)
    assert loop.step(st, loop.Restored(t=50)) == [Action.FINISH]


def test_harness_fault_never_rearms() -> None:
    st = operator_state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    loop.step(st, loop.Fault(t=5, reason="CI Job vanished"))
    assert loop.step(st, loop.Restored(t=6)) == [Action.FINISH]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE


def test_never_fired_never_rearms() -> None:
    st = operator_state()
    assert inject_and_never_fire(st) == [Action.RECORD, Action.RESTORE]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.ALERT_NEVER_FIRED
    assert loop.step(st, loop.Restored(t=61)) == [Action.FINISH]


# ---- what the driver used to do to the state by hand
def test_waiting_samples_are_bounded_when_asked() -> None:
    st = state()
    st.waiting_samples_kept = 3
    to_handoff(st)
    for t in range(4, 20):
        loop.step(st, sampled(t, TARGET))
    assert [s.t for s in st.samples] == [17, 18, 19]
    loop.step(st, loop.Submitted(t=20))
    for t in range(21, 25):
        loop.step(st, sampled(t, TARGET))
    assert len(st.samples) == 7  # only the wait for a Submission is trimmed


def test_a_fault_before_the_start_ends_the_run_inconclusive() -> None:
    st = state()
    assert loop.step(st, loop.Fault(t=3, reason="setup failed")) == [
        Action.RECORD,
        Action.RESTORE,
    ]
    assert st.started_at == 3
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE
    assert loop.step(st, loop.Restored(t=4)) == [Action.FINISH]


def test_a_job_result_after_a_fault_is_stale() -> None:
    st = state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    loop.step(st, loop.Fault(t=5, reason="prometheus died"))
    green = CIResult(status=CIStatus.GREEN)
    assert loop.step(st, loop.CIFinished(t=6, result=green)) == []
    assert st.ci is None  # the late result changes nothing
    assert st.phase is Phase.RESTORING


def test_an_inconclusive_case_ends_the_environment() -> None:
    """Telemetry lost in the verification window (no fault raised): the verdict is
    Inconclusive and the environment is not trusted with the next case."""
    st = operator_state()
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    loop.step(st, loop.CIFinished(t=5, result=CIResult(status=CIStatus.GREEN)))
    loop.step(st, loop.Deployed(t=6))
    loop.step(st, sampled(7))  # cleared
    actions: list[Action] = []
    for t in range(8, 40):  # then Prometheus cannot be asked
        blind = loop.Sampled(sample=AlertSample(t=t, firing=None))
        actions = loop.step(st, blind)
        if actions != [Action.SAMPLE]:
            break
    assert actions == [Action.RECORD, Action.RESTORE]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE
    assert st.fault is None
    assert loop.step(st, loop.Restored(t=41)) == [Action.FINISH]


def verifying_a_clearing_fix(st: RunState) -> None:
    to_handoff(st)
    loop.step(st, loop.Submitted(t=4))
    loop.step(st, loop.CIFinished(t=5, result=CIResult(status=CIStatus.GREEN)))
    loop.step(st, loop.Deployed(t=6))
    for t in range(7, 25):  # cleared at 7, sustained for 18 s of the 20
        assert loop.step(st, sampled(t)) == [Action.SAMPLE]


def test_a_target_changed_while_verified_fails_not_cleared_and_ends_the_run() -> None:
    st = operator_state()
    verifying_a_clearing_fix(st)
    change = "Deployment spec.replicas: 1 -> 0"
    assert loop.step(st, loop.TargetChanged(t=25, change=change)) == [
        Action.RECORD,
        Action.RESTORE,
    ]
    v = st.verdict
    assert v is not None
    assert (v.passed, v.reason) == (False, Reason.NOT_CLEARED)
    assert change in v.message
    assert "changed during verification" in v.message
    # what the alerts said is not the build's doing: only CI's credit is kept
    assert v.score == pytest.approx(v.signal("ci_green").points)
    assert v.score < v.pass_threshold
    assert st.tampered == change
    # an environment someone changed is not graded again: the run ends
    assert loop.step(st, loop.Restored(t=26)) == [Action.FINISH]
    assert st.phase is Phase.DONE


def test_a_target_change_outside_verification_is_not_graded() -> None:
    st = operator_state()
    to_handoff(st)
    assert loop.step(st, loop.TargetChanged(t=4, change="x")) == []
    assert (st.phase, st.verdict, st.tampered) == (Phase.AWAITING_SUBMISSION, None, None)


def test_a_target_changed_event_survives_a_json_round_trip() -> None:
    st = operator_state()
    verifying_a_clearing_fix(st)
    loop.step(st, loop.TargetChanged(t=25, change="Service spec.selector.app: a -> b"))
    again = RunState.model_validate_json(st.model_dump_json())
    assert again.tampered == "Service spec.selector.app: a -> b"
    assert again.verdict == st.verdict


def test_the_run_ends_when_its_load_could_no_longer_hold_a_case() -> None:
    """An Incident's load stops by itself (load.durationSeconds). A case graded past its
    end is graded blind, so the run ends Inconclusive, naming the setting, at the last
    moment a fix could still be held through its clear budget, window and soak; a
    Submission that comes later is not run at all."""
    st = operator_state()  # clear budget 60 s (the default), window 20 s, no soak
    assert loop.step(st, loop.Start(t=0)) == [Action.INJECT]
    assert loop.step(st, loop.Injected(t=1, load_ends_at=200)) == [Action.SAMPLE]
    assert st.load_ends_at == 200
    assert loop.step(st, sampled(3, TARGET)) == [Action.HAND_OFF]
    assert loop.step(st, sampled(119, TARGET)) == [Action.SAMPLE]  # 81 s left: 80 needed
    assert loop.step(st, sampled(121, TARGET)) == [Action.RECORD, Action.RESTORE]
    assert st.verdict is not None
    assert st.verdict.reason is Reason.INCONCLUSIVE
    assert "load.durationSeconds" in st.verdict.message
    assert "stops by itself in 79s" in st.verdict.message
    assert not loop.more_cases(st)
    # a Submission handed in too late is not run: it would be graded blind
    late = operator_state()
    to_handoff(late)
    late.load_ends_at = 50
    assert loop.step(late, loop.Submitted(t=4)) == [Action.RECORD, Action.RESTORE]
    assert late.ci is None
    assert late.verdict is not None
    assert late.verdict.reason is Reason.INCONCLUSIVE
    # in time, it is graded; and a run whose load lasts as long as it does never ends so
    ok = operator_state()
    to_handoff(ok)
    ok.load_ends_at = 90
    assert loop.step(ok, loop.Submitted(t=4)) == [Action.RUN_CI]
    forever = operator_state()
    to_handoff(forever)
    assert loop.step(forever, sampled(10**7, TARGET)) == [Action.SAMPLE]
