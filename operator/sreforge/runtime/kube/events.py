"""The operator's domain Events (core/v1): an Incident's phase changes and verdict, a
Submission's verdict or refusal, as `kubectl describe` and `kubectl get events` show them.
Pure: the Event bodies; `Kube.post_event` sends them."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import Any

from sreforge.api.resources import API_VERSION
from sreforge.api.verdict import Verdict
from sreforge.loop import Phase, RunState

COMPONENT = "sreforge-operator"
REPORTING_CONTROLLER = "sreforge.dev/operator"
MAX_MESSAGE = 1024  # what the Events API keeps of a message
NORMAL, WARNING = "Normal", "Warning"


def reporting_instance() -> str:
    """This operator process: the pod's name in a cluster (its hostname), else the host."""
    return (os.environ.get("HOSTNAME") or socket.gethostname())[:128]


def event(
    obj: dict[str, Any],
    type_: str,
    reason: str,
    message: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about `obj` (an Incident or a Submission as the API served it)."""
    meta = obj["metadata"]
    ts = (now or datetime.now(tz=UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion") or API_VERSION,
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": REPORTING_CONTROLLER,
        "reportingInstance": reporting_instance(),
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


def phase_message(st: RunState, target: str, submission: str | None) -> str:
    """What entering the run's current phase means, in one sentence."""
    sub = f"Submission {submission}" if submission else "the Submission"
    return {
        Phase.PENDING: "the run is created",
        Phase.INJECTING: f"injecting the regressed build into {target}",
        Phase.AWAITING_FIRE: (
            f"the regressed build runs under load: waiting up to "
            f"{st.verify.fire_timeout_seconds}s for {st.target_alert}"
            if st.graded == 0
            else f"the regressed build is back: waiting for {st.target_alert} to fire again"
        ),
        Phase.AWAITING_SUBMISSION: f"{st.target_alert} fires: handed off, waiting for a Submission",
        Phase.CI: f"grading {sub}: the CI gate runs",
        Phase.DEPLOYING: f"CI green: rolling out the patched build of {sub}",
        Phase.VERIFYING: "the patched build runs: the oracle observes it under load",
        Phase.RESTORING: "the verdict is recorded: restoring the regressed build",
        Phase.DONE: "the run is over",
    }[st.phase]


def verdict_type(verdict: Verdict) -> str:
    """Warning for every verdict but a pass."""
    return NORMAL if verdict.passed else WARNING


def verdict_message(verdict: Verdict, submission: str | None) -> str:
    who = f"Submission {submission}" if submission else "the run"
    return f"{who}: score {verdict.score:.2f}, {verdict.message}"
