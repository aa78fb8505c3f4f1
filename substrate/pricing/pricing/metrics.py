"""The service's own Prometheus metrics, on a per-app registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pricing_http_requests_total",
            "HTTP requests served, by route and status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pricing_http_request_duration_seconds",
            "Time spent in the request handler, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.supplier_attempts = Counter(
            "pricing_supplier_attempts_total",
            "Requests made to the supplier, retries included.",
            registry=self.registry,
        )
        self.log_bytes = Counter(
            "pricing_log_bytes_total",
            "Bytes written to the service log.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
