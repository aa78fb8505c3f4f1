"""A new Submission's intake: refuse what cannot be graded, vet the patch, queue the rest."""

from __future__ import annotations

from typing import Any

from sreforge import oracle
from sreforge.api.observation import CIResult, CIStatus
from sreforge.api.resources import SUBMISSION_PLURAL, Condition, IncidentSpec, SubmissionSpec
from sreforge.api.scenario import ScenarioError, VerifySpec
from sreforge.api.verdict import Verdict
from sreforge.runtime import ci
from sreforge.runtime.kube.client import Kube, KubeError
from sreforge.runtime.kube.config import OperatorConfig, effective_verify
from sreforge.runtime.kube.status import condition, condition_of, verdict_status


def submission_patch(kube: Kube, ns: str, spec: SubmissionSpec) -> str:
    if spec.patch.inline is not None:
        return spec.patch.inline
    ref = spec.patch.config_map_key_ref
    assert ref is not None
    return kube.read_configmap_key(ns, ref.name, ref.key)


def rejected_verdict(verify: VerifySpec, alert: str, reason: str) -> tuple[Verdict, CIResult]:
    ci_res = CIResult(status=CIStatus.REJECTED, reason=reason[:2000])
    obs = oracle.VerifyObservations(
        target_alert=alert,
        ci=ci_res,
        redeployed_at=None,
        active_before_redeploy=frozenset(),
        samples=[],
    )
    return oracle.evaluate(obs, verify), ci_res


def admit_submission(kube: Kube, cfg: OperatorConfig, sub: dict[str, Any]) -> None:
    """First look at a new Submission: refuse what cannot be graded, vet the patch in-process
    (a rejected patch is graded red at once), queue the rest for the Incident's driver."""
    if condition_of(sub, "Accepted") is not None:
        return
    ns, name = sub["metadata"]["namespace"], sub["metadata"]["name"]

    def cond(updates: list[Condition], extra: dict[str, Any] | None = None) -> None:
        kube.update_conditions(SUBMISSION_PLURAL, ns, name, updates, extra)

    spec = SubmissionSpec.model_validate(sub.get("spec") or {})
    inc_name = spec.incident_ref.name
    inc = kube.get_incident(ns, inc_name)
    if inc is None:
        cond(
            [
                condition(
                    "Accepted",
                    False,
                    "IncidentNotFound",
                    f"no Incident {inc_name!r} in namespace {ns}",
                )
            ]
        )
        return
    loop_status = (inc.get("status") or {}).get("loop") or {}
    if loop_status.get("finished"):
        cond(
            [
                condition(
                    "Accepted",
                    False,
                    "IncidentFinished",
                    f"Incident {inc_name} is finished ({(inc.get('status') or {}).get('phase')})",
                )
            ]
        )
        return
    try:
        scenario = cfg.scenario(IncidentSpec.model_validate(inc["spec"]).scenario)
    except ScenarioError as exc:
        cond([condition("Accepted", False, "ScenarioNotFound", str(exc))])
        return
    try:
        patch = submission_patch(kube, ns, spec)
        ci.vet_patch(patch, scenario.protected)
    except (ci.PatchRejected, KubeError) as exc:
        incident_spec = IncidentSpec.model_validate(inc["spec"])
        verdict, ci_res = rejected_verdict(
            effective_verify(scenario, incident_spec), scenario.target_alert, str(exc)
        )
        cond(
            [
                condition(
                    "Accepted", True, "Vetted", "graded without a run: the patch was refused"
                ),
                condition("CIPassed", False, "PatchRejected", str(exc)),
                condition("Verified", False, verdict.reason.value, verdict.message),
            ],
            verdict_status(verdict, ci_res),
        )
        return
    phase = (inc.get("status") or {}).get("phase") or "Pending"
    cond(
        [
            condition(
                "Accepted",
                False,
                "Queued",
                f"waiting for Incident {inc_name} (phase {phase}); "
                "one Submission is graded at a time",
            )
        ]
    )
