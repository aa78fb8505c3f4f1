"""The diagnosis sub-oracle: did the agent understand the incident? Off in v1.

Its signals are the RCA judge's three booleans (sreforge.api.diagnosis), each weighted as
the diagnosis score weighs it. It never objects to a fix; without a diagnosis it cannot
grade, so the run is Inconclusive. v1 reports the diagnosis beside the verdict
(diagnosis.json) and weighs this sub-oracle 0, so no run consults it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sreforge.api.diagnosis import diagnosis_score
from sreforge.api.verdict import Reason, Signal, SignalName
from sreforge.oracle.contract import SubVerdict, VerifyObservations

NAME = "diagnose"

# Each boolean's share of the diagnosis score, from the score's own arithmetic.
WEIGHTS = {
    SignalName.ROOT_CAUSE_CORRECT: diagnosis_score(
        root_cause_correct=True, evidence_grounded=False, false_leads=True
    ),
    SignalName.EVIDENCE_GROUNDED: diagnosis_score(
        root_cause_correct=False, evidence_grounded=True, false_leads=True
    ),
    SignalName.NO_FALSE_LEADS: diagnosis_score(
        root_cause_correct=False, evidence_grounded=False, false_leads=False
    ),
}


def _signal(name: SignalName, value: bool | None, detail: str) -> Signal:
    return Signal(
        name=name, value=value, credit=float(bool(value)), weight=WEIGHTS[name], detail=detail
    )


@dataclass(frozen=True)
class DiagnosisOracle:
    """The diagnose sub-oracle: the RCA judge's booleans as weighted signals."""

    @property
    def name(self) -> str:
        return NAME

    def evaluate(self, obs: VerifyObservations) -> SubVerdict:
        """The diagnosis's signals; Inconclusive when no diagnosis was judged."""
        d = obs.diagnosis
        if d is None:
            return SubVerdict(
                oracle=NAME,
                signals=[_signal(name, None, "not judged") for name in WEIGHTS],
                reason=Reason.INCONCLUSIVE,
                message="no diagnosis to weigh: the RCA judge did not grade this run",
            )
        no_false_leads = not d.false_leads
        return SubVerdict(
            oracle=NAME,
            signals=[
                _signal(
                    SignalName.ROOT_CAUSE_CORRECT,
                    d.root_cause_correct,
                    "names the root cause" if d.root_cause_correct else "misses the root cause",
                ),
                _signal(
                    SignalName.EVIDENCE_GROUNDED,
                    d.evidence_grounded,
                    "backed by evidence" if d.evidence_grounded else "not backed by evidence",
                ),
                _signal(
                    SignalName.NO_FALSE_LEADS,
                    no_false_leads,
                    "blames nothing the truth rules out"
                    if no_false_leads
                    else "blames a cause the truth rules out",
                ),
            ],
            message=f"the RCA judge ({d.judge_model}) scored the diagnosis {d.score:.1f}",
        )
