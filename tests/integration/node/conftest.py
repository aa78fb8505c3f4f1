"""One real single-node cluster (tests/localcluster.py) for the tests of this directory.

Real pods on a real kubelet with containerd, real Services through kube-proxy, CoreDNS.
Needs root, the Debian packages of `scripts/setup.sh --cluster`, the binaries of
`hack/k8s-tools.sh` and the images of `hack/images.sh`; skipped (a failure in CI) with
what is missing.
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
    with LocalCluster(bin_dir, tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster
