"""All Prometheus I/O: the firing set, the target series, the delivered load, range data."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from sreforge.api.observation import AlertSample, LoadStats, ProbeStats

LOAD_JOB = "loadgen"
PROBE_JOB = "prober"
# Rate window of the load figures; matches the alert rules' windows.
WINDOW = "10s"
# The prober's window: at its low rate, 10 s holds too few answers to judge a share.
PROBE_WINDOW = "15s"
PAGE = "page"

_ERRORS = (PrometheusApiClientException, requests.RequestException, ValueError, KeyError)


class Telemetry:
    """Reads one Prometheus; every failure to read becomes `None`, never a clear."""

    def __init__(
        self,
        url: str,
        *,
        target_series: str,
        service_job: str,
        timeout: float = 2.0,
        probed: bool = True,
    ):
        """`probed`: the run has an independent prober (job="prober") whose view every
        sample carries; its series missing is then a harness fault, never a clear."""
        self.url = url
        self.probed = probed
        self.target_series = target_series
        self.service_job = service_job
        self._prom = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout)

    def _scalar(self, query: str) -> float | None:
        result = self._prom.custom_query(query)
        if not result:
            return None
        return float(result[0]["value"][1])

    def _alerts(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
        try:
            result = self._prom.custom_query("ALERTS")
        except _ERRORS:
            return None
        firing = {r["metric"]["alertname"] for r in result if r["metric"]["alertstate"] == "firing"}
        pending = {
            r["metric"]["alertname"] for r in result if r["metric"]["alertstate"] == "pending"
        }
        pages = {
            r["metric"]["alertname"]
            for r in result
            if r["metric"]["alertstate"] == "firing" and r["metric"].get("severity") == PAGE
        }
        return frozenset(firing), frozenset(pending - firing), frozenset(pages)

    def alerts(self) -> tuple[frozenset[str], frozenset[str]] | None:
        """(firing, pending) alert names, or None when Prometheus cannot be asked."""
        found = self._alerts()
        return None if found is None else found[:2]

    def probe(self) -> ProbeStats | None:
        """The prober's share of good answers over PROBE_WINDOW; None if unreadable."""
        j = f'job="{PROBE_JOB}"'
        try:
            done = self._scalar(f"sum(rate(sreforge_probe_requests_total{{{j}}}[{PROBE_WINDOW}]))")
            ok = self._scalar(
                f'sum(rate(sreforge_probe_requests_total{{{j},outcome="success"}}[{PROBE_WINDOW}]))'
            )
        except _ERRORS:
            return None
        if not done or ok is None:
            return ProbeStats(success_ratio=None)
        return ProbeStats(success_ratio=min(1.0, ok / done))

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
        alerts = self._alerts()
        if alerts is None:
            return AlertSample(t=t, firing=None)
        firing, pending, pages = alerts
        try:
            series = self._scalar(f"count({self.target_series})")
            up = self._scalar(f'max(up{{job="{self.service_job}"}})')
        except _ERRORS:
            return AlertSample(t=t, firing=None)
        return AlertSample(
            t=t,
            firing=firing,
            pending=pending,
            pages=pages,
            target_series_present=bool(series),
            service_up=up == 1.0,
            load=self.load(),
            probe=(self.probe() or ProbeStats(success_ratio=None)) if self.probed else None,
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
