"""One real single-node cluster (tests/localcluster.py) for the tests of this directory.

Real pods on a real kubelet with containerd, real Services through kube-proxy, CoreDNS.
Needs root, the Debian packages of `scripts/setup.sh --cluster`, the binaries of
`hack/k8s-tools.sh` and the images of `hack/images.sh`; skipped (a failure in CI) with
what is missing.

The cluster is stopped as soon as the last test that uses it is done, not at the end of
the session: its control plane, and any pod a test left behind, must not take the CPU of
the tests that run after it (the graded local runs measure latency on the same 2 cores).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from tests.kubeenv import REPO_ROOT, find_tools_bin
from tests.localcluster import LocalCluster, missing_prerequisites


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    bin_dir = find_tools_bin()
    missing = missing_prerequisites(bin_dir)
    if missing:
        pytest.skip("no real node here; missing: " + ", ".join(missing))
    assert bin_dir is not None
    # the images the tests use, built when their inputs changed (cached layers when warm);
    # the cluster imports them into its containerd once that is up
    subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "images.sh"), "build"], check=True, timeout=1800
    )
    cluster = LocalCluster(bin_dir, tmp_path_factory.mktemp("cluster")).start()
    _RUNNING.append(cluster)
    try:
        yield cluster
    finally:
        _stop_running()


# The running cluster (at most one), and the id of the last selected test that uses it.
_RUNNING: list[LocalCluster] = []
_LAST_USER: list[str] = []


def _stop_running() -> None:
    while _RUNNING:
        _RUNNING.pop().stop()


def pytest_collection_finish(session: pytest.Session) -> None:
    # after deselection (-m, -k): the last test that will run, not the last collected
    users = [i.nodeid for i in session.items if "local_cluster" in getattr(i, "fixturenames", ())]
    _LAST_USER[:] = users[-1:]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """After the last user's own teardown (its module's fixtures included), the cluster
    goes; the session fixture's teardown then finds nothing left to stop."""
    if _LAST_USER and item.nodeid == _LAST_USER[0]:
        _stop_running()
