"""The mitigation oracle: pure, tested without servers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sreforge import oracle
from sreforge.api import (
    AlertSample,
    CIResult,
    CIStatus,
    LoadStats,
    Reason,
    VerifySpec,
    Weights,
)
from sreforge.api.observation import ProbeStats

TARGET = "CatalogLatencyHigh"
VERIFY = VerifySpec(sustain_seconds=30, clear_budget_seconds=60)
GOOD_LOAD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.0, success_ratio=1.0)
GREEN = CIResult(status=CIStatus.GREEN, reason="ok")
T0 = 1_000.0


def sample(t: float, firing: set[str] | None = frozenset(), **kw: object) -> AlertSample:
    base: dict[str, object] = {
        "t": T0 + t,
        "firing": None if firing is None else frozenset(firing),
        "target_series_present": True,
        "service_up": True,
        "load": GOOD_LOAD,
    }
    base.update(kw)
    return AlertSample.model_validate(base)


def observe(
    samples: list[AlertSample],
    ci: CIResult = GREEN,
    redeployed: bool = True,
    before: frozenset[str] = frozenset({TARGET}),
) -> oracle.VerifyObservations:
    return oracle.VerifyObservations(
        target_alert=TARGET,
        ci=ci,
        redeployed_at=T0 if redeployed else None,
        active_before_redeploy=before,
        samples=samples,
    )


def firing_until(clear_at: int, end: int, extra: dict[int, set[str]] | None = None) -> list:
    out = []
    for t in range(end + 1):
        names = {TARGET} if t < clear_at else set()
        names |= (extra or {}).get(t, set())
        out.append(sample(t, names))
    return out


def test_clean_fix_passes_with_time_to_clear_credit() -> None:
    v = oracle.evaluate(observe(firing_until(12, 12 + 31)), VERIFY)
    assert v.passed
    assert v.reason is Reason.PASSED
    assert v.time_to_clear_seconds == 12
    assert v.signal("time_to_clear").credit == pytest.approx(1 - 12 / 60)
    assert v.score == pytest.approx(0.25 + 0.35 + 0.20 + 0.1 * 0.8 + 0.10)


def test_a_flap_cannot_pass() -> None:
    samples = firing_until(5, 60)
    samples = [s if not 20 <= s.t - T0 <= 30 else sample(s.t - T0, {TARGET}) for s in samples]
    v = oracle.evaluate(observe(samples), VERIFY)
    assert not v.passed
    assert v.reason is Reason.REFIRED
    assert v.signal("alert_cleared").credit == 1.0
    assert v.signal("sustained_clear").credit == 0.0
    assert v.score <= 0.80  # ci 0.25 + cleared 0.35 + ttc 0.10 + no-new 0.10 at most


def test_flap_ceiling_holds_for_every_time_to_clear() -> None:
    for clear_at in range(0, 60, 7):
        samples = firing_until(clear_at, clear_at + 40)
        samples[clear_at + 15] = sample(clear_at + 15, {TARGET})  # inside the window
        v = oracle.evaluate(observe(samples), VERIFY)
        assert not v.passed
        assert v.score < VERIFY.pass_threshold


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (CIStatus.RED, Reason.CI_RED),
        (CIStatus.REJECTED, Reason.PATCH_REJECTED),
        (CIStatus.ERROR, Reason.INCONCLUSIVE),
    ],
)
def test_fail_closed_on_ci_not_green_even_if_alert_clears(status: CIStatus, reason: Reason) -> None:
    v = oracle.evaluate(
        observe(firing_until(0, 40), ci=CIResult(status=status, reason="x")), VERIFY
    )
    assert not v.passed
    assert v.reason is reason
    assert v.score == 0.0


def test_fail_closed_without_redeploy() -> None:
    v = oracle.evaluate(observe(firing_until(0, 40), redeployed=False), VERIFY)
    assert not v.passed
    assert v.reason is Reason.NO_REDEPLOY
    assert v.score == 0.25


def test_prometheus_unreachable_is_never_clear() -> None:
    samples = [sample(t, None) for t in range(70)]
    v = oracle.evaluate(observe(samples), VERIFY)
    assert not v.passed
    assert v.reason is Reason.INCONCLUSIVE
    assert v.signal("alert_cleared").value is False


def test_prometheus_dying_inside_the_window_is_not_a_pass() -> None:
    samples = firing_until(5, 20) + [sample(t, None) for t in range(21, 50)]
    v = oracle.evaluate(observe(samples), VERIFY)
    assert not v.passed
    assert v.reason is Reason.INCONCLUSIVE


def test_no_samples_at_all_is_inconclusive_not_cleared() -> None:
    v = oracle.evaluate(observe([]), VERIFY)
    assert not v.passed
    assert v.reason is Reason.INCONCLUSIVE


def test_gap_in_observation_breaks_sustained() -> None:
    samples = [s for s in firing_until(5, 45) if not 15 <= s.t - T0 <= 25]
    v = oracle.evaluate(observe(samples), VERIFY)
    assert not v.passed
    assert v.signal("sustained_clear").value is False


def test_vanished_series_or_dead_service_is_not_clear() -> None:
    down = [sample(t, set(), service_up=False) for t in range(70)]
    v = oracle.evaluate(observe(down), VERIFY)
    assert not v.passed
    assert v.reason is Reason.NOT_CLEARED
    gone = [sample(t, set(), target_series_present=False) for t in range(70)]
    assert not oracle.evaluate(observe(gone), VERIFY).passed


def test_missing_load_telemetry_is_not_clear() -> None:
    v = oracle.evaluate(observe([sample(t, set(), load=None) for t in range(70)]), VERIFY)
    assert not v.passed
    assert v.reason is Reason.INCONCLUSIVE


@pytest.mark.parametrize(
    "load",
    [
        LoadStats(target_rate=50, achieved_rate=20, dropped_ratio=0.0, success_ratio=1.0),
        LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.3, success_ratio=1.0),
        LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.0, success_ratio=0.4),
        LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.0, success_ratio=None),
    ],
    ids=["shed", "dropped", "errors-as-fast-responses", "no-responses"],
)
def test_clear_only_counts_while_load_is_delivered(load: LoadStats) -> None:
    samples = [sample(t, set(), load=load) for t in range(70)]
    v = oracle.evaluate(observe(samples), VERIFY)
    assert not v.passed
    assert v.reason is Reason.LOAD_NOT_DELIVERED
    assert v.signal("alert_cleared").value is False


def test_new_alert_after_fix_costs_its_weight_and_is_named() -> None:
    samples = firing_until(3, 40, extra={t: {"CatalogErrorRateHigh"} for t in range(20, 41)})
    v = oracle.evaluate(observe(samples), VERIFY)
    assert v.new_alerts == ["CatalogErrorRateHigh"]
    assert v.signal("no_new_alerts").credit == 0.0
    # Cleared fast and held: 0.25 + 0.35 + 0.20 + 0.095 = 0.895 still passes; the bar decides.
    assert v.passed
    slow = firing_until(40, 75, extra={t: {"CatalogErrorRateHigh"} for t in range(50, 76)})
    v2 = oracle.evaluate(observe(slow), VERIFY)
    assert not v2.passed
    assert v2.reason is Reason.NEW_ALERTS


def test_alert_already_firing_before_the_fix_is_not_new() -> None:
    samples = firing_until(3, 40, extra={t: {"CatalogDown"} for t in range(0, 5)})
    v = oracle.evaluate(observe(samples, before=frozenset({TARGET, "CatalogDown"})), VERIFY)
    assert v.new_alerts == []


def test_alert_pending_at_redeploy_that_fires_after_is_the_old_builds() -> None:
    # Seen in CI: the regressed build's timeouts put CatalogErrorRateHigh in pending just
    # before the redeploy; its `for: 5s` ran out after it. The episode is the old build's.
    err = "CatalogErrorRateHigh"
    samples = [
        sample(
            t,
            ({TARGET} if t < 12 else set()) | ({err} if 3 <= t < 12 else set()),
            pending=frozenset({err}) if t < 3 else frozenset(),
        )
        for t in range(0, 75)
    ]
    v = oracle.evaluate(observe(samples, before=frozenset({TARGET, err})), VERIFY)
    assert v.new_alerts == []
    assert v.signal("no_new_alerts").value is True
    # The same alert after its episode ended (here: a fresh one at +40s) is new.
    again = [sample(t, {err}) if 40 <= t < 50 else s for t, s in enumerate(samples)]
    v2 = oracle.evaluate(observe(again, before=frozenset({TARGET, err})), VERIFY)
    assert v2.new_alerts == [err]
    # Without the pending episode before the redeploy, the first firing came and went while
    # the service recovered (before the target cleared at +12s): the incident's too.
    v3 = oracle.evaluate(observe(samples, before=frozenset({TARGET})), VERIFY)
    assert v3.new_alerts == []


ROUTE = "PricingRouteLatencyHigh"


def _recovery_page(until: int, end: int = 60) -> list[AlertSample]:
    """Seen in CI on configuration-retry-storm's reference fix, handed off the instant the
    target fired: a per-route page over a 30s window (the target's is 10s) reads the storm's
    latency late. It goes pending 5s after the redeploy, fires, and outlasts the target's
    clear at +22s by as long as its window still holds the storm."""
    return [
        sample(
            t,
            ({TARGET} if t < 22 else set()) | ({ROUTE} if 15 <= t < until else set()),
            pending=frozenset({ROUTE}) if 5 <= t < 15 else frozenset(),
            pages=frozenset({ROUTE}),
        )
        for t in range(end + 1)
    ]


def test_a_page_that_comes_and_goes_while_the_service_recovers_is_the_incidents() -> None:
    v = oracle.evaluate(observe(_recovery_page(until=42)), VERIFY)
    assert v.passed, v.message
    assert v.new_alerts == []
    assert v.signal("no_new_alerts").value is True


def test_a_page_set_off_in_the_recovery_that_stays_is_the_fixs() -> None:
    # still firing once the clear budget (60s) is spent
    long = oracle.evaluate(observe(_recovery_page(until=70, end=80)), VERIFY)
    assert not long.passed
    assert long.reason is Reason.NEW_ALERTS
    assert long.new_alerts == [ROUTE]
    # still firing when the watch ends, before the budget is spent
    short = oracle.evaluate(observe(_recovery_page(until=60, end=55)), VERIFY)
    assert short.reason is Reason.NEW_ALERTS, short.message
    assert short.new_alerts == [ROUTE]


def test_clear_after_budget_does_not_count() -> None:
    v = oracle.evaluate(observe(firing_until(61, 100)), VERIFY)
    assert not v.passed
    assert v.reason is Reason.NOT_CLEARED


def test_window_complete_stops_on_refire_and_after_window() -> None:
    samples = firing_until(5, 10)
    obs = observe(samples)
    assert not oracle.window_complete(obs, VERIFY, T0 + 10)
    assert oracle.window_complete(observe(firing_until(5, 36)), VERIFY, T0 + 36)
    refired = [*samples, sample(11, {TARGET})]
    assert oracle.window_complete(observe(refired), VERIFY, T0 + 11)
    assert oracle.window_complete(observe(firing_until(100, 61)), VERIFY, T0 + 61)


def _broken_elsewhere(end: int) -> list[AlertSample]:
    """The target clears at +3s; another route's page goes pending at +15s and fires from
    +20s (the fix broke a part of the service the target's alert does not read)."""
    return [
        sample(
            t,
            ({TARGET} if t < 3 else set()) | ({ROUTE} if t >= 20 else set()),
            pending=frozenset({ROUTE}) if 15 <= t < 20 else frozenset(),
            pages=frozenset({ROUTE}) if t >= 20 else frozenset(),
        )
        for t in range(end + 1)
    ]


def test_a_page_charged_to_the_fix_ends_the_watch_with_new_alerts() -> None:
    # pending is not yet a page: the watch goes on
    assert not oracle.window_complete(observe(_broken_elsewhere(19)), VERIFY, T0 + 19)
    # the page fired after the target cleared: nothing later can undo it
    assert oracle.window_complete(observe(_broken_elsewhere(20)), VERIFY, T0 + 20)
    v = oracle.evaluate(observe(_broken_elsewhere(20)), VERIFY)
    assert not v.passed
    assert v.reason is Reason.NEW_ALERTS, v.message
    assert v.new_alerts == [ROUTE]
    assert ROUTE in v.message
    assert "the watch stopped at +17s" in v.message
    # the window was not watched to its end: no credit for it
    assert v.signal("sustained_clear").value is False
    # watched to the end, the same fix fails the same way and keeps the window's credit
    full = oracle.evaluate(observe(_broken_elsewhere(40)), VERIFY)
    assert not full.passed
    assert full.reason is Reason.NEW_ALERTS
    assert full.signal("sustained_clear").value is True
    assert v.score < full.score  # a page fails the run above the bar too (fail closed)


def test_a_page_left_from_the_recovery_does_not_end_the_watch_while_it_may_still_end() -> None:
    # Fired in the recovery and still firing at the latest sample: charged only if it
    # outlasts the clear budget or the watch (test above); the watch goes on.
    samples = _recovery_page(until=42, end=30)
    assert not oracle.window_complete(observe(samples), VERIFY, T0 + 30)
    # once past the clear budget it is the fix's
    samples = _recovery_page(until=70, end=61)
    assert oracle.window_complete(observe(samples), VERIFY, T0 + 61)
    # A watch cut short (a harness fault) with only such a page at its end stays
    # Inconclusive: the page might still have ended.
    cut = oracle.evaluate(observe(_recovery_page(until=42, end=30)), VERIFY)
    assert cut.reason is Reason.INCONCLUSIVE, cut.message


def test_verdict_recomputes_from_its_json() -> None:
    obs = observe(firing_until(8, 45))
    again = oracle.VerifyObservations.model_validate_json(obs.model_dump_json())
    assert oracle.evaluate(again, VERIFY) == oracle.evaluate(obs, VERIFY)


def test_weights_must_sum_to_one() -> None:
    with pytest.raises(ValidationError, match=r"sum to 1\.0"):
        Weights(ci_green=0.5)


def _with_contention(
    samples: list[AlertSample], outside: float, wait: float = 1.0
) -> list[AlertSample]:
    return [s.model_copy(update={"outside_cpu": outside, "cpu_wait": wait}) for s in samples]


def test_a_failure_while_other_work_starves_the_run_is_inconclusive() -> None:
    never = [sample(t, {TARGET}) for t in range(0, 91)]
    calm = oracle.evaluate(observe(_with_contention(never, 0.05, 0.05)), VERIFY)
    busy = oracle.evaluate(observe(_with_contention(never, 0.45, 1.2)), VERIFY)
    assert calm.reason is Reason.NOT_CLEARED
    assert busy.reason is Reason.INCONCLUSIVE
    assert not busy.passed
    assert "45% of the machine's CPU outside it" in busy.message
    assert "waiting 1.20 s/s" in busy.message
    assert "NotCleared" in busy.message
    # the signals stay as measured: nothing is credited for the excuse
    assert busy.signals == calm.signals
    assert busy.score == calm.score


def test_starvation_needs_both_outside_work_and_waiting() -> None:
    never = [sample(t, {TARGET}) for t in range(0, 91)]
    # a patch that burns more CPUs than there are starves itself: outside stays low
    self_starved = _with_contention(never, 0.02, 3.0)
    assert oracle.evaluate(observe(self_starved), VERIFY).reason is Reason.NOT_CLEARED
    # others busy, but the run got its CPU: its failure is its own
    not_starved = _with_contention(never, 0.9, 0.1)
    assert oracle.evaluate(observe(not_starved), VERIFY).reason is Reason.NOT_CLEARED


def test_a_refire_under_contention_is_inconclusive_and_at_the_bars_is_not() -> None:
    refire = firing_until(5, 60, extra={20: {TARGET}})
    assert oracle.evaluate(observe(refire), VERIFY).reason is Reason.REFIRED
    at_bars = _with_contention(refire, oracle.MIN_OUTSIDE_CPU, oracle.MAX_CPU_WAIT)
    assert oracle.evaluate(observe(at_bars), VERIFY).reason is Reason.REFIRED
    over = _with_contention(refire, oracle.MIN_OUTSIDE_CPU + 0.01, oracle.MAX_CPU_WAIT + 0.01)
    assert oracle.evaluate(observe(over), VERIFY).reason is Reason.INCONCLUSIVE


def test_contention_never_turns_a_pass_or_a_red_ci_into_anything_else() -> None:
    passing = _with_contention(firing_until(12, 12 + 31), 0.95, 3.0)
    assert oracle.evaluate(observe(passing), VERIFY).reason is Reason.PASSED
    red = CIResult(status=CIStatus.RED, reason="tests failed")
    assert oracle.evaluate(observe(passing, ci=red), VERIFY).reason is Reason.CI_RED
    unmeasured = [sample(t, {TARGET}) for t in range(0, 91)]  # the operator: not measured
    assert oracle.evaluate(observe(unmeasured), VERIFY).reason is Reason.NOT_CLEARED


def test_only_the_verification_window_counts_towards_contention() -> None:
    before = [sample(t, {TARGET}, outside_cpu=1.0, cpu_wait=5.0) for t in range(-30, 0)]
    never = [sample(t, {TARGET}, outside_cpu=0.1, cpu_wait=0.1) for t in range(0, 91)]
    assert oracle.contention(before + never, T0) == (pytest.approx(0.1), pytest.approx(0.1))
    assert oracle.evaluate(observe(before + never), VERIFY).reason is Reason.NOT_CLEARED


@pytest.mark.parametrize(
    ("blind", "named"),
    [
        ({"firing": None}, "Prometheus could not be asked"),
        ({"load": None}, "the load generator's series were missing"),
        ({"probe": ProbeStats(success_ratio=None)}, "the prober's answers could not be read"),
    ],
    ids=["prometheus", "load", "prober"],
)
def test_an_inconclusive_verdict_names_what_the_harness_could_not_see(
    blind: dict[str, object], named: str
) -> None:
    """A harness fault is never the fix's failure, and the verdict says which part of the
    harness went blind: in the window after a clear, and before any clear."""
    probed = {"probe": ProbeStats(success_ratio=1.0)}
    after_clear = firing_until(5, 70)
    after_clear[20] = sample(20, **{**probed, **blind})
    v = oracle.evaluate(observe(after_clear), VERIFY)
    assert v.reason is Reason.INCONCLUSIVE
    assert "harness-fault at +15.0s" in v.message, v.message
    assert named in v.message, v.message
    never = [sample(t, {TARGET}) for t in range(3)] + [
        sample(t, **{**probed, **blind}) for t in range(3, 70)
    ]
    v = oracle.evaluate(observe(never), VERIFY)
    assert v.reason is Reason.INCONCLUSIVE
    assert v.message.startswith("telemetry was missing before any clear was seen"), v.message
    assert named in v.message, v.message
