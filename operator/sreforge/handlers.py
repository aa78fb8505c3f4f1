"""The kopf handlers of the SREForge operator (kopf is imported here and nowhere else).

    kopf run --standalone --all-namespaces -m sreforge.handlers     (or: sreforge operator)

Thin by design: each Incident gets a daemon that runs `runtime.kube.incident.IncidentRun`
(the closed loop, resumed from `status.loop` after a restart); a new Submission is admitted
by `runtime.kube.intake.admit_submission` (refusals, the in-process patch vetting, the queue).
With SREFORGE_MCP_PORT set, each handed-off Incident's MCP tools are served on that port
(`runtime.kube.mcp`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import kopf
from pydantic import ValidationError

from sreforge.api.resources import GROUP, INCIDENT_PLURAL, SUBMISSION_PLURAL, VERSION
from sreforge.api.scenario import ScenarioError
from sreforge.runtime.kube import events, mcp, metrics
from sreforge.runtime.kube.client import Kube, KubeError
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.runtime.kube.incident import IncidentRun, restore_on_delete
from sreforge.runtime.kube.intake import admit_submission
from sreforge.runtime.kube.status import condition, refused

_kube: Kube | None = None
_lock = threading.Lock()
# Incidents (by uid) whose daemon is driving their run in this process: deleting one waits
# for its daemon to stop before giving the target back.
_driving: set[str] = set()
_serving_metrics = False
_serving_tools = False


def kube() -> Kube:
    global _kube  # noqa: PLW0603 (one API client per operator process)
    with _lock:
        if _kube is None:
            _kube = Kube()
        return _kube


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Handler progress and diff-bases go to annotations: status belongs to the schema.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.enabled = True
    settings.watching.server_timeout = 60
    # Each Incident's daemon is synchronous and holds one executor thread for its whole run,
    # and kopf's default pool is min(32, CPUs + 4) threads: on 2 CPUs the 7th Incident never
    # started and Submission handlers queued behind the daemons (the 20-Incident benchmark
    # injected 6 of 20). Size the pool for the Incidents one operator may run at once.
    max_incidents = int(os.environ.get("SREFORGE_MAX_INCIDENTS", "64"))
    settings.execution.max_workers = max_incidents + 8  # + Submission and other sync handlers
    if not OperatorConfig.from_env().soak_secret_from_env:
        logging.getLogger("sreforge").warning(
            "SREFORGE_SOAK_SECRET is not set: soak lengths are drawn from a secret of this "
            "process, and an Incident resumed by a restarted operator draws its soak anew"
        )
    global _serving_metrics  # noqa: PLW0603 (one metrics server per process)
    port = os.environ.get("SREFORGE_METRICS_PORT")
    if port and not _serving_metrics:
        metrics.serve(int(port))
        _serving_metrics = True
    global _serving_tools  # noqa: PLW0603 (one MCP endpoint per process)
    tools_port = os.environ.get("SREFORGE_MCP_PORT")
    if tools_port and not _serving_tools:
        mcp.serve(kube(), OperatorConfig.from_env(), int(tools_port))
        _serving_tools = True


@kopf.daemon(GROUP, VERSION, INCIDENT_PLURAL, cancellation_timeout=10.0, backoff=5.0)
def incident_daemon(stopped: kopf.DaemonStopped, body: kopf.Body, logger: Any, **_: Any) -> None:
    """Drive one Incident's closed loop until it finishes or the operator stops."""
    cfg = OperatorConfig.from_env()
    incident = dict(body)
    name = incident["metadata"]["name"]
    ns = incident["metadata"]["namespace"]
    try:
        run = IncidentRun(kube(), cfg, _fresh(incident), logger)
    except (ScenarioError, ValidationError) as exc:
        metrics.incident_phase(incident["metadata"].get("uid", name), "Failed")
        kube().post_event(events.event(incident, events.WARNING, "InvalidScenario", str(exc)))
        kube().update_conditions(
            INCIDENT_PLURAL,
            ns,
            name,
            [
                condition("Finished", True, "InvalidScenario", str(exc)[:4000]),
                condition("Succeeded", False, "InvalidScenario", str(exc)[:4000]),
            ],
            {"phase": "Failed"},
        )
        return
    uid = incident["metadata"].get("uid", name)
    with _lock:
        _driving.add(uid)
    try:
        run.run(_Stop(stopped))
    except Exception:
        metrics.error("incident_daemon")
        raise
    finally:
        with _lock:
            _driving.discard(uid)


@kopf.on.delete(GROUP, VERSION, INCIDENT_PLURAL, retries=12)
def incident_deleted(body: kopf.Body, logger: Any, **_: Any) -> None:
    """An Incident deleted, finished or not: once its daemon has stopped, the target gets
    its original image back (runtime.kube.incident.restore_on_delete)."""
    incident = dict(body)
    meta = incident["metadata"]
    with _lock:
        driving = meta.get("uid", meta["name"]) in _driving
    if driving:  # kopf signalled the daemon to stop before calling this
        raise kopf.TemporaryError("waiting for the run to stop", delay=1)
    with metrics.reconciling("incident_deleted"):
        try:
            run = IncidentRun(kube(), OperatorConfig.from_env(), _fresh(incident), logger)
        except ScenarioError:
            run = None  # it never ran: nothing to give back
        try:
            if run is not None:
                restore_on_delete(kube(), run)
        except KubeError as exc:
            raise kopf.TemporaryError(
                f"could not restore the baseline of {meta['namespace']}/{meta['name']}: {exc}",
                delay=5,
            ) from exc
    metrics.incident_gone(meta.get("uid", meta["name"]))


def _fresh(incident: dict[str, Any]) -> dict[str, Any]:
    """The Incident as stored now (the daemon's body may predate the last status write)."""
    meta = incident["metadata"]
    got = kube().get_incident(meta["namespace"], meta["name"])
    return got if got is not None else incident


class _Stop(threading.Event):
    """kopf's DaemonStopped as the threading.Event the runtime waits on."""

    def __init__(self, stopped: kopf.DaemonStopped) -> None:
        super().__init__()
        self._stopped = stopped

    def is_set(self) -> bool:
        return bool(self._stopped)

    def wait(self, timeout: float | None = None) -> bool:
        return bool(self._stopped.wait(timeout))


@kopf.on.create(GROUP, VERSION, SUBMISSION_PLURAL)
@kopf.on.resume(GROUP, VERSION, SUBMISSION_PLURAL)
def submission_created(body: kopf.Body, **_: Any) -> None:
    """Admit a Submission: refuse, grade a refused patch at once, or queue it."""
    try:
        with metrics.reconciling("submission_created"):
            admit_submission(kube(), OperatorConfig.from_env(), dict(body))
    except ValidationError as exc:
        kube().post_event(events.event(dict(body), events.WARNING, "InvalidSpec", str(exc)))
        meta = body["metadata"]
        kube().update_conditions(
            SUBMISSION_PLURAL,
            meta["namespace"],
            meta["name"],
            refused("InvalidSpec", str(exc)[:4000]),
        )


def run_operator(
    *, namespaces: list[str] | None = None, liveness: str | None = None, verbose: bool = False
) -> None:
    """`sreforge operator`: kopf standalone (one replica, no peering) with these handlers."""
    # kopf's handler on the root logger is the only one: a second (logging.basicConfig's)
    # printed every line twice, once in each format
    kopf.configure(verbose=verbose)
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces or (),
        liveness_endpoint=liveness,
    )
