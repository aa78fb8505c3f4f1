"""resources-unbounded-cache's alert on a real node (sreforge.runtime.kube.cadvisor): the
kubelet's cAdvisor working set of the Incident's pricing pod becomes the series the local
harness exports, with the Incident's labels, and the scenario's rules as shipped fire and
resolve from it; containers of pods no Incident labels, and another Incident's, stay out.
promtool (Debian's) evaluates the chart's rule file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sreforge.runtime.kube import cadvisor

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
SCENARIO = REPO / "scenarios" / "resources-unbounded-cache"
MIB = 1024 * 1024


def test_the_chart_ships_the_generated_rule() -> None:
    shipped = (REPO / cadvisor.CHART_RULES).read_text(encoding="utf-8")
    assert shipped == cadvisor.rules_yaml(), f"{cadvisor.CHART_RULES} is stale; regenerate it"


def _cadvisor(pod: str, container: str, values: str, ns: str = "apps") -> dict[str, str]:
    labels = (
        f'job="kubernetes-cadvisor",namespace="{ns}",pod="{pod}",container="{container}",'
        f'id="/kubepods/{pod}/{container}",node="node-1"'
    )
    return {"series": f"container_memory_working_set_bytes{{{labels}}}", "values": values}


def _up(pod: str, job: str, incident: str | None, ns: str = "apps") -> dict[str, str]:
    extra = f',incident="{incident}",scenario="resources-unbounded-cache"' if incident else ""
    return {"series": f'up{{job="{job}",namespace="{ns}",pod="{pod}"{extra}}}', "values": "1x60"}


@needs_promtool
def test_the_working_set_of_the_incidents_pod_fires_and_resolves_the_alert(
    tmp_path: Path,
) -> None:
    shutil.copyfile(SCENARIO / "rules.yml", tmp_path / "scenario.yml")
    (tmp_path / "memory.yml").write_text(cadvisor.rules_yaml(), encoding="utf-8")
    grows = f"{50 * MIB}+{7 * MIB}x20 {40 * MIB}x40"  # leaks to ~190 MiB, then a new pod
    inputs = [
        _cadvisor("pricing-a", "pricing", grows),
        _cadvisor("pricing-a", "", f"{500 * MIB}x60"),  # the pod's own cgroup: not a container
        _up("pricing-a", "pricing", "inc"),
        # a pod of no Incident, and one of another Incident in another namespace: never read
        _cadvisor("stranger", "web", f"{900 * MIB}x60"),
        _up("stranger", "web", None),
        _cadvisor("pricing-b", "pricing", f"{40 * MIB}x60", ns="other"),
        _up("pricing-b", "pricing", "inc-2", ns="other"),
    ]
    recorded = (
        'sreforge_target_memory_rss_bytes{job="harness",service="pricing",namespace="apps",'
        'incident="inc",scenario="resources-unbounded-cache",pod="pricing-a",container="pricing"}'
    )
    alert = {
        "exp_labels": {
            "severity": "page",
            "service": "pricing",
            "namespace": "apps",
            "incident": "inc",
        },
        "exp_annotations": {"summary": "Pricing resident memory above 128 MiB"},
    }
    test = {
        "rule_files": ["memory.yml", "scenario.yml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": inputs,
                "promql_expr_test": [
                    {
                        "expr": 'sreforge_target_memory_rss_bytes{namespace="apps"}',
                        "eval_time": "2s",
                        "exp_samples": [{"labels": recorded, "value": 64 * MIB}],
                    },
                    {
                        "expr": "count(sreforge_target_memory_rss_bytes)",
                        "eval_time": "2s",
                        "exp_samples": [{"labels": "{}", "value": 2}],  # apps/inc, other/inc-2
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": "8s", "alertname": "PricingMemoryHigh", "exp_alerts": []},
                    {"eval_time": "20s", "alertname": "PricingMemoryHigh", "exp_alerts": [alert]},
                    {"eval_time": "40s", "alertname": "PricingMemoryHigh", "exp_alerts": []},
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
