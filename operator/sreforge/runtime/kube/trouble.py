"""Why pods do not start, and whose fault it is. Pure: reads pods, Deployments and Events as
the API serves them (plain dicts, camelCase), talks to nothing.

A pod the harness made that cannot start (its image missing, its config, quota, no node
to run it, the harness's own container killed for memory) is a harness fault: the run is
Inconclusive with the pod's own reason, never the agent's failure. What the agent's code
does (a patched service that crashes or runs out of memory, red tests) stays the agent's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# A container waiting for one of these cannot start for want of its image or its config.
HARNESS_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# Troubles no retry can mend: a fault at once, without the grace period.
FINAL = frozenset({"ErrImageNeverPull", "InvalidImageName"})
# How long another harness trouble must last before it ends the wait (a pull may be
# retried, a node may come, quota may free up).
GRACE_SECONDS = 20.0


@dataclass(frozen=True)
class Trouble:
    """One reason a pod is not running: where, the reason Kubernetes gives, its message,
    and whether it is the harness's (else the code under test's)."""

    where: str
    reason: str
    message: str
    harness: bool

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}{': ' + self.message if self.message else ''}"

    @property
    def key(self) -> str:
        return f"{self.where}/{self.reason}"


def _statuses(pod: dict[str, Any]) -> Iterable[dict[str, Any]]:
    st = pod.get("status") or {}
    return [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]


def pod_troubles(pod: dict[str, Any], agent_containers: frozenset[str]) -> list[Trouble]:
    """What keeps this pod from running. `agent_containers` run the code under test: their
    crashes and OOM kills are that code's, not the harness's."""
    name = (pod.get("metadata") or {}).get("name", "?")
    out: list[Trouble] = []
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            out.append(
                Trouble(
                    f"pod {name}", c.get("reason") or "Unschedulable", c.get("message") or "", True
                )
            )
    for cs in _statuses(pod):
        box = f"pod {name} container {cs.get('name')}"
        ours = cs.get("name") not in agent_containers
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        term = state.get("terminated") or {}
        if waiting.get("reason") in HARNESS_WAITING:
            out.append(Trouble(box, waiting["reason"], waiting.get("message") or "", True))
        elif "OOMKilled" in (term.get("reason"), last.get("reason")):
            out.append(Trouble(box, "OOMKilled", "killed for want of memory", ours))
        elif waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            out.append(Trouble(box, waiting["reason"], waiting.get("message") or "", False))
        elif term.get("exitCode"):
            out.append(Trouble(box, f"exited {term['exitCode']}", term.get("message") or "", False))
    return out


def deployment_troubles(dep: dict[str, Any]) -> list[Trouble]:
    """The Deployment's own: its ReplicaSet could not create pods (quota, admission)."""
    name = (dep.get("metadata") or {}).get("name", "?")
    return [
        Trouble(
            f"Deployment {name}", c.get("reason") or "FailedCreate", c.get("message") or "", True
        )
        for c in (dep.get("status") or {}).get("conditions") or []
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
    ]


def failed_create(events: list[dict[str, Any]], what: str) -> list[Trouble]:
    """A controller's FailedCreate Events for `what` (a Job whose pods quota forbids)."""
    return [
        Trouble(what, "FailedCreate", e.get("message") or "", True)
        for e in events
        if e.get("reason") == "FailedCreate"
    ]


class Watch:
    """Harness troubles seen over successive looks: `stuck` is one that is final or has
    lasted GRACE_SECONDS, the moment to stop waiting and call it a harness fault."""

    def __init__(self, grace: float = GRACE_SECONDS) -> None:
        self.grace = grace
        self._since: dict[str, float] = {}

    def stuck(self, troubles: list[Trouble], now: float) -> Trouble | None:
        harness = [t for t in troubles if t.harness]
        self._since = {t.key: self._since.get(t.key, now) for t in harness}
        for t in harness:
            if t.reason in FINAL or now - self._since[t.key] >= self.grace:
                return t
        return None
