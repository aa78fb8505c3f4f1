"""What the operator writes to status: conditions, a Submission's grade, the CI gate's result
from its Job, and the loop state it persists in an Incident's `status.loop`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sreforge.api.observation import CIResult, CIStatus
from sreforge.api.resources import Condition
from sreforge.api.verdict import Verdict
from sreforge.loop import Phase, RunState, more_cases

# a condition's message is cut here, inside metav1.Condition's 32 KiB
MAX_MESSAGE = 32_000


def condition(type_: str, status: bool | None, reason: str, message: str = "") -> Condition:
    """A condition as of now: status True, False or (None) Unknown, the message cut to fit."""
    return Condition(
        type=type_,
        status="Unknown" if status is None else "True" if status else "False",
        reason=reason,
        message=message[:MAX_MESSAGE],
        last_transition_time=datetime.now(tz=UTC).replace(microsecond=0),
    )


def set_condition(
    conditions: Sequence[Condition], new: Condition, generation: int | None = None
) -> list[Condition]:
    """`conditions` with `new` upserted by type. cert-manager's rule: lastTransitionTime
    changes only when the status does; without a generation the old observedGeneration stays."""
    out = list(conditions)
    for i, old in enumerate(out):
        if old.type == new.type:
            out[i] = new.model_copy(
                update={
                    "last_transition_time": (
                        old.last_transition_time
                        if old.status == new.status
                        else new.last_transition_time
                    ),
                    "observed_generation": (
                        old.observed_generation if generation is None else generation
                    ),
                }
            )
            return out
    out.append(
        new if generation is None else new.model_copy(update={"observed_generation": generation})
    )
    return out


def ci_condition(res: CIResult) -> Condition:
    """CIPassed for the CI gate's result."""
    reason = "Green" if res.green else res.status.value.capitalize()
    return condition("CIPassed", res.green, reason, res.reason)


def verdict_condition(type_: str, verdict: Verdict) -> Condition:
    """A condition (Verified, Succeeded) that tells a verdict."""
    return condition(type_, verdict.passed, verdict.reason.value, verdict.message)


def graded_condition(verdict: Verdict) -> Condition:
    """A Submission's terminal condition: True once it has a verdict, whatever the verdict
    (`kubectl wait --for=condition=Graded`); `Verified` says whether it passed."""
    return condition("Graded", True, verdict.reason.value, verdict.message)


def refused(reason: str, message: str) -> list[Condition]:
    """A Submission that will never be graded: not accepted, not graded, for this reason."""
    return [
        condition("Accepted", False, reason, message),
        condition("Graded", False, reason, f"never graded: {message}"),
    ]


# AwaitingSubmission's reason from the moment a verdict that ends the run is recorded until
# the run is Finished (the baseline build is restored in between): no Submission is taken.
FINISHING = "Finishing"


def recorded_conditions(state: RunState, submission: str | None) -> list[Condition]:
    """An Incident's conditions as a verdict is recorded, before the baseline is restored.

    `Verified` is the verdict's. A verdict that ends the run (`loop.more_cases` is false:
    a pass, a harness fault, the last case) also sets `AwaitingSubmission` to `Finishing` in
    the same write, so that nobody who reads the Submission graded takes the Incident for
    open while its baseline comes back (the agent's `submit` refuses from then on).
    """
    verdict = state.verdict
    assert verdict is not None
    out = [verdict_condition("Verified", verdict)]
    if not more_cases(state):
        of = f"Submission {submission}'s" if submission is not None else "the"
        out.append(
            condition(
                "AwaitingSubmission",
                False,
                FINISHING,
                f"{of} verdict ({verdict.reason.value}) ends the run; the baseline build is "
                "being restored",
            )
        )
    return out


def started_conditions() -> list[Condition]:
    """An Incident's conditions as its run starts."""
    return [
        condition("Injected", None, "Pending", "starting the run"),
        condition("Finished", False, "Running", "the run is in progress"),
        condition("Succeeded", None, "Running", "the run is in progress"),
    ]


def finished_conditions(p: Persisted, not_injected: str | None = None) -> list[Condition]:
    """An Incident's conditions once its run is over, each true of the end state.

    `Finished` is True whatever the outcome (`kubectl wait --for=condition=Finished`), with
    the verdict's reason; `Succeeded` says whether it passed. A condition still showing a
    step in progress (injecting, waiting for the alert, re-arming) says why it never got
    there (`not_injected`: the reason the injection waited for, e.g. DeploymentNotFound); a
    step that did happen keeps its condition.
    """
    st = p.state
    verdict = st.verdict
    assert verdict is not None
    why = st.fault or verdict.message
    out: list[Condition] = []
    injected = st.injected_at is not None or st.graded > 0
    if not injected:
        out.append(
            condition(
                "Injected",
                False,
                not_injected or verdict.reason.value,
                f"the regressed build was never rolled out: {why}",
            )
        )
    if st.fired_at is None:
        out.append(
            condition(
                "AlertFiring",
                False,
                verdict.reason.value if injected else "NotInjected",
                verdict.message if injected else "nothing was injected",
            )
        )
    out += [
        condition("AwaitingSubmission", False, "Finished", "the run is over"),
        condition("Finished", True, verdict.reason.value, verdict.message),
        verdict_condition("Succeeded", verdict),
    ]
    return out


def conditions_of(obj: dict[str, Any]) -> list[Condition]:
    """An object's `status.conditions` as models."""
    raw = (obj.get("status") or {}).get("conditions") or []
    return [Condition.model_validate(c) for c in raw]


def condition_of(obj: dict[str, Any], type_: str) -> Condition | None:
    """The object's condition of this type, or None."""
    return next((c for c in conditions_of(obj) if c.type == type_), None)


def is_queued(submission: dict[str, Any]) -> bool:
    """Whether the Submission waits for its turn (Accepted=False, reason Queued)."""
    accepted = condition_of(submission, "Accepted")
    return accepted is not None and accepted.reason == "Queued"


def ci_result_of(
    ok: bool, details: dict[str, Any], test_command: list[str], seconds: float, files: list[str]
) -> CIResult:
    """The CI gate's result from the Job's outcome and its containers' termination messages."""
    boxes = details.get("containers") or []
    failed = [b for b in boxes if b["exitCode"]]
    if ok:
        main = next((b for b in boxes if b["name"] == "test"), None)
        return CIResult(
            status=CIStatus.GREEN,
            reason="build and tests passed",
            output_tail=(main or {}).get("message", ""),
            duration_seconds=seconds,
            files_changed=files,
        )
    if failed and failed[0]["name"] == "patch":
        return CIResult(
            status=CIStatus.REJECTED,
            reason=(failed[0]["message"] or "the patch did not apply").strip()[:2000],
            duration_seconds=seconds,
            files_changed=files,
        )
    if failed and failed[0]["name"] == "test":
        return CIResult(
            status=CIStatus.RED,
            reason=f"`{shlex.join(test_command)}` exited {failed[0]['exitCode']}",
            output_tail=failed[0]["message"],
            duration_seconds=seconds,
            files_changed=files,
        )
    why = details.get("jobReason") or (failed[0]["message"] if failed else "")
    return CIResult(
        status=CIStatus.ERROR,
        reason=f"CI Job failed: {why}"[:2000],
        duration_seconds=seconds,
        files_changed=files,
    )


def verdict_status(verdict: Verdict, ci_res: CIResult | None) -> dict[str, Any]:
    """A Verdict as Submission status fields."""
    feedback = ""
    if ci_res is not None:
        feedback = f"CI {ci_res.status.value}: {ci_res.reason}"
        if ci_res.output_tail:
            feedback += "\n" + ci_res.output_tail
    return {
        "passed": verdict.passed,
        "score": round(verdict.score, 4),
        "reason": verdict.reason.value,
        "ciFeedback": feedback[:60_000],
        "signals": {
            s.name.value: {
                "value": s.value,
                "credit": round(s.credit, 4),
                "weight": s.weight,
                "detail": s.detail[:1000],
            }
            for s in verdict.signals
        },
    }


@dataclass
class Persisted:
    """What status.loop holds: the loop state plus the driver's own bookkeeping."""

    state: RunState
    submission: str | None = None
    graded: list[str] = field(default_factory=list)
    baseline_image: str | None = None
    baseline_workdir: str | None = None
    # the pod template's labels before the injection: what the run added goes on delete
    baseline_labels: dict[str, str] | None = None
    # the target container's env entries the dependencies replace (None: it had none)
    baseline_env: dict[str, dict[str, Any] | None] | None = None
    # the pod template's ServiceAccount and token setting before the injection
    # (sreforge.runtime.kube.policy.pod_identity): what the run changed goes on delete
    baseline_identity: dict[str, Any] | None = None
    # the patched build as rolled out (sreforge.runtime.kube.guard.snapshot), compared at
    # every sample while it is verified; None outside verification
    rolled_out: dict[str, Any] | None = None
    finished: bool = False

    def dump(self) -> dict[str, Any]:
        return {
            # the soak key stays with the operator (derived again on resume: oracle.soak)
            "state": self.state.model_dump(mode="json", exclude={"soak_key"}),
            "submission": self.submission,
            "graded": self.graded,
            "baselineImage": self.baseline_image,
            "baselineWorkdir": self.baseline_workdir,
            "baselineLabels": self.baseline_labels,
            "baselineEnv": self.baseline_env,
            "baselineIdentity": self.baseline_identity,
            "rolledOut": self.rolled_out,
            "finished": self.finished,
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> Persisted:
        return cls(
            state=RunState.model_validate(data["state"]),
            submission=data.get("submission"),
            graded=list(data.get("graded") or []),
            baseline_image=data.get("baselineImage"),
            baseline_workdir=data.get("baselineWorkdir"),
            baseline_labels=data.get("baselineLabels"),
            baseline_env=data.get("baselineEnv"),
            baseline_identity=data.get("baselineIdentity"),
            rolled_out=data.get("rolledOut"),
            finished=bool(data.get("finished")),
        )


def incident_phase(p: Persisted) -> str:
    st = p.state
    if p.finished:
        return "Succeeded" if st.verdict is not None and st.verdict.passed else "Failed"
    return {
        Phase.PENDING: "Pending",
        Phase.INJECTING: "Injecting",
        Phase.AWAITING_FIRE: "Injected",
        Phase.AWAITING_SUBMISSION: "AwaitingSubmission",
        Phase.CI: "Grading",
        Phase.DEPLOYING: "Grading",
        Phase.VERIFYING: "Grading",
        Phase.RESTORING: "Restoring",
        Phase.DONE: "Restoring",
    }[st.phase]
