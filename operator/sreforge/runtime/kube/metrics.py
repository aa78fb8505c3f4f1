"""The operator's own metrics, served on /metrics when SREFORGE_METRICS_PORT is set (the chart
sets it; its PodMonitor / ServiceMonitor option scrapes it):

    sreforge_incidents{phase}                      Incidents this operator knows, by phase
    sreforge_verdicts_total{reason}                verdicts recorded, by the verdict's reason
    sreforge_reconcile_errors_total{handler}       handler calls (and runs) that raised
    sreforge_reconcile_duration_seconds{handler}   how long each handler call took
    process_*                                      the operator's CPU and memory

A registry of its own: nothing else in the process (the load generator's metrics when it
runs in-process, a library's) leaks into the operator's series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sreforge.api.verdict import Reason

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
# The printable phases (runtime.kube.status.incident_phase), shown even at zero.
PHASES = (
    "Pending",
    "Injecting",
    "Injected",
    "AwaitingSubmission",
    "Grading",
    "Restoring",
    "Succeeded",
    "Failed",
)

VERDICTS = Counter(
    "sreforge_verdicts",
    "Verdicts recorded (on Submissions and Incidents), by the verdict's reason.",
    ["reason"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "sreforge_reconcile_errors",
    "Handler calls that raised (and Incident runs whose daemon raised), by handler.",
    ["handler"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "sreforge_reconcile_duration_seconds",
    "How long one handler call took, by handler.",
    ["handler"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
for _reason in Reason:
    VERDICTS.labels(_reason.value)  # every reason present from the start: rate() works


class _Phases(Collector):
    """sreforge_incidents{phase}, from the phases the runs last wrote."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase: dict[str, str] = {}

    def set(self, uid: str, phase: str) -> None:
        with self._lock:
            self._phase[uid] = phase

    def forget(self, uid: str) -> None:
        with self._lock:
            self._phase.pop(uid, None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            phases = list(self._phase.values())
        family = GaugeMetricFamily(
            "sreforge_incidents", "Incidents this operator knows, by phase.", labels=["phase"]
        )
        for phase in [*PHASES, *sorted(set(phases) - set(PHASES))]:
            family.add_metric([phase], phases.count(phase))
        yield family


_PHASES = _Phases()
REGISTRY.register(_PHASES)


def incident_phase(uid: str, phase: str) -> None:
    """The Incident's phase as last written to its status."""
    _PHASES.set(uid, phase)


def incident_gone(uid: str) -> None:
    """The Incident was deleted."""
    _PHASES.forget(uid)


def verdict(reason: Reason) -> None:
    """A verdict was recorded."""
    VERDICTS.labels(reason.value).inc()


def error(handler: str) -> None:
    """A handler (or a run) raised."""
    RECONCILE_ERRORS.labels(handler).inc()


@contextmanager
def reconciling(handler: str) -> Iterator[None]:
    """Time one handler call; count it as an error if it raises."""
    t0 = time.perf_counter()
    try:
        yield
    except BaseException:
        error(handler)
        raise
    finally:
        RECONCILE_SECONDS.labels(handler).observe(time.perf_counter() - t0)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve REGISTRY on http://addr:port/metrics from a daemon thread."""
    start_http_server(port, addr, registry=REGISTRY)
