"""The real control plane (tests/kubeenv.py) shared by the Kubernetes tests of a module.

Needs the binaries of hack/k8s-tools.sh; skipped, with the command to build them, when
they are not there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.kubeenv import BUILD_COMMAND, ControlPlane, find_tools_bin


@pytest.fixture(scope="module")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A module's control plane; a module's ``POD_CIDR`` sets the fake pods' IP range."""
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    pod_cidr = getattr(request.module, "POD_CIDR", None)
    with ControlPlane(bin_dir, tmp_path_factory.mktemp("kube"), pod_cidr=pod_cidr) as cp:
        yield cp
