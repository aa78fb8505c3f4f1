"""The k6 runner's series (sreforge.load.k6series): the chart ships the recording rules as
generated, promtool (Debian's) evaluates them over k6-shaped input into the built-in
generator's series, and a scenario's alert fires from them alone.

The remote-write path itself (a real Prometheus receiving a stand-in's WriteRequests) is
tests/integration/test_k6_remote_write.py; what the script adds per request is
tests/unit/test_load_k6.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sreforge.load import k6series
from sreforge.load.metrics import DURATION_BUCKETS

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
STAMPEDE = REPO / "scenarios" / "latency-cache-stampede"
WHOSE = {"namespace": "demo", "incident": "inc-k6"}
TAGS = {**WHOSE, "sreforge_scenario": "latency-cache-stampede", "scenario": "incident"}


def test_the_chart_ships_the_generated_rules() -> None:
    shipped = (REPO / k6series.CHART_RULES).read_text(encoding="utf-8")
    assert shipped == k6series.rules_yaml(), (
        f"{k6series.CHART_RULES} is stale; regenerate it (see its header)"
    )


def test_bucket_bounds_are_the_generators_with_its_le_labels() -> None:
    bounds = k6series.bucket_bounds()
    assert [b for b, _ in bounds] == [*DURATION_BUCKETS, float("inf")]
    les = dict(bounds)
    assert les[0.25] == "0.25"
    assert les[1.0] == "1.0"  # as prometheus_client writes it, so both runners share `le`
    assert les[float("inf")] == "+Inf"


def test_recorded_series_are_the_ones_the_oracle_and_rules_read() -> None:
    rules = k6series.recording_rules()["groups"][0]["rules"]
    recorded = {r["record"] for r in rules}
    assert recorded == {
        "sreforge_load_requests_total",
        "sreforge_load_request_duration_seconds_bucket",
        "sreforge_load_scheduled_iterations_total",
        "sreforge_load_dropped_iterations_total",
        "sreforge_load_target_rate",
    }
    assert all(r["labels"] == {"job": "loadgen", "runner": "k6"} for r in rules)
    # every input is a k6 remote-write name (k6_ prefix), none is the generator's own
    for r in rules:
        assert "k6_" in r["expr"]
        assert "sreforge_load_" not in r["expr"]


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


@needs_promtool
def test_promtool_records_the_generators_series_and_the_alert_fires(tmp_path: Path) -> None:
    """60 requests/s on route product, each taking ~0.35 s, one in ten invalid; k6 dropped
    nothing. Recorded: requests by outcome, the cumulative buckets, scheduled = iterations,
    dropped = 0, the target rate; and latency-cache-stampede's CatalogLatencyHigh and
    CatalogErrorRateHigh fire from them for this Incident."""
    rules = tmp_path / "k6.yml"
    rules.write_text(k6series.rules_yaml(), encoding="utf-8")
    shutil.copyfile(STAMPEDE / "rules.yml", tmp_path / "stampede.yml")
    product = {**TAGS, "route": "product"}
    inputs = [
        _series(k6series.K6_REQUESTS_TOTAL, {**product, "outcome": "success"}, "0+54x60"),
        _series(k6series.K6_REQUESTS_TOTAL, {**product, "outcome": "invalid"}, "0+6x60"),
        _series(k6series.K6_ITERATIONS_TOTAL, TAGS, "0+60x60"),
        _series(k6series.K6_TARGET_RATE, TAGS, "60x60"),
    ]
    for bound, le in k6series.bucket_bounds():
        per_s = 60 if bound >= 0.4 else 0  # ~0.35 s each: in every bucket from 0.4 up
        inputs.append(_series(k6series.K6_BUCKET_TOTAL, {**product, "le": le}, f"0+{per_s}x60"))
    out = {"job": "loadgen", "runner": "k6", **WHOSE, "scenario": "latency-cache-stampede"}

    def expect(name: str, labels: dict[str, str], value: float) -> dict[str, object]:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {
            "expr": f"{name}{{{inner}}}",
            "eval_time": "20s",
            "exp_samples": [{"labels": f"{name}{{{inner}}}", "value": value}],
        }

    alert_labels = {**WHOSE, "severity": "page", "service": "catalog"}
    test = {
        "rule_files": ["k6.yml", "stampede.yml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": inputs,
                "promql_expr_test": [
                    expect(
                        "sreforge_load_requests_total",
                        {**out, "route": "product", "outcome": "invalid"},
                        120,
                    ),
                    expect(
                        "sreforge_load_request_duration_seconds_bucket",
                        {**out, "route": "product", "le": "0.4"},
                        1200,
                    ),
                    expect(
                        "sreforge_load_request_duration_seconds_bucket",
                        {**out, "route": "product", "le": "0.25"},
                        0,
                    ),
                    expect("sreforge_load_scheduled_iterations_total", out, 1200),
                    expect("sreforge_load_dropped_iterations_total", out, 0),
                    expect("sreforge_load_target_rate", out, 60),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "30s",
                        "alertname": alert,
                        "exp_alerts": [{"exp_labels": alert_labels, "exp_annotations": notes}],
                    }
                    for alert, notes in _annotations(STAMPEDE / "rules.yml").items()
                    if alert in ("CatalogLatencyHigh", "CatalogErrorRateHigh")
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test), encoding="utf-8")
    assert PROMTOOL is not None
    proc = subprocess.run(
        [PROMTOOL, "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _annotations(rules_file: Path) -> dict[str, dict[str, str]]:
    doc = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    return {
        r["alert"]: dict(r.get("annotations") or {})
        for g in doc["groups"]
        for r in g["rules"]
        if "alert" in r
    }
