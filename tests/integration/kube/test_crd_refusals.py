"""Invalid Incident and Submission specs sent to a real kube-apiserver are refused; the
rendered load Jobs' pods pass its PodSecurity admission at `restricted`.

The same hypothesis strategies as the pydantic tests (tests/hostile_values.py) draw a
bounded, derandomized sample of invalid specs; each is POSTed to a real kube-apiserver
(tests/kubeenv.py, one ControlPlane for this module) with crds/ installed. Every one
must be refused with a message naming the field, and none may be stored.

Schema violations are refused 422 (Invalid). Unknown fields are sent with
`fieldValidation=Strict` (what `kubectl` uses by default) and refused 400 (BadRequest,
"strict decoding error: unknown field"); without Strict the apiserver prunes them
silently, as it does for any structural schema.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.hostile_values import bad_spec, reproducible
from tests.kubeenv import BUILD_COMMAND, ControlPlane, find_tools_bin
from tests.reliability_cases import case
from tests.unit.test_loop import TARGET, graded_green, graded_red, operator_state, sampled, state

from sreforge import loop
from sreforge.api.resources import API_VERSION, GROUP, INCIDENT_PLURAL, VERSION
from sreforge.api.scenario import LoadProfile
from sreforge.load.k6 import render_generator_job, render_k6_job
from sreforge.mcp.shape import Refused
from sreforge.runtime.kube.client import Kube
from sreforge.runtime.kube.mcp import KubeDesk
from sreforge.runtime.kube.status import recorded_conditions, started_conditions

pytestmark = pytest.mark.kube

NS = "sreforge-refusals"
CRDS = ("incidents.sreforge.dev", "submissions.sreforge.dev")
EXAMPLES_PER_KIND = 40


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir = find_tools_bin()
    if bin_dir is None:
        pytest.skip(f"control-plane binaries are not built; build them with: {BUILD_COMMAND}")
    with ControlPlane(bin_dir, tmp_path_factory.mktemp("kube")) as cp:
        cp.install_crds()
        cp.kubectl("create", "namespace", NS)
        yield cp


@pytest.fixture(scope="module")
def custom(control_plane: ControlPlane) -> Iterator[Any]:
    from kubernetes import client, config  # noqa: PLC0415

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    api = client.CustomObjectsApi(api_client)
    # discovery of the new group lags Established by a moment
    for _ in range(240):
        try:
            api.list_namespaced_custom_object(GROUP, VERSION, NS, "incidents")
            break
        except client.exceptions.ApiException:
            time.sleep(0.25)
    yield api
    api_client.close()


def stored(custom: Any) -> int:
    return sum(
        len(custom.list_namespaced_custom_object(GROUP, VERSION, NS, plural)["items"])
        for plural in ("incidents", "submissions")
    )


def refused(custom: Any, kind: str, spec: dict[str, Any]) -> tuple[int, str]:
    """POST one object; (HTTP status, message) of the refusal, (201, "") if accepted."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    body = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"generateName": "hostile-"},
        "spec": spec,
    }
    plural = "incidents" if kind == "Incident" else "submissions"
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, plural, body, field_validation="Strict"
        )
    except ApiException as exc:
        return exc.status, str(json.loads(exc.body)["message"])
    return 201, ""


@pytest.mark.parametrize("kind", ["Incident", "Submission"])
@reproducible(EXAMPLES_PER_KIND)
@given(data=st.data())
def test_invalid_specs_are_refused_naming_the_field(
    custom: Any, kind: str, data: st.DataObject
) -> None:
    cls, spec, field = data.draw(bad_spec(kind.lower()))
    with case(f"{kind} refused by the apiserver: {cls}") as c:
        status, message = refused(custom, kind, spec)
        c.lost = stored(custom)  # a refused object that was stored anyway
        assert c.lost == 0, "the apiserver stored an invalid object"
        # a schema violation is 422 Invalid; an unknown field under Strict (also a key of an
        # object sent where a scalar belongs) is 400 BadRequest, strict decoding error
        expected = 422 if "strict decoding error" not in message else 400
        assert status == expected, (status, message, spec)
        if cls in ("unknown field", "missing"):
            assert status == {"unknown field": 400, "missing": 422}[cls], (status, message)
        assert f"spec.{field}" in message, (field, message)


# ---------------------------------------------------------------- load Jobs vs Pod Security
PSA_NS = "sreforge-restricted"


def _pod_of(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": job["metadata"]["name"], "namespace": PSA_NS},
        "spec": job["spec"]["template"]["spec"],
    }


def test_rendered_load_pods_pass_the_restricted_pod_security_standard(
    control_plane: ControlPlane,
) -> None:
    """The pods of render_k6_job / render_generator_job are admitted by the apiserver's own
    PodSecurity admission at `enforce=restricted` (non-root, no privilege escalation, all
    capabilities dropped, seccomp RuntimeDefault); the same pod without its security
    context is refused, so the check can fail."""
    cp = control_plane
    cp.kubectl("create", "namespace", PSA_NS)
    cp.kubectl("label", "namespace", PSA_NS, "pod-security.kubernetes.io/enforce=restricted")
    profile = LoadProfile(rate=50)
    jobs = {
        "k6": render_k6_job("load-k6", PSA_NS, profile, "http://catalog:8080", "load-cm"),
        "generator": render_generator_job(
            "load-gen", PSA_NS, profile, "http://catalog:8080", "sreforge-operator:test"
        ),
    }
    for name, job in jobs.items():
        with case("security: load Job pods pass PodSecurity restricted"):
            pod = _pod_of(job)
            res = cp.kubectl(
                "create", "--dry-run=server", "-f", "-", input_text=json.dumps(pod), check=False
            )
            assert res.returncode == 0, (name, res.stderr)
            stripped = json.loads(json.dumps(pod))
            for c in stripped["spec"]["containers"]:
                c.pop("securityContext")
            stripped["spec"].pop("securityContext")
            bad = cp.kubectl(
                "create",
                "--dry-run=server",
                "-f",
                "-",
                input_text=json.dumps(stripped),
                check=False,
            )
            assert bad.returncode != 0, (name, bad.stdout)
            assert 'violates PodSecurity "restricted:latest"' in bad.stderr, bad.stderr


DESK_NS = "sreforge-desk"  # its own namespace: `stored` counts NS only


def test_the_agents_submit_is_refused_once_a_verdict_ends_the_run(
    control_plane: ControlPlane, custom: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The desk behind the agent's `submit` (sreforge.runtime.kube.mcp.KubeDesk) reads the
    Incident as the operator writes it when a verdict is recorded, before the baseline is
    restored and the run marked Finished: from that write on, a verdict that ends the run
    refuses a new submit (it used to be accepted in that window, then refused by the
    operator once Finished: the agent was told "accepted" and never graded); a failed case
    that re-arms for the next takes it."""
    control_plane.kubectl("create", "namespace", DESK_NS)
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    kube = Kube()
    patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"

    def incident(name: str) -> KubeDesk:
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            DESK_NS,
            "incidents",
            {
                "apiVersion": API_VERSION,
                "kind": "Incident",
                "metadata": {"name": name},
                "spec": {"scenario": "latency-cache-stampede"},
            },
        )
        kube.update_conditions(INCIDENT_PLURAL, DESK_NS, name, started_conditions())
        return KubeDesk(kube, DESK_NS, name)

    # a failed case that re-arms (the operator's default: cases until one passes): the
    # next submit is taken, and waits for the alert to fire again
    rearms = operator_state()
    graded_red(rearms)
    desk = incident("rearms")
    kube.update_conditions(INCIDENT_PLURAL, DESK_NS, "rearms", recorded_conditions(rearms, "s1"))
    assert desk.submit(patch).startswith("accepted: Submission sreforge-desk/rearms-mcp-")

    # a pass ends the run: refused from the verdict's write on, naming why; so does a
    # failed last case (one case, as `sreforge run` grades)
    passes = operator_state()
    graded_red(passes)
    loop.step(passes, loop.Restored(t=6))
    loop.step(passes, sampled(7, TARGET))
    graded_green(passes, 7)
    last = state()
    graded_red(last)
    for name, ended in (("passes", passes), ("last", last)):
        desk = incident(name)
        kube.update_conditions(INCIDENT_PLURAL, DESK_NS, name, recorded_conditions(ended, "s2"))
        reason = ended.verdict.reason.value if ended.verdict is not None else None
        with pytest.raises(
            Refused, match=rf"the Incident is finished \(Submission s2's verdict \({reason}\)"
        ):
            desk.submit(patch)
    made = [
        s["metadata"]["name"]
        for s in custom.list_namespaced_custom_object(GROUP, VERSION, DESK_NS, "submissions")[
            "items"
        ]
    ]
    assert len(made) == 1, made
    assert made[0].startswith("rearms-mcp-"), made
