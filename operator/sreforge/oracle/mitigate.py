"""The mitigation sub-oracle (v1): did the fix clear the alert and hold it under load?

Pure: its finding can be recomputed from record.json. Missing telemetry is never a clear.

Beyond the seed's v1 weights (docs/oracle.md): a clear counts only while the independent
prober is served too, and a page-severity alert other than the target charged to the fix
(`_charged`: it began after the service recovered, or is still firing once the clear
budget is spent or when the watch ends) fails the run closed (NewAlerts); a ticket-severity
one only costs the no_new_alerts credit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sreforge.api.observation import AlertSample, CIStatus
from sreforge.api.scenario import VerifySpec
from sreforge.api.verdict import Reason, Signal, SignalName
from sreforge.oracle.contract import SubVerdict, VerifyObservations

NAME = "mitigate"

# A hole in the samples longer than this many sample intervals means "not observed".
MAX_GAP_INTERVALS = 5.0
# A behavioural failure observed while the run was starved by other work is not the fix's
# failure: Inconclusive. Starved by other work means both, on average over the verification:
# more than MIN_OUTSIDE_CPU of the machine's CPU went to work outside the run, and the run's
# threads waited, runnable, more than MAX_CPU_WAIT seconds per second for a CPU. (A patch
# that burns CPU burns it inside the run: it may starve itself, but outside stays low; a
# pass under contention stands.)
MIN_OUTSIDE_CPU = 0.25
MAX_CPU_WAIT = 0.5


class SampleState(StrEnum):
    """What one sample says about the target alert, most to least trustworthy."""

    CLEAR = "clear"  # valid telemetry, load delivered, target alert not firing
    FIRING = "firing"  # valid telemetry, target alert firing
    LOAD = "load-not-delivered"  # the service shed, dropped or failed the load
    PROBE = "probe-failing"  # the independent prober is not served: not every client is
    DOWN = "service-down"  # the service's scrape target or the alert's series vanished
    RESTARTED = "restarted"  # the patched service crashed or was killed and restarted
    HARNESS = "harness-fault"  # Prometheus or the load generator could not be observed


def classify(sample: AlertSample, target_alert: str, verify: VerifySpec) -> SampleState:
    """Classify one sample; only CLEAR may ever count towards a clear."""
    if sample.firing is None or sample.load is None:
        return SampleState.HARNESS
    if sample.restarts:  # the counter is reset at each rollout: any restart is the fix's
        return SampleState.RESTARTED
    if target_alert in sample.firing:
        return SampleState.FIRING
    if not sample.target_series_present or not sample.service_up:
        return SampleState.DOWN
    load = sample.load
    if (
        load.target_rate <= 0
        or load.achieved_rate < verify.min_achieved_ratio * load.target_rate
        or load.dropped_ratio > verify.max_dropped_ratio
        or load.success_ratio is None
        or load.success_ratio < verify.min_success_ratio
    ):
        return SampleState.LOAD
    probe = sample.probe
    if probe is not None:  # a run with a prober: its view must hold too
        if probe.success_ratio is None:
            return SampleState.HARNESS
        if probe.success_ratio < verify.min_success_ratio:
            return SampleState.PROBE
    return SampleState.CLEAR


def harness_gap(sample: AlertSample) -> str:
    """What a HARNESS sample could not observe, for the verdict's message: an Inconclusive
    verdict says which part of the harness failed, so it can be told from the fix."""
    if sample.firing is None:
        return "Prometheus could not be asked for the alerts or the service's series"
    if sample.load is None:
        return "the load generator's series were missing from Prometheus"
    return "the prober's answers could not be read from Prometheus (no series, or none done)"


_STATE_REASON = {
    SampleState.FIRING: Reason.REFIRED,
    SampleState.LOAD: Reason.LOAD_NOT_DELIVERED,
    SampleState.PROBE: Reason.NOT_CLEARED,
    SampleState.DOWN: Reason.NOT_CLEARED,
    SampleState.RESTARTED: Reason.NOT_CLEARED,
    SampleState.HARNESS: Reason.INCONCLUSIVE,
}


def _charged(
    obs: VerifyObservations,
    verify: VerifySpec,
    cleared_at: float | None,
    *,
    watch_ended: bool = True,
) -> tuple[list[str], list[str]]:
    """The alerts other than the target charged to the fix, and the page-severity ones
    among them, in order of first charge. `obs.samples` are the samples from the redeploy.

    An episode is the run of samples in which an alert is pending or firing; samples with
    unknown alerts neither end nor start one. One active at the redeploy (an old-build
    condition still in its rule's `for` or rate window) is inherited while it lasts. The
    service recovers from the redeploy until the target clears (or, if it never does, until
    the clear budget is spent). An alert is charged to the fix when it fires:
      - in an episode that began after the recovery (the fix broke something later);
      - in an episode that began during the recovery and is still firing once the clear
        budget is spent or at the last sample watched: one that came and went while the
        service recovered is the incident's, often an alert over a longer window than the
        target's that reads the same symptom late (it made the reference fix of
        configuration-retry-storm fail when its hand-off was instant);
      - a page, inherited, still firing once the clear budget is spent (an old-build page
        the fix left firing: users still hurt).
    With `watch_ended` False (the watch goes on) the last sample is no more than the
    latest: only what no later sample can undo is charged.
    """
    if obs.redeployed_at is None:
        return [], []
    budget_end = obs.redeployed_at + verify.clear_budget_seconds
    recovered = cleared_at if cleared_at is not None else budget_end
    known = [s for s in obs.samples if s.firing is not None]
    inherited = set(obs.active_before_redeploy)
    began: dict[str, float] = {}  # alert -> start of its current episode after the redeploy
    charged: list[str] = []
    pages: list[str] = []
    for i, s in enumerate(known):
        assert s.firing is not None
        active = s.firing | s.pending
        inherited &= active
        for name in [n for n in began if n not in active]:
            del began[name]
        for name in active - inherited:
            began.setdefault(name, s.t)
        last = watch_ended and i == len(known) - 1
        for name in sorted(s.firing - {obs.target_alert}):
            page = name in s.pages
            if name in inherited:
                due = page and s.t > budget_end
            else:
                due = began[name] > recovered or s.t > budget_end or last
            if not due:
                continue
            if name not in charged:
                charged.append(name)
            if page and name not in pages:
                pages.append(name)
    return charged, pages


def _signals(
    verify: VerifySpec,
    *,
    ci_green: bool,
    cleared: bool,
    sustained: bool,
    ttc: float | None,
    new_alerts: Sequence[str],
    details: dict[SignalName, str],
    observed: bool = True,
) -> list[Signal]:
    w = verify.weights
    ttc_credit = 0.0
    if cleared and ttc is not None:
        ttc_credit = max(0.0, min(1.0, 1.0 - ttc / verify.clear_budget_seconds))
    # Nothing observed after a fix (fail-closed paths) earns nothing for "no new alerts".
    no_new = not new_alerts and observed
    return [
        Signal(
            name=SignalName.CI_GREEN,
            value=ci_green,
            credit=float(ci_green),
            weight=w.ci_green,
            detail=details.get(SignalName.CI_GREEN, ""),
        ),
        Signal(
            name=SignalName.ALERT_CLEARED,
            value=cleared,
            credit=float(cleared),
            weight=w.alert_cleared,
            detail=details.get(SignalName.ALERT_CLEARED, ""),
        ),
        Signal(
            name=SignalName.SUSTAINED_CLEAR,
            value=sustained,
            credit=float(sustained),
            weight=w.sustained_clear,
            detail=details.get(SignalName.SUSTAINED_CLEAR, ""),
        ),
        Signal(
            name=SignalName.TIME_TO_CLEAR,
            value=ttc,
            credit=round(ttc_credit, 4),
            weight=w.time_to_clear,
            detail=details.get(SignalName.TIME_TO_CLEAR, ""),
        ),
        Signal(
            name=SignalName.NO_NEW_ALERTS,
            value=no_new,
            credit=float(no_new),
            weight=w.no_new_alerts,
            detail=", ".join(new_alerts)
            if new_alerts
            else ("no other alert went to firing" if observed else "not observed"),
        ),
    ]


def _finding(
    signals: list[Signal],
    reason: Reason | None,
    message: str,
    *,
    time_to_clear_seconds: float | None = None,
    cleared_at: float | None = None,
    new_alerts: Sequence[str] = (),
) -> SubVerdict:
    return SubVerdict(
        oracle=NAME,
        signals=signals,
        reason=reason,
        message=message,
        shortfall=Reason.NEW_ALERTS if new_alerts else Reason.NOT_CLEARED,
        time_to_clear_seconds=time_to_clear_seconds,
        cleared_at=cleared_at,
        new_alerts=list(new_alerts),
    )


def contention(samples: Sequence[AlertSample], since: float) -> tuple[float, float] | None:
    """(mean outside CPU share, mean CPU wait) of the samples from `since` that measured
    them, else None."""
    seen = [
        (s.outside_cpu, s.cpu_wait)
        for s in samples
        if s.t >= since and s.outside_cpu is not None and s.cpu_wait is not None
    ]
    if not seen:
        return None
    return (
        round(sum(o for o, _ in seen) / len(seen), 4),
        round(sum(w for _, w in seen) / len(seen), 4),
    )


def _starved(obs: VerifyObservations) -> str | None:
    """Why a behavioural failure of this run is not the fix's: other work starved it.

    Starved means both, on average over the verification: more than MIN_OUTSIDE_CPU of the
    machine's CPU outside the run and its threads waiting more than MAX_CPU_WAIT s/s.
    """
    if obs.redeployed_at is None:
        return None
    measured = contention(obs.samples, obs.redeployed_at)
    if measured is None:
        return None
    outside, wait = measured
    if outside <= MIN_OUTSIDE_CPU or wait <= MAX_CPU_WAIT:
        return None
    return (
        f"other work starved the run ({outside:.0%} of the machine's CPU outside it, its "
        f"threads waiting {wait:.2f} s/s for a CPU, on average): not the fix's failure, "
        "rerun on a quieter machine"
    )


@dataclass(frozen=True)
class MitigationOracle:
    """The mitigation sub-oracle (DESIGN.md, the mitigation oracle v1)."""

    verify: VerifySpec

    @property
    def name(self) -> str:
        return NAME

    def evaluate(self, obs: VerifyObservations) -> SubVerdict:
        """The fix's signals and the fail-closed reason, if any.

        A behavioural failure while the run was starved by other work is excused (the
        compound makes it Inconclusive): the signals stay as measured.
        """
        finding = _evaluate(obs, self.verify)
        return finding.model_copy(update={"excuse": _starved(obs)})


def _evaluate(obs: VerifyObservations, verify: VerifySpec) -> SubVerdict:
    details: dict[SignalName, str] = {}
    ci_green = obs.ci.status is CIStatus.GREEN
    if not ci_green:
        reason = {
            CIStatus.REJECTED: Reason.PATCH_REJECTED,
            CIStatus.RED: Reason.CI_RED,
            CIStatus.ERROR: Reason.INCONCLUSIVE,
        }[obs.ci.status]
        details[SignalName.CI_GREEN] = obs.ci.reason
        signals = _signals(
            verify,
            ci_green=False,
            cleared=False,
            sustained=False,
            ttc=None,
            new_alerts=[],
            details=details,
            observed=False,
        )
        return _finding(signals, reason, f"CI {obs.ci.status.value}: {obs.ci.reason}")
    details[SignalName.CI_GREEN] = "build and tests passed"
    if obs.redeployed_at is None:
        signals = _signals(
            verify,
            ci_green=True,
            cleared=False,
            sustained=False,
            ttc=None,
            new_alerts=[],
            details=details,
            observed=False,
        )
        return _finding(signals, Reason.NO_REDEPLOY, "the fixed build was not redeployed")

    t0 = obs.redeployed_at
    samples = sorted((s for s in obs.samples if s.t >= t0), key=lambda s: s.t)
    states = [classify(s, obs.target_alert, verify) for s in samples]
    max_gap = MAX_GAP_INTERVALS * verify.sample_interval_seconds
    budget_end = t0 + verify.clear_budget_seconds

    # Phase 1: the first clear sample within the clear budget.
    first = next(
        (
            i
            for i, (s, st) in enumerate(zip(samples, states, strict=True))
            if st is SampleState.CLEAR and s.t <= budget_end
        ),
        None,
    )
    cleared_at = samples[first].t if first is not None else None
    watched = obs.model_copy(update={"samples": samples})
    new_alerts, pages = _charged(watched, verify, cleared_at)
    if first is None:
        before = [st for s, st in zip(samples, states, strict=True) if s.t <= budget_end]
        if SampleState.HARNESS in before or not before:
            reason, msg = Reason.INCONCLUSIVE, "telemetry was missing before any clear was seen"
            blind = next(
                (s for s, st in zip(samples, states, strict=True) if st is SampleState.HARNESS),
                None,
            )
            if blind is not None:
                msg += f": {harness_gap(blind)}"
        elif SampleState.PROBE in before and SampleState.LOAD not in before:
            reason = Reason.NOT_CLEARED
            msg = (
                f"{obs.target_alert} was only ever absent while the independent prober's "
                "answers failed: the service does not serve every client"
            )
        elif SampleState.LOAD in before:
            reason = Reason.LOAD_NOT_DELIVERED
            msg = (
                f"{obs.target_alert} was only ever absent while the load was not delivered "
                "(dropped, shed or failed requests)"
            )
        elif SampleState.RESTARTED in before:
            reason = Reason.NOT_CLEARED
            msg = _restarted(samples)
        elif SampleState.DOWN in before:
            reason = Reason.NOT_CLEARED
            msg = f"the service or {obs.target_alert}'s series vanished: never counted as a clear"
        else:
            reason = Reason.NOT_CLEARED
            msg = f"{obs.target_alert} still firing {verify.clear_budget_seconds}s after redeploy"
        details[SignalName.ALERT_CLEARED] = msg
        signals = _signals(
            verify,
            ci_green=True,
            cleared=False,
            sustained=False,
            ttc=None,
            new_alerts=new_alerts,
            details=details,
        )
        return _finding(signals, reason, msg, new_alerts=new_alerts)

    assert cleared_at is not None
    ttc = round(cleared_at - t0, 3)
    details[SignalName.ALERT_CLEARED] = f"absent under delivered load {ttc:.1f}s after redeploy"
    details[SignalName.TIME_TO_CLEAR] = f"{ttc:.1f}s of a {verify.clear_budget_seconds}s budget"

    # Phase 2: every sample through the sustained window and the soak after it is clear,
    # with no unobserved hole.
    soak = obs.soak_seconds
    window_end = cleared_at + verify.sustain_seconds + soak
    sustained, fail_reason, msg = True, None, ""
    last_t = cleared_at
    for s, st in zip(samples[first:], states[first:], strict=True):
        if s.t > window_end:
            break
        if s.t - last_t > max_gap:
            sustained, fail_reason = False, Reason.INCONCLUSIVE
            msg = f"no observation for {s.t - last_t:.1f}s at +{last_t - cleared_at:.0f}s"
            break
        last_t = s.t
        if st is not SampleState.CLEAR:
            sustained, fail_reason = False, _STATE_REASON[st]
            at = s.t - cleared_at
            msg = f"{st.value} at +{at:.1f}s, {_when(at, verify.sustain_seconds, soak)}"
            if st is SampleState.HARNESS:
                msg += f": {harness_gap(s)}"
            if st is SampleState.RESTARTED:
                msg = f"{_restarted(samples)} (+{at:.1f}s after the clear)"
            break
    else:
        if window_end - last_t > max_gap:
            sustained, fail_reason = False, Reason.INCONCLUSIVE
            msg = (
                f"the {_watched(verify.sustain_seconds, soak)} was observed only to "
                f"+{last_t - cleared_at:.0f}s"
            )
            # stopped at a page no later sample could undo (window_complete), not a fault
            if _charged(watched, verify, cleared_at, watch_ended=False)[1]:
                fail_reason = None
                msg = f"the watch stopped at +{last_t - cleared_at:.0f}s, when the page fired"
    if sustained:
        msg = f"clear for the whole {_watched(verify.sustain_seconds, soak)} under load"
    if fail_reason is None and pages:
        # fail closed: user-facing breakage elsewhere in the service (docs/oracle.md)
        fail_reason = Reason.NEW_ALERTS
        msg = (
            f"page-severity alert {', '.join(pages)} fired after the redeploy: the fix "
            "breaks or leaves broken another part of the service"
            + ("" if sustained else f" ({msg})")
        )
    details[SignalName.SUSTAINED_CLEAR] = msg
    signals = _signals(
        verify,
        ci_green=True,
        cleared=True,
        sustained=sustained,
        ttc=ttc,
        new_alerts=new_alerts,
        details=details,
    )
    return _finding(
        signals,
        fail_reason,
        msg if fail_reason else "the fix held under load",
        time_to_clear_seconds=ttc,
        cleared_at=cleared_at,
        new_alerts=new_alerts,
    )


def _watched(window: float, soak: float) -> str:
    if soak <= 0:
        return f"{window:g}s window"
    return f"{window:g}s window and the {soak:g}s soak after it"


def _when(at: float, window: float, soak: float) -> str:
    """Where `at` seconds after the clear falls: in the window or in the soak."""
    if at <= window or soak <= 0:
        return f"in the {window:g}s window"
    return f"{at - window:.0f}s into the {soak:g}s soak after the {window:g}s window"


def _restarted(samples: Sequence[AlertSample]) -> str:
    most = max((s.restarts or 0 for s in samples), default=0)
    return (
        f"the patched service restarted {most} time{'s' if most != 1 else ''} after the "
        "rollout: a fix must stay up under load"
    )


def window_complete(obs: VerifyObservations, verify: VerifySpec, now: float) -> bool:
    """True when more observation cannot change the verdict (the loop may stop sampling)."""
    if obs.redeployed_at is None:
        return True
    t0 = obs.redeployed_at
    samples = [s for s in obs.samples if s.t >= t0]
    states = [classify(s, obs.target_alert, verify) for s in samples]
    first = next(
        (
            s.t
            for s, st in zip(samples, states, strict=True)
            if st is SampleState.CLEAR and s.t <= t0 + verify.clear_budget_seconds
        ),
        None,
    )
    if first is None:
        return now > t0 + verify.clear_budget_seconds
    if now >= first + verify.sustain_seconds + obs.soak_seconds:
        return True
    # A refire or a failed sample inside the window decides the verdict already, and so
    # does a page charged to the fix (fail closed: NewAlerts whatever follows).
    if any(
        st is not SampleState.CLEAR for s, st in zip(samples, states, strict=True) if s.t > first
    ):
        return True
    watched = obs.model_copy(update={"samples": samples})
    _, pages = _charged(watched, verify, first, watch_ended=False)
    return bool(pages)
