"""The operator's /metrics (sreforge.runtime.kube.metrics), scraped over HTTP and parsed with
prometheus_client's own parser."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sreforge.api.verdict import Reason
from sreforge.runtime.kube import metrics
from sreforge.runtime.process import free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_incidents_by_phase_verdicts_errors_and_durations_are_served() -> None:
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    before = scrape(port)
    assert before[("sreforge_incidents", (("phase", "Grading"),))] == 0  # shown at zero
    for reason in Reason:  # every reason from the start
        assert ("sreforge_verdicts_total", (("reason", reason.value),)) in before
    metrics.incident_phase("u-1", "Injected")
    metrics.incident_phase("u-2", "Injected")
    metrics.incident_phase("u-3", "Grading")
    metrics.incident_phase("u-3", "Failed")  # the same Incident, a later phase
    metrics.verdict(Reason.NOT_CLEARED)
    with metrics.reconciling("submission_created"):
        pass
    with pytest.raises(RuntimeError), metrics.reconciling("incident_deleted"):
        raise RuntimeError("the API said no")
    got = scrape(port)
    phase = {p: got[("sreforge_incidents", (("phase", p),))] for p in metrics.PHASES}
    assert phase["Injected"] == before[("sreforge_incidents", (("phase", "Injected"),))] + 2
    assert phase["Grading"] == before[("sreforge_incidents", (("phase", "Grading"),))]
    assert phase["Failed"] == before[("sreforge_incidents", (("phase", "Failed"),))] + 1
    key = ("sreforge_verdicts_total", (("reason", "NotCleared"),))
    assert got[key] == before[key] + 1
    assert got[("sreforge_reconcile_errors_total", (("handler", "incident_deleted"),))] >= 1
    count = ("sreforge_reconcile_duration_seconds_count", (("handler", "submission_created"),))
    assert got[count] >= 1
    assert got[("process_resident_memory_bytes", ())] > 0
    metrics.incident_gone("u-1")
    metrics.incident_gone("u-2")
    metrics.incident_gone("u-3")
    after = scrape(port)
    assert after[("sreforge_incidents", (("phase", "Injected"),))] == phase["Injected"] - 2
