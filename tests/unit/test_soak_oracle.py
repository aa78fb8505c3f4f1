"""The soak after the sustained window: drawn per case from a harness-held key, it must
hold like the window (a refire or a restart in it fails the fix), and it is published only
with the verdict."""

from __future__ import annotations

import json

import pytest

from sreforge import loop
from sreforge.api.observation import AlertSample, CIResult, CIStatus, LoadStats
from sreforge.api.scenario import VerifySpec
from sreforge.api.verdict import Reason
from sreforge.loop import Action, RunState
from sreforge.oracle import soak
from sreforge.runtime.kube.status import Persisted

TARGET = "LatencyHigh"
LOAD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0, success_ratio=1)


def sample(t: float, *firing: str, restarts: int | None = 0) -> loop.Sampled:
    return loop.Sampled(
        sample=AlertSample(
            t=t,
            firing=frozenset(firing),
            load=LOAD,
            target_series_present=True,
            service_up=True,
            restarts=restarts,
        )
    )


def deployed(soak_range: tuple[float, float], key: str = "k" * 64) -> RunState:
    """A run whose fix was just rolled out at t=6 (the target firing until then)."""
    st = RunState(
        run_id="r1",
        target_alert=TARGET,
        verify=VerifySpec(sustain_seconds=20, soak_seconds=soak_range),
        soak_key=key,
    )
    loop.step(st, loop.Start(t=0))
    loop.step(st, loop.Injected(t=1))
    loop.step(st, sample(2, TARGET))
    loop.step(st, loop.Submitted(t=3))
    loop.step(st, loop.CIFinished(t=4, result=CIResult(status=CIStatus.GREEN)))
    loop.step(st, loop.Deployed(t=6))
    return st


def run_until_verdict(st: RunState, firing_at: set[int], restarts_from: int | None = None) -> int:
    for t in range(7, 2000):
        restarts = 1 if restarts_from is not None and t >= restarts_from else 0
        actions = loop.step(st, sample(t, *([TARGET] if t in firing_at else []), restarts=restarts))
        if actions != [Action.SAMPLE]:
            assert actions == [Action.RECORD, Action.RESTORE]
            return t
    raise AssertionError("no verdict")


def test_the_draw_is_uniform_in_the_range_keyed_and_new_for_each_case() -> None:
    key = soak.derive_key("operator secret", "incident-uid-1")
    assert key == soak.derive_key("operator secret", "incident-uid-1")  # a resume redraws it
    assert key != soak.derive_key("operator secret", "incident-uid-2")
    assert key != soak.derive_key("another secret", "incident-uid-1")
    draws = [soak.draw(soak.case_seed(key, case), 240, 420) for case in range(1, 401)]
    assert all(240 <= d <= 420 for d in draws)
    assert len(set(draws)) > 350  # cases get their own lengths
    # spread over the whole range, not bunched at one end
    assert min(draws) < 260
    assert max(draws) > 400
    assert sum(d < 330 for d in draws) in range(160, 241)
    assert soak.draw(soak.case_seed(key, 1), 90, 90) == 90
    assert soak.draw(soak.case_seed(key, 1), 0, 0) == 0


def test_a_fix_that_holds_through_window_and_soak_passes_only_after_the_soak() -> None:
    st = deployed((30, 60))
    seed, length = st.soak()
    assert 30 <= length <= 60
    assert seed == soak.case_seed("k" * 64, 1)
    end = run_until_verdict(st, firing_at={7, 8, 9})  # clears at 10
    assert st.verdict is not None
    assert st.verdict.passed
    assert end == pytest.approx(10 + 20 + length, abs=1.01)
    assert "soak after it" in st.verdict.signal("sustained_clear").detail


@pytest.mark.parametrize("gives_way_at", [12, 35])
def test_a_fix_that_gives_way_in_the_window_or_the_soak_is_refired(gives_way_at: int) -> None:
    st = deployed((40, 40))  # window until 30, soak until 70
    end = run_until_verdict(st, firing_at={7, 8, 9, *range(10 + gives_way_at, 2000)})
    assert st.verdict is not None
    assert not st.verdict.passed
    assert st.verdict.reason is Reason.REFIRED
    assert end == 10 + gives_way_at  # the refire decides at once: no waiting for the end
    expected = "in the 20s window" if gives_way_at <= 20 else "into the 40s soak"
    assert expected in st.verdict.message


def test_a_fix_that_gives_way_just_after_the_soak_passes() -> None:
    """The soak is a bounded look: what happens after the verdict is not graded."""
    st = deployed((40, 40))
    run_until_verdict(st, firing_at={7, 8, 9, *range(71, 2000)})
    assert st.verdict is not None
    assert st.verdict.passed


def test_a_restart_of_the_patched_service_fails_the_fix_even_with_the_alert_clear() -> None:
    st = deployed((40, 40))
    end = run_until_verdict(st, firing_at={7, 8, 9}, restarts_from=50)
    assert st.verdict is not None
    assert not st.verdict.passed
    assert st.verdict.reason is Reason.NOT_CLEARED
    assert "restarted 1 time after the rollout" in st.verdict.message
    assert end == 50


def test_a_fix_restarting_before_it_ever_cleared_is_not_cleared() -> None:
    st = deployed((0, 0))
    run_until_verdict(st, firing_at={7, 8}, restarts_from=7)
    assert st.verdict is not None
    assert st.verdict.reason is Reason.NOT_CLEARED
    assert "restarted" in st.verdict.message


def test_each_case_of_a_session_gets_its_own_soak() -> None:
    st = deployed((100, 400))
    first = st.soak()
    st.graded = 2
    assert st.soak() != first


def test_without_a_key_the_draw_is_public_but_still_in_range() -> None:
    st = RunState(run_id="r1", target_alert=TARGET, verify=VerifySpec(soak_seconds=(10, 20)))
    assert 10 <= st.soak()[1] <= 20


def test_a_reversed_soak_range_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"soak_seconds must be \[low, high\].*\[90, 30\]"):
        VerifySpec(soak_seconds=(90, 30))
    with pytest.raises(ValueError, match="soak_seconds"):
        VerifySpec(soak_seconds=(-1, 30))


def test_the_operator_never_writes_the_key_to_status_and_draws_the_same_soak_on_resume() -> None:
    """status.loop is readable by whoever may read the Incident (the agent): the key stays
    out of it; a restarted operator derives the same key from its secret and the uid."""
    key = soak.derive_key("the operator's secret", "uid-1")
    st = deployed((100, 400), key=key)
    before = st.soak()
    dumped = Persisted(st).dump()
    assert key not in json.dumps(dumped)
    assert "soak_key" not in dumped["state"]
    assert str(before[1]) not in json.dumps(dumped)
    resumed = Persisted.load(dumped).state
    assert resumed.soak_key is None
    again = resumed.model_copy(
        update={"soak_key": soak.derive_key("the operator's secret", "uid-1")}
    )
    assert again.soak() == before
