"""The k6 runner's results reach the alert rules: remote write into a real Prometheus.

k6 itself never runs here (AGPL). Its part is played by a **network-level stand-in**
(tests/k6_standin.py): it POSTs to a real Prometheus (Debian's, started with
``--web.enable-remote-write-receiver`` as the chart starts its own) exactly what k6
v0.54.0's ``experimental-prometheus-rw`` output sends for the rendered script: snappy-
compressed protobuf WriteRequests, once a second, of the script's counters and gauge and
k6's ``iterations``, tagged with whose load it is; stale markers at the end. Prometheus
loads latency-cache-stampede's alert rules as shipped and the chart's k6 recording rules.

What must follow, read as the operator reads it (sreforge.telemetry.Telemetry, scoped to
the Incident): slow, partly invalid answers fire CatalogLatencyHigh and
CatalogErrorRateHigh for that Incident alone, the delivered load is the stand-in's
(target 60/s, achieved ~60/s, nothing dropped, ~90% valid); fast valid answers clear both;
once the stand-in stops, its stale markers take the load's series away (no clear can count
on a load that is gone). Takes ~40 s.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.k6_standin import K6StandIn, push, snappy, write_request
from tests.kubeenv import REPO_ROOT, wait_for

from sreforge.load import k6series
from sreforge.runtime.kube.render import telemetry_scope
from sreforge.runtime.prometheus import PrometheusServer
from sreforge.scenarios import load_scenario
from sreforge.telemetry import Telemetry

SCENARIO = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
ALERTS = {"CatalogLatencyHigh", "CatalogErrorRateHigh"}
NS, INCIDENT = "demo", "inc-k6"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    if shutil.which("prometheus") is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    rules = tmp_path / "runner-k6.yml"
    rules.write_text(k6series.rules_yaml(), encoding="utf-8")
    prom = PrometheusServer(
        tmp_path / "prometheus",
        [SCENARIO.rules_path, rules],
        [],
        flags=("--web.enable-remote-write-receiver",),
    )
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def telemetry(url: str, incident: str) -> Telemetry:
    return Telemetry(
        url,
        target_series=SCENARIO.target_series,
        service_job=SCENARIO.service.name,
        scope=telemetry_scope(incident, NS, NS),
        probed=False,
    )


def test_snappy_and_protobuf_are_what_prometheus_decodes(
    prometheus: PrometheusServer,
) -> None:
    """One WriteRequest (a repetitive one, so the snappy copies are used) is accepted."""
    labels = tuple(sorted({"__name__": "k6_standin_probe_total", "a": "x" * 200}.items()))
    body = write_request([(labels, 1.0, 1)])
    assert len(snappy(body)) < len(body)  # copies, not only literals
    status = push(prometheus.url + k6series.REMOTE_WRITE_PATH, [(labels, 3.0, 1_000)])
    assert status == 204


def test_k6_series_fire_and_clear_the_scenarios_alerts(prometheus: PrometheusServer) -> None:
    url = prometheus.url
    ours, theirs = telemetry(url, INCIDENT), telemetry(url, "someone-else")
    standin = K6StandIn(
        url + k6series.REMOTE_WRITE_PATH,
        k6series.job_tags(NS, INCIDENT, SCENARIO.name),
        route="product",
        rate=60,
        latency=0.4,
        invalid=0.1,
    )
    standin.start()
    try:

        def firing() -> bool:
            got = ours.alerts()
            return got is not None and got[0] >= ALERTS

        wait_for("the k6 stand-in's slow answers to fire both alerts", firing, timeout=60)
        # the load figures' 10 s window full of the stand-in's pushes
        wait_for("12 pushes", lambda: standin.pushes >= 12, timeout=30)
        load = ours.load()
        assert load is not None
        assert load.target_rate == 60
        assert 54 <= load.achieved_rate <= 66, load  # the oracle's bar: 90% of target
        assert load.dropped_ratio == 0
        assert load.success_ratio is not None
        assert 0.85 <= load.success_ratio <= 0.95, load
        # the highest p95 per route, as a control window keeps it: every answer took 0.4 s,
        # so the quantile lies in the (0.3, 0.4] bucket
        p95 = ours.p95_by_route(10)
        assert set(p95["load"]) == {"product"}, p95
        assert 0.3 < p95["load"]["product"] <= 0.4, p95
        # another Incident on the same Prometheus sees neither the alerts nor the load
        assert theirs.alerts() == (frozenset(), frozenset())
        assert theirs.load() is None
        assert theirs.p95_by_route(10) == {"load": {}, "probe": {}}

        standin.latency, standin.invalid = 0.02, 0.0

        def cleared() -> bool:
            got = ours.alerts()
            return got is not None and not (ALERTS & (got[0] | got[1]))

        wait_for("the k6 stand-in's fast answers to clear both alerts", cleared, timeout=60)

        def all_valid() -> bool:
            # the error alert clears below its threshold, which can be before the load
            # figures' 10 s window has let go of the last invalid answers
            got = ours.load()
            return got is not None and got.success_ratio == 1.0

        wait_for("the load window to hold only valid answers", all_valid, timeout=30)
        load = ours.load()
        assert load is not None
        assert load.success_ratio == 1.0
        assert 54 <= load.achieved_rate <= 66, load
        assert not standin.errors, standin.errors
        assert standin.pushes >= 10
    finally:
        standin.stop()
    wait_for("the stale markers to take the load away", lambda: ours.load() is None, timeout=30)
