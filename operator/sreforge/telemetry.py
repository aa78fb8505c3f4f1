"""All Prometheus I/O: the firing set, the target series, the delivered load, the prober's
view, range data.

A scope (label matchers) confines every read to one Incident when Prometheus is shared: the
operator sets ``namespace`` and ``incident``, which the scrape config copies from each pod
(its namespace, its ``sreforge.dev/incident`` label) and every scenario rule keeps when it
aggregates (``by (namespace, incident, ...)``), so each alert says whose it is. A local run
has a Prometheus of its own: no scope, and its targets carry neither label.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from sreforge.api.observation import AlertSample, LoadStats, ProbeStats

if TYPE_CHECKING:
    from sreforge.runtime.driver import Stop

LOAD_JOB = "loadgen"
PROBE_JOB = "prober"
# Rate window of the load figures; matches the alert rules' windows.
WINDOW = "10s"
# The prober's window: at its low rate, 10 s holds too few answers to judge a share.
PROBE_WINDOW = "15s"
PAGE = "page"

_ERRORS = (PrometheusApiClientException, requests.RequestException, ValueError, KeyError)

# label -> value, or -> the values any of which matches
Scope = Mapping[str, str | Sequence[str]]
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a plain selector: an optional metric name, optional {matchers} (no range, no function)
_REGEX_META = re.compile(r"[\\.+*?()|\[\]{}^$]")  # escaped for RE2: a value matches as such
_SELECTOR = re.compile(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{(.*)\})?\s*", re.DOTALL)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label_matchers(scope: Scope | None) -> str:
    """PromQL matchers of a scope: `a="x"` for one value, `a=~"x|y"` for several."""
    out = []
    for label, value in sorted((scope or {}).items()):
        if not _LABEL.fullmatch(label):
            raise ValueError(f"not a label name: {label!r}")
        values = sorted({value} if isinstance(value, str) else set(value))
        if not values:
            raise ValueError(f"scope label {label} has no value")
        if len(values) == 1:
            out.append(f"{label}={_quoted(values[0])}")
        else:
            either = "|".join(_REGEX_META.sub(r"\\\g<0>", v) for v in values)
            out.append(f"{label}=~{_quoted(either)}")
    return ",".join(out)


def scoped(selector: str, matchers: str) -> str:
    """`selector` with `matchers` added; a ValueError when it is not a plain selector."""
    if not matchers:
        return selector
    m = _SELECTOR.fullmatch(selector)
    if m is None or not (m[1] or m[2] is not None):
        raise ValueError(f"not a plain series selector, cannot scope it: {selector!r}")
    inner = (m[2] or "").strip().rstrip(",")
    return f"{m[1] or ''}{{{inner + ',' if inner else ''}{matchers}}}"


class Telemetry:
    """Reads one Prometheus; every failure to read becomes `None`, never a clear.

    With a `scope`, the alerts, the target series, the service's `up`, the load and the
    prober are read only where every label of the scope matches (see the module docstring).
    """

    def __init__(
        self,
        url: str,
        *,
        target_series: str,
        service_job: str,
        scope: Scope | None = None,
        timeout: float = 2.0,
        probed: bool = True,
    ):
        """`probed`: the run has an independent prober (job="prober") whose view every
        sample carries; its series missing is then a harness fault, never a clear."""
        self.url = url
        self.scope = label_matchers(scope)
        self.probed = probed
        self.target_series = scoped(target_series, self.scope)
        self.service_job = service_job
        self._prom = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout)

    def _select(self, metric: str, *matchers: str) -> str:
        both = [m for m in (*matchers, self.scope) if m]
        return f"{metric}{{{','.join(both)}}}" if both else metric

    def _scalar(self, query: str) -> float | None:
        result = self._prom.custom_query(query)
        if not result:
            return None
        return float(result[0]["value"][1])

    def _alerts(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
        try:
            result = self._prom.custom_query(self._select("ALERTS"))
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
        done_s = self._select("sreforge_probe_requests_total", j)
        ok_s = self._select("sreforge_probe_requests_total", j, 'outcome="success"')
        try:
            done = self._scalar(f"sum(rate({done_s}[{PROBE_WINDOW}]))")
            ok = self._scalar(f"sum(rate({ok_s}[{PROBE_WINDOW}]))")
        except _ERRORS:
            return None
        if not done or ok is None:
            return ProbeStats(success_ratio=None)
        return ProbeStats(success_ratio=min(1.0, ok / done))

    def p95_by_route(self, seconds: float) -> dict[str, dict[str, float]]:
        """The highest p95 latency per route over the last `seconds`, of the load (its 10 s
        windows) and of the prober (its 15 s ones), as the latency rules compute it:
        {"load": {route: s}, "probe": {route: s}}. A control window's figures show how far
        the healthy build sits below each latency page. Empty where unreadable."""
        out: dict[str, dict[str, float]] = {}
        span = f"{max(1, round(seconds))}s"
        for key, job, prefix, window in (
            ("load", LOAD_JOB, "sreforge_load", WINDOW),
            ("probe", PROBE_JOB, "sreforge_probe", PROBE_WINDOW),
        ):
            buckets = self._select(f"{prefix}_request_duration_seconds_bucket", f'job="{job}"')
            quantile = f"histogram_quantile(0.95, sum by (route, le) (rate({buckets}[{window}])))"
            try:
                result = self._prom.custom_query(f"max_over_time(({quantile})[{span}:1s])")
            except _ERRORS:
                result = []
            out[key] = {
                str(r["metric"].get("route", "")): round(float(r["value"][1]), 3)
                for r in result
                if r["value"][1] not in ("NaN", "+Inf")
            }
        return out

    def load(self) -> LoadStats | None:
        """The load generator's delivered load over the last window, from its own metrics."""
        j = f'job="{LOAD_JOB}"'
        scheduled_s = self._select("sreforge_load_scheduled_iterations_total", j)
        dropped_s = self._select("sreforge_load_dropped_iterations_total", j)
        try:
            target = self._scalar(f"max({self._select('sreforge_load_target_rate', j)})")
            scheduled = self._scalar(f"sum(rate({scheduled_s}[{WINDOW}]))")
            dropped = self._scalar(f"sum(rate({dropped_s}[{WINDOW}]))")
            done = self._scalar(
                f"sum(rate({self._select('sreforge_load_requests_total', j)}[{WINDOW}]))"
            )
            ok_s = self._select("sreforge_load_requests_total", j, 'outcome="success"')
            ok = self._scalar(f"sum(rate({ok_s}[{WINDOW}]))")
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

    def schedules_started(self) -> bool | None:
        """Whether the load and the prober have started their schedules (they learn their
        known answers first: see sreforge.load.generator); None if unreadable."""
        found = []
        for job, prefix in ((LOAD_JOB, "sreforge_load"), (PROBE_JOB, "sreforge_probe")):
            if job == PROBE_JOB and not self.probed:
                continue
            series = self._select(f"{prefix}_scheduled_iterations_total", f'job="{job}"')
            try:
                found.append(self._scalar(f"sum({series})"))
            except _ERRORS:
                return None
        return all(v is not None and v > 0 for v in found)

    def sample(self, now: float | None = None) -> AlertSample:
        t = time.time() if now is None else now
        alerts = self._alerts()
        if alerts is None:
            return AlertSample(t=t, firing=None)
        firing, pending, pages = alerts
        try:
            series = self._scalar(f"count({self.target_series})")
            up = self._scalar(f"max({self._select('up', f'job={_quoted(self.service_job)}')})")
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


def control_window(
    telemetry: Telemetry,
    target_alert: str,
    seconds: int,
    *,
    restarts: Callable[[], int | None],
    stop: Stop | None = None,
) -> dict[str, Any] | None:
    """Watch the healthy build under the run's load for `seconds` (a validation's control
    window, locally and on a cluster): whether the target alert or any page fired, how often
    the build restarted meanwhile (`restarts()` counts the build's restarts; None when
    unreadable), and its highest p95 per route: how far below each latency page it sat (a
    quiet control is no proof of headroom). `targetFired` stays None when Prometheus was
    never read, which is not quiet. None if `stop` is set first."""
    if stop is None:
        stop = threading.Event()
    before = _read_restarts(restarts, stop)
    fired: bool | None = None
    pages: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        s = telemetry.sample()
        if s.firing is not None:
            fired = bool(fired) or target_alert in s.firing
            pages |= s.pages & s.firing
        stop.wait(1.0)
    if stop.is_set():
        return None
    after = _read_restarts(restarts, stop)
    return {
        "seconds": seconds,
        "targetFired": fired,
        "pagesFired": sorted(pages),
        "restarts": None if before is None or after is None else after - before,
        "p95ByRoute": telemetry.p95_by_route(seconds),
    }


def _read_restarts(restarts: Callable[[], int | None], stop: Stop, tries: int = 3) -> int | None:
    """`restarts()`, asked again a second later while it is unreadable (one failed API
    read must not leave the window's restarts unknown); None after `tries`."""
    for _ in range(tries - 1):
        n = restarts()
        if n is not None or stop.wait(1.0):
            return n
    return restarts()


def control_quiet(control: Mapping[str, Any]) -> bool:
    """A control window's observation is quiet: Prometheus was read and the target alert
    never fired, no page fired, and the build's restarts were read and none happened (an
    unread count is no proof of none, as an unread Prometheus is no proof of quiet)."""
    return (
        control.get("targetFired") is False
        and not control.get("pagesFired")
        and control.get("restarts") == 0
    )


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)
