"""The control window (telemetry.control_window): what counts as a quiet healthy build."""

from __future__ import annotations

import threading

from sreforge.telemetry import _read_restarts, control_quiet


def test_a_control_windows_restarts_are_read_again_before_they_count_as_unknown() -> None:
    """One failed API read at the window's start or end is asked again a second later;
    only a count that stays unreadable is None (and then the control is not quiet)."""
    answers: list[int | None] = [None, 2]
    assert _read_restarts(lambda: answers.pop(0), threading.Event()) == 2
    calls: list[None] = []

    def never() -> int | None:
        calls.append(None)
        return None

    assert _read_restarts(never, threading.Event()) is None
    assert len(calls) == 3
    stopped = threading.Event()
    stopped.set()  # the operator stops: no waiting, the window is dropped anyway
    calls.clear()
    assert _read_restarts(never, stopped) is None
    assert len(calls) == 1


def test_a_quiet_control_needs_a_read_prometheus_and_a_read_restart_count() -> None:
    quiet = {"targetFired": False, "pagesFired": [], "restarts": 0}
    assert control_quiet(quiet)
    assert not control_quiet({**quiet, "targetFired": None})
    assert not control_quiet({**quiet, "targetFired": True})
    assert not control_quiet({**quiet, "pagesFired": ["KintoRouteLatencyHigh"]})
    assert not control_quiet({**quiet, "restarts": 1})
    assert not control_quiet({**quiet, "restarts": None})
