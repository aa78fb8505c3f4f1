"""A new Submission's intake: refuse what cannot be graded, vet the patch, queue the rest.

The patch is read from its source (spec.patch inline or its configMapKeyRef) and vetted here
once per Submission; the vetted text goes to a ConfigMap of the Incident's (`patch_cm_name`)
that the CI Job mounts and the driver reads (`read_vetted`), so no later step reads the
user's source again and a restarted operator still finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sreforge import oracle
from sreforge.api.observation import CIResult, CIStatus
from sreforge.api.resources import SUBMISSION_PLURAL, Condition, IncidentSpec, SubmissionSpec
from sreforge.api.scenario import ScenarioError, VerifySpec
from sreforge.api.verdict import Verdict
from sreforge.runtime import ci
from sreforge.runtime.kube import events, metrics
from sreforge.runtime.kube.client import Kube, KubeError
from sreforge.runtime.kube.config import FILES_KEY, PATCH_KEY, OperatorConfig, effective_verify
from sreforge.runtime.kube.render import patch_cm_name, patch_configmap
from sreforge.runtime.kube.status import (
    condition,
    condition_of,
    graded_condition,
    is_queued,
    refused,
    verdict_status,
)


@dataclass(frozen=True)
class VettedPatch:
    """A Submission's patch as intake vetted it, and the paths it changes."""

    text: str
    files: list[str]


def submission_patch(kube: Kube, ns: str, spec: SubmissionSpec) -> str:
    """The patch from the Submission's source: inline, or the key of its ConfigMap."""
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


def read_vetted(kube: Kube, ns: str, incident: str, submission: str) -> VettedPatch:
    """The patch intake vetted for this Submission, from its ConfigMap."""
    name = patch_cm_name(incident, submission)
    data = kube.read_configmap(ns, name)
    if PATCH_KEY not in data:
        raise KubeError(f"ConfigMap {ns}/{name} has no key {PATCH_KEY!r}")
    return VettedPatch(data[PATCH_KEY], data.get(FILES_KEY, "").splitlines())


def _of_incident(kube: Kube, ns: str, incident: str) -> list[dict[str, Any]]:
    return [
        s
        for s in kube.list_submissions(ns)
        if (s.get("spec") or {}).get("incidentRef", {}).get("name") == incident
    ]


def next_queued(kube: Kube, ns: str, incident: str, graded: list[str]) -> str | None:
    """The oldest Queued Submission for the Incident not graded yet, or None."""
    queued = [
        s
        for s in _of_incident(kube, ns, incident)
        if s["metadata"]["name"] not in graded and is_queued(s)
    ]
    queued.sort(key=lambda s: (s["metadata"]["creationTimestamp"], s["metadata"]["name"]))
    return queued[0]["metadata"]["name"] if queued else None


def refuse_queued(kube: Kube, ns: str, incident: str, reason: str, message: str) -> None:
    """Every Submission still Queued for the Incident refused, its stored patch deleted."""
    for s in _of_incident(kube, ns, incident):
        if is_queued(s):
            name = s["metadata"]["name"]
            kube.update_conditions(SUBMISSION_PLURAL, ns, name, refused(reason, message))
            kube.post_event(events.event(s, events.WARNING, reason, message))
            kube.delete_configmap(ns, patch_cm_name(incident, name))


def admit_submission(kube: Kube, cfg: OperatorConfig, sub: dict[str, Any]) -> None:
    """First look at a new Submission: refuse what cannot be graded, vet the patch in-process
    (a rejected patch is graded red at once), store the vetted one and queue the Submission
    for the Incident's driver."""
    if condition_of(sub, "Accepted") is not None:
        return
    ns, name = sub["metadata"]["namespace"], sub["metadata"]["name"]

    def cond(updates: list[Condition], extra: dict[str, Any] | None = None) -> None:
        kube.update_conditions(SUBMISSION_PLURAL, ns, name, updates, extra)

    def refuse(reason: str, message: str) -> None:
        cond(refused(reason, message))
        kube.post_event(events.event(sub, events.WARNING, reason, message))

    spec = SubmissionSpec.model_validate(sub.get("spec") or {})
    inc_name = spec.incident_ref.name
    inc = kube.get_incident(ns, inc_name)
    if inc is None:
        refuse("IncidentNotFound", f"no Incident {inc_name!r} in namespace {ns}")
        return
    loop_status = (inc.get("status") or {}).get("loop") or {}
    if loop_status.get("finished"):
        phase = (inc.get("status") or {}).get("phase")
        refuse("IncidentFinished", f"Incident {inc_name} is finished ({phase})")
        return
    try:
        scenario = cfg.scenario(IncidentSpec.model_validate(inc["spec"]).scenario)
    except ScenarioError as exc:
        refuse("ScenarioNotFound", str(exc))
        return
    try:
        patch = submission_patch(kube, ns, spec)
        files = ci.vet_patch(patch, scenario.protected)
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
                graded_condition(verdict),
            ],
            verdict_status(verdict, ci_res),
        )
        metrics.verdict(verdict.reason)
        kube.post_event(
            events.event(
                sub,
                events.verdict_type(verdict),
                verdict.reason.value,
                events.verdict_message(verdict, name),
            )
        )
        return
    # before Queued: the driver grades only Queued Submissions, and reads this
    kube.put_configmap(patch_configmap(patch_cm_name(inc_name, name), ns, patch, files, inc, "ci"))
    phase = (inc.get("status") or {}).get("phase") or "Pending"
    cond(
        [
            condition(
                "Accepted",
                False,
                "Queued",
                f"waiting for Incident {inc_name} (phase {phase}); "
                "one Submission is graded at a time",
            ),
            condition("Graded", False, "Queued", "waiting for its turn"),
        ]
    )
