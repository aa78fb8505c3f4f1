"""The load generator's and the prober's Prometheus series (harness-owned telemetry).

Alert rules of scenarios evaluate these series, so their names and labels are an
interface: change them only together with every `rules.yml` that uses them. The load's
series are named ``sreforge_load_*`` (``job="loadgen"``), the prober's the same with
``sreforge_probe_*`` (``job="prober"``). Requests and their durations carry the ``route``
of the mix (the route's name, its path template by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

Outcome = Literal["success", "invalid", "http_error", "timeout", "connect_error"]
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "success",
    "invalid",
    "http_error",
    "timeout",
    "connect_error",
)

REQUESTS_TOTAL: Final = "sreforge_load_requests_total"
REQUEST_DURATION_SECONDS: Final = "sreforge_load_request_duration_seconds"
SCHEDULED_ITERATIONS_TOTAL: Final = "sreforge_load_scheduled_iterations_total"
DROPPED_ITERATIONS_TOTAL: Final = "sreforge_load_dropped_iterations_total"
IN_FLIGHT: Final = "sreforge_load_in_flight"
TARGET_RATE: Final = "sreforge_load_target_rate"
SCHEDULING_LAG_SECONDS: Final = "sreforge_load_scheduling_lag_seconds"
KNOWN_ANSWERS: Final = "sreforge_load_known_answers"
#: The prefix of the load's series and of the prober's.
LOAD_PREFIX: Final = "sreforge_load"
PROBE_PREFIX: Final = "sreforge_probe"

DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0,
)  # fmt: skip
LAG_BUCKETS: Final = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
)  # fmt: skip


def _base(name: str, suffix: str, prefix: str = LOAD_PREFIX) -> str:
    # prometheus_client appends `_total` to counters itself.
    return prefix + name.removesuffix(suffix).removeprefix(LOAD_PREFIX)


def _named(name: str, prefix: str) -> str:
    return prefix + name.removeprefix(LOAD_PREFIX)


class LoadMetrics:
    """The series above, in a registry of their own (never the process-global one).

    ``routes``: the route labels of the mix (their children exist from the start, at 0);
    ``prefix``: LOAD_PREFIX for the load, PROBE_PREFIX for the prober.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        routes: Sequence[str] = ("/",),
        prefix: str = LOAD_PREFIX,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.prefix = prefix
        r = self.registry
        self.requests = Counter(
            _base(REQUESTS_TOTAL, "_total", prefix),
            "Completed requests by route and outcome.",
            ["route", "outcome"],
            registry=r,
        )
        self.request_duration = Histogram(
            _named(REQUEST_DURATION_SECONDS, prefix),
            "Duration of every completed request attempt by route, all outcomes.",
            ["route"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.scheduled = Counter(
            _base(SCHEDULED_ITERATIONS_TOTAL, "_total", prefix),
            "Iterations that came due on the constant-arrival-rate schedule.",
            registry=r,
        )
        self.dropped = Counter(
            _base(DROPPED_ITERATIONS_TOTAL, "_total", prefix),
            "Iterations not started: max_in_flight reached, or more than 1 s late.",
            registry=r,
        )
        self.in_flight = Gauge(_named(IN_FLIGHT, prefix), "Requests in flight.", registry=r)
        self.target_rate = Gauge(
            _named(TARGET_RATE, prefix), "Target arrival rate (requests/s).", registry=r
        )
        self.known_answers = Gauge(
            _named(KNOWN_ANSWERS, prefix),
            "Ids whose answers were learned before the load and are checked.",
            registry=r,
        )
        self.scheduling_lag = Histogram(
            _named(SCHEDULING_LAG_SECONDS, prefix),
            "How late a started iteration began after its due time.",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        # Children of every route and outcome exist from the start, so the series exist at 0.
        self.by_outcome = {
            (route, o): self.requests.labels(route=route, outcome=o)
            for route in routes
            for o in OUTCOMES
        }
        self.duration_of = {route: self.request_duration.labels(route=route) for route in routes}
