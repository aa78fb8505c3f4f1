"""What a k6 load Job writes to Prometheus, and the recording rules that turn it into the
built-in generator's series (sreforge.load.metrics), which every scenario's alert rules and
the oracle's load figures read. Pure: names, a rules document, no I/O.

The names follow **k6 v0.54.0** (``grafana/k6:0.54.0``, sreforge.load.k6.K6_IMAGE) and its
``experimental-prometheus-rw`` output: a snappy-compressed protobuf ``WriteRequest`` POSTed
to the remote-write receiver every ``K6_PROMETHEUS_RW_PUSH_INTERVAL``. Each k6 metric goes
out as ``k6_<name>`` plus a suffix by type (Counter ``_total``, Rate ``_rate``, Gauge the
unit, Trend one gauge per ``K6_PROMETHEUS_RW_TREND_STATS`` stat, e.g. ``_p99``), its labels
the sample's tags (the system tags, e.g. ``scenario``, and the test-wide ``--tag``s); no
``job`` or ``instance``.

Why the script counts for itself: k6 keeps one sink per series for the whole test, so its
trend stats (``k6_http_req_duration_p95``) and rates (``k6_http_req_failed_rate``) are
figures since the start of the test. An alert over them fires late and never clears within
a verification window. Counters are windowable with ``rate()``, so the script adds, per
request, a Counter of outcomes (the generator's validation: status, own id, known answer)
and a Counter per cumulative latency bucket (the generator's bounds); with k6's own
``iterations`` and ``dropped_iterations`` counters and a Gauge of the target rate, the
rules below give the generator's series, ``job="loadgen"`` and ``runner="k6"``.

Whose series they are: the Job passes the Incident's namespace, name and scenario as
test-wide tags (``--tag``), so the recorded series carry ``namespace``, ``incident`` and
``scenario`` as a scraped generator pod's do (the chart's scrape config).
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from prometheus_client.utils import floatToGoString

from sreforge.load.metrics import (
    DROPPED_ITERATIONS_TOTAL,
    DURATION_BUCKETS,
    REQUEST_DURATION_SECONDS,
    REQUESTS_TOTAL,
    SCHEDULED_ITERATIONS_TOTAL,
    TARGET_RATE,
)

K6_VERSION: Final = "0.54.0"
#: k6's output name for Prometheus remote write (``k6 run --out experimental-prometheus-rw``).
K6_OUTPUT: Final = "experimental-prometheus-rw"
#: The receiver's path on a Prometheus started with ``--web.enable-remote-write-receiver``.
REMOTE_WRITE_PATH: Final = "/api/v1/write"
PUSH_INTERVAL: Final = "1s"
#: The k6 scenario of the script (its ``options.scenarios`` key): k6's ``scenario`` tag.
K6_SCENARIO: Final = "incident"

# The script's custom metrics (k6/metrics) ...
REQUESTS_METRIC: Final = "sreforge_requests"  # Counter, tags route, outcome
BUCKET_METRIC: Final = "sreforge_request_duration_seconds_bucket"  # Counter, tags route, le
TARGET_RATE_METRIC: Final = "sreforge_target_rate"  # Gauge
# ... and the tags it and the Job set
ROUTE_TAG: Final = "route"
OUTCOME_TAG: Final = "outcome"
LE_TAG: Final = "le"
NAMESPACE_TAG: Final = "namespace"
INCIDENT_TAG: Final = "incident"
#: The Incident's scenario: not ``scenario``, which is k6's own system tag (K6_SCENARIO).
SCENARIO_TAG: Final = "sreforge_scenario"

# ... as the remote-write output names them in Prometheus (k6 v0.54.0's mapping)
K6_REQUESTS_TOTAL: Final = f"k6_{REQUESTS_METRIC}_total"
K6_BUCKET_TOTAL: Final = f"k6_{BUCKET_METRIC}_total"
K6_TARGET_RATE: Final = f"k6_{TARGET_RATE_METRIC}"
K6_ITERATIONS_TOTAL: Final = "k6_iterations_total"  # built-in Counter `iterations`
K6_DROPPED_ITERATIONS_TOTAL: Final = "k6_dropped_iterations_total"  # `dropped_iterations`

LOAD_JOB: Final = "loadgen"
RUNNER_LABEL: Final = "runner"
#: Labels every recorded series keeps (a scraped generator's, less pod and instance).
SCOPE: Final = ("namespace", "incident", "scenario")
GROUP: Final = "sreforge-k6-runner"


def bucket_bounds() -> list[tuple[float, str]]:
    """The generator's histogram bounds and their ``le`` label as its client writes it."""
    bounds = (*DURATION_BUCKETS, float("inf"))
    return [(b, str(floatToGoString(b))) for b in bounds]  # type: ignore[no-untyped-call]


def job_tags(namespace: str, incident: str, scenario: str) -> dict[str, str]:
    """The Job's test-wide tags: whose load this is."""
    return {NAMESPACE_TAG: namespace, INCIDENT_TAG: incident, SCENARIO_TAG: scenario}


def _ours(selector: str) -> str:
    """`selector` with the Incident's scenario as `scenario` (k6's own tag dropped)."""
    return f'label_replace({selector}, "scenario", "$1", "{SCENARIO_TAG}", "(.*)")'


def _sum(by: tuple[str, ...], selector: str) -> str:
    return f"sum by ({', '.join(by)}) ({_ours(selector)})"


def recording_rules() -> dict[str, Any]:
    """The rules file (one group) that gives a k6 run the generator's series.

    ``sreforge_load_requests_total`` and ``..._request_duration_seconds_bucket`` per route
    (the bucket counters are cumulative already), ``..._scheduled_iterations_total`` as
    k6's iterations plus its dropped ones, ``..._dropped_iterations_total`` (0 until k6
    drops one: it sends the counter only then) and ``..._target_rate``. The generator's
    own series (scraped) need no rule: they already have these names.
    """
    k6_iter = f'{K6_ITERATIONS_TOTAL}{{scenario="{K6_SCENARIO}"}}'
    k6_drop = f'{K6_DROPPED_ITERATIONS_TOTAL}{{scenario="{K6_SCENARIO}"}}'
    labels = {"job": LOAD_JOB, RUNNER_LABEL: "k6"}  # copied into each rule below
    dropped = f"{_sum(SCOPE, k6_drop)}\nor\n0 * {_sum(SCOPE, k6_iter)}"
    rules = [
        {
            "record": REQUESTS_TOTAL,
            "expr": _sum((*SCOPE, ROUTE_TAG, OUTCOME_TAG), K6_REQUESTS_TOTAL),
            "labels": labels,
        },
        {
            "record": f"{REQUEST_DURATION_SECONDS}_bucket",
            "expr": _sum((*SCOPE, ROUTE_TAG, LE_TAG), K6_BUCKET_TOTAL),
            "labels": labels,
        },
        {
            "record": SCHEDULED_ITERATIONS_TOTAL,
            "expr": f"{_sum(SCOPE, k6_iter)}\n+ on ({', '.join(SCOPE)})\n({dropped})",
            "labels": labels,
        },
        {"record": DROPPED_ITERATIONS_TOTAL, "expr": dropped, "labels": labels},
        {
            "record": TARGET_RATE,
            "expr": f"max by ({', '.join(SCOPE)}) ({_ours(K6_TARGET_RATE)})",
            "labels": labels,
        },
    ]
    for rule in rules:
        rule["labels"] = dict(labels)
    return {"groups": [{"name": GROUP, "interval": "1s", "rules": rules}]}


#: Where the chart keeps the rules (Helm reads files inside the chart only).
CHART_RULES: Final = "charts/sreforge/files/runners/k6.yml"
_HEADER = f"""\
# Recording rules for the k6 load runner: k6 v{K6_VERSION}'s remote-write series (the script's
# custom counters, k6's iterations) as the built-in generator's sreforge_load_* series, which
# the scenarios' alert rules and the oracle read. Generated by sreforge.load.k6series; do not
# edit: python -c 'from sreforge.load.k6series import rules_yaml; print(rules_yaml(), end="")'
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_rules(doc: dict[str, Any], header: str) -> str:
    """A rules document as YAML (multi-line expressions as blocks) after `header`."""
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def rules_yaml() -> str:
    """recording_rules() as the chart's rules file (CHART_RULES)."""
    return dump_rules(recording_rules(), _HEADER)
