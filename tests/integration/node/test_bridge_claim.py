"""A run killed before it could stop its cluster must not refuse every later run.

Stop 21's CI failed on one error: `bridge sfbr0 exists: another local cluster runs`. An
earlier pytest on the machine had been killed mid-session; its bridge, mounts and network
namespaces outlived it, and the check refused any new cluster. The cluster now keeps a
machine-wide record (``BridgeClaim``) of its owner and of every process it starts; the next
start reclaims a dead run's leftovers, and still refuses a cluster that lives.

These tests use a bridge of their own name and a record file of their own (real bridges,
real processes); they run before the directory's shared cluster starts (file order), so the
reclaim never meets a live node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.kubeenv import ControlPlaneError
from tests.localcluster import BridgeClaim, LocalCluster, _start_time

BRIDGE = "sfbrtest0"

OWNER = """
import subprocess, sys, time
from pathlib import Path
from tests.localcluster import BridgeClaim
claim = BridgeClaim({bridge!r}, Path({record!r}))
claim.claim(Path({work!r}))
subprocess.run(["ip", "link", "add", {bridge!r}, "type", "bridge"], check=True)
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
claim.record_pids({{"containerd": child.pid}})
print(child.pid, flush=True)
time.sleep(300)
"""


@pytest.fixture
def claim(tmp_path: Path) -> Iterator[BridgeClaim]:
    if os.geteuid() != 0:
        pytest.fail("needs root (it makes a bridge)")
    c = BridgeClaim(BRIDGE, tmp_path / "run" / "local-cluster.json")
    yield c
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


@contextmanager
def _owner(claim: BridgeClaim, work: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process that claims the bridge and starts a child it records (a stand-in for
    containerd); both are killed at the end, whatever the test did to them."""
    work.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(bridge=BRIDGE, record=str(claim.path), work=str(work))],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    try:
        yield owner, child
    finally:
        if owner.poll() is None:
            owner.kill()
        if _start_time(child) is not None:
            os.kill(child, signal.SIGKILL)


def _cluster(claim: BridgeClaim, tmp_path: Path) -> LocalCluster:
    return LocalCluster(Path("/nonexistent"), tmp_path / "next-run", claim=claim)


def test_a_killed_runs_bridge_and_processes_are_reclaimed(
    claim: BridgeClaim, tmp_path: Path
) -> None:
    with _owner(claim, tmp_path / "killed-run") as (owner, child):
        # while its owner lives the cluster is in use: refused, nothing touched
        running = f"owned by a local cluster that runs: process {owner.pid}"
        with pytest.raises(ControlPlaneError, match=running):
            _cluster(claim, tmp_path).reclaim()
        assert claim.bridge_exists()
        assert _start_time(child) is not None

        owner.send_signal(signal.SIGKILL)  # as CI's or a user's kill does: no teardown runs
        owner.wait(timeout=10)
        assert claim.bridge_exists()
        assert _start_time(child) is not None

        done = _cluster(claim, tmp_path).reclaim()
        assert done is not None
        assert f"process {owner.pid} left in {tmp_path / 'killed-run'}" in done
        assert "stopped: containerd" in done
        assert not claim.bridge_exists()
        assert _start_time(child) is None
        assert claim.read() is None
        # and then the bridge is free: nothing more to reclaim
        assert _cluster(claim, tmp_path).reclaim() is None


def test_a_cluster_left_up_on_purpose_is_refused_and_kept(
    claim: BridgeClaim, tmp_path: Path
) -> None:
    with _owner(claim, tmp_path / "shell-cluster") as (owner, child):
        claim.mark_persistent()  # as `hack/local-cluster.sh up` does before it exits
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        with pytest.raises(ControlPlaneError) as err:
            _cluster(claim, tmp_path).reclaim()
        assert f"hack/local-cluster.sh down --dir {tmp_path / 'shell-cluster'}" in str(err.value)
        assert "containerd" in str(err.value)
        assert claim.bridge_exists()
        assert _start_time(child) is not None
        assert claim.read() is not None


def test_a_bridge_nobody_recorded_is_named_and_left_alone(
    claim: BridgeClaim, tmp_path: Path
) -> None:
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    unrecorded = f"bridge {BRIDGE} exists and no cluster record is at {claim.path}"
    with pytest.raises(ControlPlaneError, match=unrecorded):
        _cluster(claim, tmp_path).reclaim()
    assert claim.bridge_exists()
