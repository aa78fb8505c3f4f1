"""The audit collector (substrate/audit), the upstream of saturation-ihatemoney-sync-audit,
behaves as its scenario's grading needs: a real process on 127.0.0.1.

It stores the valid events of a batch and rejects the others; a write whose sender hung
up before it finished is discarded (so a sender with a short timeout loses its events,
which is what the scenario's AuditEventsLost alert reads); bad bodies get a clear 4xx.
Takes ~3 s.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.kubeenv import REPO_ROOT, wait_for

from sreforge.runtime.process import Managed, free_port

WRITE_SECONDS = 0.3


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {
        "PORT": str(port),
        "AUDIT_WRITE_SECONDS": f"{WRITE_SECONDS},{WRITE_SECONDS}",
        "AUDIT_WORKERS": "4",
    }
    proc = Managed(
        "audit",
        ["python", "-m", "audit"],
        log_path=tmp_path_factory.mktemp("audit") / "audit.log",
        cwd=REPO_ROOT / "substrate" / "audit",
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_http(url + "/healthz", timeout=30)
        yield url
    finally:
        proc.stop()


def post(url: str, body: bytes, timeout: float = 5.0) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url + "/v1/events", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def counts(url: str) -> dict[str, float]:
    """audit_events_received_total by outcome, from the collector's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "audit_events_received"
        for sample in family.samples
        if sample.name == "audit_events_received_total"
    }


def event(n: int) -> dict[str, object]:
    return {"time": 1.0 + n, "method": "GET", "path": f"/api/projects/group-{n}", "status": 200}


def test_a_batch_stores_its_valid_events_and_rejects_the_rest(collector: str) -> None:
    before = counts(collector)
    bad = [{"time": "now", "method": "GET", "path": "/x", "status": 200}, {"status": 700}, 3]
    status, answer = post(collector, json.dumps([event(1), event(2), *bad]).encode())
    assert (status, answer) == (201, {"stored": 2, "rejected": 3})
    after = counts(collector)
    assert after["stored"] - before["stored"] == 2
    assert after["rejected"] - before["rejected"] == 3
    # one event on its own is a batch of one
    assert post(collector, json.dumps(event(3)).encode()) == (201, {"stored": 1, "rejected": 0})


def test_a_write_whose_sender_hung_up_is_discarded(collector: str) -> None:
    before = counts(collector)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post(collector, json.dumps([event(n) for n in range(5)]).encode(), timeout=0.05)

    def settled() -> bool:
        return counts(collector)["abandoned"] - before["abandoned"] == 5

    wait_for("the hung-up write to be counted as abandoned", settled, timeout=10)
    time.sleep(WRITE_SECONDS)  # nothing of it is stored later either
    assert counts(collector)["stored"] == before["stored"]


def test_bad_bodies_get_a_clear_refusal(collector: str) -> None:
    status, answer = post(collector, b"not json")
    assert status == 400
    assert "JSON" in str(answer["error"])
    status, answer = post(collector, json.dumps([event(1)] * 5001).encode())
    assert status == 413
    assert "5000" in str(answer["error"])
