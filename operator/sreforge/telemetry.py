"""All Prometheus I/O: the firing set, the target series, the delivered load, range data."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from sreforge.api.observation import AlertSample, LoadStats

LOAD_JOB = "loadgen"
# Rate window of the load figures; matches the alert rules' windows.
WINDOW = "10s"

_ERRORS = (PrometheusApiClientException, requests.RequestException, ValueError, KeyError)


class Telemetry:
    """Reads one Prometheus; every failure to read becomes `None`, never a clear."""

    def __init__(self, url: str, *, target_series: str, service_job: str, timeout: float = 2.0):
        self.url = url
        self.target_series = target_series
        self.service_job = service_job
        self._prom = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout)

    def _scalar(self, query: str) -> float | None:
        result = self._prom.custom_query(query)
        if not result:
            return None
        return float(result[0]["value"][1])

    def alerts(self) -> tuple[frozenset[str], frozenset[str]] | None:
        """(firing, pending) alert names, or None when Prometheus cannot be asked."""
        try:
            result = self._prom.custom_query("ALERTS")
        except _ERRORS:
            return None
        firing = {r["metric"]["alertname"] for r in result if r["metric"]["alertstate"] == "firing"}
        pending = {
            r["metric"]["alertname"] for r in result if r["metric"]["alertstate"] == "pending"
        }
        return frozenset(firing), frozenset(pending - firing)

    def load(self) -> LoadStats | None:
        """The load generator's delivered load over the last window, from its own metrics."""
        j = f'job="{LOAD_JOB}"'
        try:
            target = self._scalar(f"max(sreforge_load_target_rate{{{j}}})")
            scheduled = self._scalar(
                f"sum(rate(sreforge_load_scheduled_iterations_total{{{j}}}[{WINDOW}]))"
            )
            dropped = self._scalar(
                f"sum(rate(sreforge_load_dropped_iterations_total{{{j}}}[{WINDOW}]))"
            )
            done = self._scalar(f"sum(rate(sreforge_load_requests_total{{{j}}}[{WINDOW}]))")
            ok = self._scalar(
                f'sum(rate(sreforge_load_requests_total{{{j},outcome="success"}}[{WINDOW}]))'
            )
        except _ERRORS:
            return None
        if target is None or scheduled is None or dropped is None:
            return None  # the generator's series are gone: harness fault, not a clear
        success = None if not done or ok is None else min(1.0, ok / done)
        return LoadStats(
            target_rate=target,
            achieved_rate=max(0.0, scheduled - dropped),
            dropped_ratio=min(1.0, dropped / scheduled) if scheduled > 0 else 1.0,
            success_ratio=success,
        )

    def sample(self, now: float | None = None) -> AlertSample:
        t = time.time() if now is None else now
        alerts = self.alerts()
        if alerts is None:
            return AlertSample(t=t, firing=None)
        firing, pending = alerts
        try:
            series = self._scalar(f"count({self.target_series})")
            up = self._scalar(f'max(up{{job="{self.service_job}"}})')
        except _ERRORS:
            return AlertSample(t=t, firing=None)
        return AlertSample(
            t=t,
            firing=firing,
            pending=pending,
            target_series_present=bool(series),
            service_up=up == 1.0,
            load=self.load(),
        )

    def ready(self) -> bool:
        try:
            return bool(self._prom.check_prometheus_connection())
        except _ERRORS:
            return False

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Any]:
        """Range data for the run report; empty on any failure (best-effort)."""
        try:
            return list(
                self._prom.custom_query_range(
                    query, start_time=_dt(start), end_time=_dt(end), step=f"{step:g}s"
                )
            )
        except _ERRORS:
            return []


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)
