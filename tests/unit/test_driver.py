"""The one driver around the loop, with a scripted in-memory runtime: no servers.

What the driver owns (the action queue, the single background job, the sampling clock,
an action's failure as a Fault) is checked here once for both runtimes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from sreforge import loop
from sreforge.api import AlertSample, CIResult, CIStatus, LoadStats, Reason, VerifySpec
from sreforge.loop import Phase, RunState
from sreforge.runtime.driver import Driver, TargetChangedError

TARGET = "CatalogLatencyHigh"
LOAD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0, success_ratio=1)


class Scripted:
    """A runtime whose actions are scripted: it fires at once and clears on the redeploy."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.calls: list[str] = []
        self.threads: dict[str, str] = {}
        self.running = 0
        self.max_running = 0
        self.deployed = False
        self.fail: dict[str, Exception] = {}
        self.ci = CIResult(status=CIStatus.GREEN)
        self.hand_off_event: Callable[[], loop.Event | None] = lambda: loop.Submitted(t=time.time())
        self.queued: list[loop.Event] = []
        self.slow_ci = 0.0
        self.lock = threading.Lock()

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        self.threads[name] = threading.current_thread().name
        if name in self.fail:
            raise self.fail[name]

    def _job(self, name: str, event: Callable[[], loop.Event | None]) -> loop.Event | None:
        with self.lock:  # background actions only: never two at once
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            self._enter(name)
            return event()
        finally:
            with self.lock:
                self.running -= 1

    def inject(self) -> loop.Event:
        ev = self._job("inject", lambda: loop.Injected(t=time.time()))
        assert ev is not None
        return ev

    def hand_off(self) -> loop.Event | None:
        return self._job("hand_off", self.hand_off_event)

    def run_ci(self) -> loop.Event:
        def ci() -> loop.Event:
            time.sleep(self.slow_ci)
            return loop.CIFinished(t=time.time(), result=self.ci)

        ev = self._job("run_ci", ci)
        assert ev is not None
        return ev

    def deploy(self) -> loop.Event:
        def go() -> loop.Event:
            self.deployed = True
            return loop.Deployed(t=time.time())

        ev = self._job("deploy", go)
        assert ev is not None
        return ev

    def restore(self) -> None:
        self._job("restore", lambda: None)
        self.deployed = False

    def record_verdict(self) -> None:
        self._enter("record")

    def reopen(self) -> None:
        self._enter("reopen")

    def finish(self) -> None:
        self._enter("finish")

    def sample(self) -> AlertSample:
        if "sample" in self.fail:
            raise self.fail["sample"]
        if "verify" in self.fail and self.state.phase is Phase.VERIFYING:
            raise self.fail["verify"]
        firing = frozenset() if self.deployed else frozenset({TARGET})
        return AlertSample(
            t=time.time(),
            firing=firing,
            load=LOAD,
            target_series_present=True,
            service_up=True,
        )

    def poll(self) -> loop.Event | None:
        if self.queued and self.state.phase is Phase.AWAITING_SUBMISSION:
            return self.queued.pop(0)
        return None

    def stepped(self, _before: Phase, event: loop.Event) -> None:
        self.calls.append(f"step:{event.kind}")


def new_state(**kw: object) -> RunState:
    verify = VerifySpec(
        fire_timeout_seconds=5,
        sustain_seconds=1,
        clear_budget_seconds=3,
        sample_interval_seconds=0.05,
        soak_seconds=(0, 0),
    )
    return RunState(run_id="r", target_alert=TARGET, verify=verify, **kw)  # type: ignore[arg-type]


def drive(rt: Scripted, first: loop.Event | None = None, timeout: float = 10) -> Driver:
    d = Driver(rt.state, rt)
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    try:
        d.run(first or loop.Start(t=time.time()), stop)
    finally:
        timer.cancel()
    assert not stop.is_set(), f"the driver did not finish within {timeout}s: {rt.calls}"
    return d


def actions_of(rt: Scripted) -> list[str]:
    return [c for c in rt.calls if not c.startswith("step:")]


def test_a_run_goes_through_every_action_once_in_order() -> None:
    rt = Scripted(new_state())
    drive(rt)
    assert actions_of(rt) == [
        "inject",
        "hand_off",
        "run_ci",
        "deploy",
        "record",
        "restore",
        "finish",
    ]
    assert rt.state.phase is Phase.DONE
    assert rt.state.verdict is not None
    assert rt.state.verdict.passed, rt.state.verdict.message
    # background actions ran in the job thread, one at a time; inline ones did not
    assert rt.threads["run_ci"].startswith("sreforge-job")
    assert not rt.threads["record"].startswith("sreforge-job")
    assert rt.max_running == 1


def test_an_action_that_raises_is_an_inconclusive_fault() -> None:
    rt = Scripted(new_state())
    rt.fail["deploy"] = OSError("the node is gone")
    drive(rt)
    verdict = rt.state.verdict
    assert verdict is not None
    assert verdict.reason is Reason.INCONCLUSIVE
    assert "OSError: the node is gone" in verdict.message
    assert actions_of(rt)[-3:] == ["record", "restore", "finish"]


def test_a_failed_restore_still_finishes_the_run() -> None:
    rt = Scripted(new_state())
    rt.fail["restore"] = OSError("no API server")
    drive(rt)
    assert rt.state.phase is Phase.DONE
    assert rt.state.fault == "restore failed: OSError: no API server"
    assert actions_of(rt)[-1] == "finish"
    assert rt.state.verdict is not None
    assert rt.state.verdict.passed  # the verdict was recorded before the restore failed


def test_a_sampling_failure_is_a_fault() -> None:
    rt = Scripted(new_state())
    rt.fail["sample"] = RuntimeError("no Prometheus")
    drive(rt)
    assert rt.state.verdict is not None
    assert rt.state.verdict.reason is Reason.INCONCLUSIVE
    assert "hand_off" not in rt.calls


def test_a_target_changed_while_verified_fails_the_run_not_a_fault() -> None:
    rt = Scripted(new_state())
    rt.fail["verify"] = TargetChangedError("Deployment spec.replicas: 1 -> 0")
    drive(rt)
    v = rt.state.verdict
    assert v is not None
    assert (v.passed, v.reason) == (False, Reason.NOT_CLEARED)
    assert "Deployment spec.replicas: 1 -> 0" in v.message
    assert rt.state.fault is None
    assert actions_of(rt)[-3:] == ["record", "restore", "finish"]


def test_restore_waits_for_the_job_in_flight() -> None:
    """A fault while CI runs: the verdict is recorded at once, but the restore (a second
    background action) starts only after the CI job ended, and its late result is stale."""
    rt = Scripted(new_state())
    rt.slow_ci = 0.5
    d = Driver(rt.state, rt)

    def fault_during_ci() -> AlertSample:
        if rt.state.phase is Phase.CI and rt.state.verdict is None:
            raise RuntimeError("prometheus died")
        return Scripted.sample(rt)

    rt.sample = fault_during_ci  # type: ignore[method-assign]
    d.run(loop.Start(t=time.time()))
    acts = actions_of(rt)
    assert sorted(acts) == sorted(["inject", "hand_off", "run_ci", "record", "restore", "finish"])
    assert acts.index("run_ci") < acts.index("restore")
    assert rt.max_running == 1  # the restore did not start beside the CI job
    assert rt.state.ci is None  # the CI result came after the fault: stale
    assert rt.state.verdict is not None
    assert rt.state.verdict.reason is Reason.INCONCLUSIVE


def test_a_submission_from_poll_is_graded() -> None:
    rt = Scripted(new_state())
    rt.hand_off_event = lambda: None  # the operator's hand-off only writes status
    rt.queued = [loop.Submitted(t=time.time())]
    drive(rt)
    assert "step:submitted" in rt.calls
    assert rt.state.verdict is not None
    assert rt.state.verdict.passed


def test_a_failed_submission_rearms_then_the_next_is_graded() -> None:
    rt = Scripted(new_state(cases=None, stop_on_pass=True))
    rt.hand_off_event = lambda: None
    rt.queued = [loop.Submitted(t=time.time()), loop.Submitted(t=time.time())]
    rt.ci = CIResult(status=CIStatus.RED, reason="tests failed")
    first_ci = rt.run_ci

    def red_then_green() -> loop.Event:
        ev = first_ci()
        rt.ci = CIResult(status=CIStatus.GREEN)
        return ev

    rt.run_ci = red_then_green  # type: ignore[method-assign]
    drive(rt)
    acts = actions_of(rt)
    assert acts.count("run_ci") == 2
    assert acts.index("reopen") < len(acts) - 1
    assert acts[-1] == "finish"
    assert rt.state.verdict is not None
    assert rt.state.verdict.passed


def test_resume_redoes_the_persisted_phase_action() -> None:
    st = new_state()
    loop.step(st, loop.Start(t=time.time()))
    loop.step(st, loop.Injected(t=time.time()))
    loop.step(st, loop.Sampled(sample=Scripted(st).sample()))
    loop.step(st, loop.Submitted(t=time.time()))
    assert st.phase is Phase.CI
    rt = Scripted(RunState.model_validate_json(st.model_dump_json()))
    drive(rt, loop.Resumed(t=time.time()))
    assert actions_of(rt)[0] == "run_ci"  # nothing before the phase it died in
    assert rt.state.verdict is not None
    assert rt.state.verdict.passed


def test_stop_leaves_the_state_for_a_resume() -> None:
    rt = Scripted(new_state())
    rt.hand_off_event = lambda: None  # waits for a Submission that never comes
    d = Driver(rt.state, rt)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    d.run(loop.Start(t=time.time()), stop)
    assert rt.state.phase is Phase.AWAITING_SUBMISSION
    assert rt.state.verdict is None


@pytest.mark.parametrize("interval", [0.05, 0.2])
def test_the_clock_keeps_its_cadence_and_never_bursts(interval: float) -> None:
    st = new_state()
    st.verify = st.verify.model_copy(update={"sample_interval_seconds": interval})
    rt = Scripted(st)
    rt.hand_off_event = lambda: None
    times: list[float] = []
    look = rt.sample

    def timed() -> AlertSample:
        times.append(time.monotonic())
        return look()

    rt.sample = timed  # type: ignore[method-assign]
    d = Driver(rt.state, rt)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    d.run(loop.Start(t=time.time()), stop)
    assert len(times) >= 2
    # however late the machine makes a look, never more looks than the cadence allows
    span = times[-1] - times[0]
    assert len(times) <= span / interval + 2, (len(times), span)
