"""The closed-loop state machine, driven by hand: no servers, no clocks."""

from __future__ import annotations

import pytest

from sreforge import loop
from sreforge.api import AlertSample, CIResult, CIStatus, LoadStats, Reason, VerifySpec
from sreforge.loop import Action, Phase, RunState

TARGET = "CatalogLatencyHigh"
LOAD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0, success_ratio=1)


def state(**verify: int) -> RunState:
    return RunState(
        run_id="r1",
        target_alert=TARGET,
        verify=VerifySpec(fire_timeout_seconds=30, sustain_seconds=20, **verify),
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


def test_never_fired_is_not_handed_off() -> None:
    st = state()
    loop.step(st, loop.Start(t=0))
    loop.step(st, loop.Injected(t=1))
    actions: list[Action] = []
    for t in range(2, 60):
        actions = loop.step(st, sampled(t))
        if actions != [Action.SAMPLE]:
            break
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
