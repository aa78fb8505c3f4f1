"""The one driver around the pure loop: the action queue, the single background job, the
sampling clock, and turning an action's failure into a loop `Fault`.

A runtime (the local processes, or the operator's cluster objects) implements the actions
of `Runtime` and nothing else; what to do next is always `sreforge.loop.step`'s answer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from sreforge import loop
from sreforge.api.observation import AlertSample
from sreforge.loop import Action, Phase, RunState

# How long the driver sleeps when it has nothing to do (the clock, a job or a poll is next).
IDLE_SECONDS = 0.05
MAX_REASON = 2000


class Stop(Protocol):
    """What stops a driver: a threading.Event, or kopf's daemon-stopped flag wrapped."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class TargetChangedError(Exception):
    """Raised by a runtime's `sample` when what it rolled out was changed by someone else
    while it is verified: the run fails (sreforge.loop.TargetChanged), it is not a fault."""

    def __init__(self, change: str) -> None:
        super().__init__(change)
        self.change = change


class Runtime(Protocol):
    """What a runtime does for the driver. Each action is idempotent (a resumed driver may
    redo one); any exception it raises is a harness fault (the run is Inconclusive)."""

    # Background actions: run one at a time in the driver's job thread.
    def inject(self) -> loop.Event:
        """Swap the regressed build in and start the load; returns Injected."""
        ...

    def hand_off(self) -> loop.Event | None:
        """Give the agent the incident; returns Submitted once a submission is in hand, or
        None when the submission arrives later through `poll`."""
        ...

    def run_ci(self) -> loop.Event:
        """The CI gate on the submission; returns CIFinished."""
        ...

    def deploy(self) -> loop.Event:
        """Roll the patched build out; returns Deployed or DeployFailed."""
        ...

    def restore(self) -> None:
        """Put the baseline (regressed) build back; the driver then reports Restored."""
        ...

    # Inline actions: quick, in the driver's thread.
    def record_verdict(self) -> None:
        """Persist the verdict now in the state (record.json, CR status)."""
        ...

    def reopen(self) -> None:
        """A failed Submission was graded and the incident waits for the next one."""
        ...

    def finish(self) -> None:
        """The run is over."""
        ...

    # The clock and the idle hook.
    def sample(self) -> AlertSample:
        """One look at the firing set and the load (called every sample interval); raises
        TargetChangedError when the rolled-out target was changed while it is verified."""
        ...

    def poll(self) -> loop.Event | None:
        """Called when the driver is idle: an event that arrived from outside, if any."""
        ...

    def stepped(self, before: Phase, event: loop.Event, /) -> None:
        """Called after every step (persist the state, show progress)."""
        ...


_BACKGROUND = {
    Action.INJECT: "inject",
    Action.HAND_OFF: "hand_off",
    Action.RUN_CI: "run_ci",
    Action.DEPLOY: "deploy",
    Action.RESTORE: "restore",
}


def fault(exc: BaseException, prefix: str = "") -> loop.Fault:
    """A harness fault for an action's failure, naming the exception."""
    return loop.Fault(t=time.time(), reason=f"{prefix}{type(exc).__name__}: {exc}"[:MAX_REASON])


class Driver:
    """Drives one run's `RunState` through `loop.step` until it is done or stopped."""

    def __init__(self, state: RunState, runtime: Runtime, name: str = "sreforge") -> None:
        self.state = state
        self.runtime = runtime
        self.queue: deque[Action] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-job")
        self._job: Future[loop.Event | None] | None = None
        self._job_action: Action | None = None
        self._next_sample = 0.0

    def feed(self, event: loop.Event) -> None:
        """Step the loop by one event and queue the actions it asks for."""
        before = self.state.phase
        actions = loop.step(self.state, event)
        self.runtime.stepped(before, event)
        self.queue.extend(actions)

    @property
    def done(self) -> bool:
        return self.state.phase is Phase.DONE and not self.queue and self._job is None

    def run(self, first: loop.Event, stop: Stop | None = None) -> None:
        """Feed `first` (Start, Resumed, or a Fault that ended the run before it began) and
        drive until the run is done or `stop` is set."""
        stop = stop or threading.Event()
        try:
            self.feed(first)
            self._next_sample = time.time()
            while not stop.is_set() and not self.done:
                if self._work():
                    continue
                stop.wait(IDLE_SECONDS)
        finally:
            if self._job is not None:
                self._job.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _work(self) -> bool:
        """Do the next thing there is to do; False when there is nothing right now."""
        if self._job is not None and self._job.done():
            return self._collect()
        if self.queue and (self.queue[0] not in _BACKGROUND or self._job is None):
            self._act(self.queue.popleft())
            return True
        if self.state.phase in loop.SAMPLED_PHASES and time.time() >= self._next_sample:
            self._sample()
            return True
        if self._job is None and not self.queue:
            try:
                event = self.runtime.poll()
            except Exception as exc:  # any failure of an action is a harness fault
                event = fault(exc)
            if event is not None:
                self.feed(event)
                return True
        return False

    def _act(self, action: Action) -> None:
        if action is Action.SAMPLE:
            return  # the clock samples in every sampled phase
        method = _BACKGROUND.get(action)
        if method is not None:
            work: Callable[[], loop.Event | None] = getattr(self.runtime, method)
            self._job, self._job_action = self._pool.submit(work), action
            return
        try:
            match action:
                case Action.RECORD:
                    self.runtime.record_verdict()
                case Action.REOPEN:
                    self.runtime.reopen()
                case Action.FINISH:
                    self.runtime.finish()
        except Exception as exc:  # any failure of an action is a harness fault
            self.feed(fault(exc))

    def _collect(self) -> bool:
        job, action = self._job, self._job_action
        assert job is not None
        self._job = self._job_action = None
        event: loop.Event | None
        try:
            event = job.result()
        except Exception as exc:  # any failure of an action is a harness fault
            event = fault(exc, "restore failed: " if action is Action.RESTORE else "")
        else:
            if action is Action.RESTORE:
                event = loop.Restored(t=time.time())
        if event is not None:
            self.feed(event)
        return True

    def _sample(self) -> None:
        interval = self.state.verify.sample_interval_seconds
        now = time.time()
        # On a fixed cadence; after an idle phase or a look slower than the interval the
        # cadence starts again from now: missed looks are never made up in a burst.
        late = now - self._next_sample >= interval
        self._next_sample = (now if late else self._next_sample) + interval
        try:
            event: loop.Event = loop.Sampled(sample=self.runtime.sample())
        except TargetChangedError as exc:
            event = loop.TargetChanged(t=now, change=exc.change[:MAX_REASON])
        except Exception as exc:  # any failure of an action is a harness fault
            event = fault(exc)
        self.feed(event)
