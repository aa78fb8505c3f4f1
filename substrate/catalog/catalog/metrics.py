"""The service's own Prometheus metrics, on a per-app registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """Request and cache instruments; one instance (and registry) per app."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "catalog_http_requests_total",
            "HTTP requests served, by route, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "catalog_http_request_duration_seconds",
            "Time spent in the request handler, by route, method and status.",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cache_hits = Counter(
            "catalog_cache_hits_total",
            "Product lookups answered from the cache.",
            registry=self.registry,
        )
        self.cache_misses = Counter(
            "catalog_cache_misses_total",
            "Product lookups that went to the database.",
            registry=self.registry,
        )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        labels = (route, method, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
