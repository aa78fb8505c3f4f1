"""The compound oracle: weighted sub-oracles, one pure combiner, one Verdict.

The SRE lifecycle (detect, diagnose, mitigate) is graded by sub-oracles (contract.py),
each with its own signals and reason; `[verify.oracles]` weighs them. v1 weighs mitigate
alone at 1, so the Verdict is the mitigation's: score, signals, reason and message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sreforge.api.observation import CIResult, CIStatus
from sreforge.api.scenario import VerifySpec
from sreforge.api.verdict import Reason, Verdict
from sreforge.oracle import diagnose, mitigate
from sreforge.oracle.contract import SubOracle, SubVerdict, VerifyObservations

# The failures of what a fix did under load: a sub-oracle's excuse (the run was
# starved by other work) turns them Inconclusive.
BEHAVIOURAL_FAILURES = frozenset(
    {Reason.NOT_CLEARED, Reason.REFIRED, Reason.LOAD_NOT_DELIVERED, Reason.NEW_ALERTS}
)

# The sub-oracles by their `[verify.oracles]` names, in precedence order: the first one
# that objects gives the verdict its reason, and mitigate, the gate of every run, is first.
ORACLES: Mapping[str, Callable[[VerifySpec], SubOracle]] = {
    mitigate.NAME: mitigate.MitigationOracle,
    diagnose.NAME: lambda _verify: diagnose.DiagnosisOracle(),
}


def configured(verify: VerifySpec) -> list[tuple[float, SubOracle]]:
    """The weighted sub-oracles of `verify.oracles`; one weighted 0 is off."""
    weights = verify.oracles.model_dump()
    return [(weights[name], make(verify)) for name, make in ORACLES.items() if weights[name] > 0]


def combine(parts: Sequence[tuple[float, SubVerdict]], pass_threshold: float) -> Verdict:
    """One Verdict from weighted sub-verdicts (weights sum to 1); pure.

    - signals: every sub-oracle's, each weight scaled by its sub-oracle's weight, so the
      score is the sum of their points;
    - the first sub-oracle that objects fails the run with its reason and message;
    - else the run passes at or above the bar, and below it takes the first shortfall;
    - a behavioural failure that a sub-oracle excuses is Inconclusive, with the signals
      and score as measured.
    """
    if not parts:
        raise ValueError("a compound oracle needs at least one sub-oracle")
    total = sum(weight for weight, _ in parts)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"sub-oracle weights must sum to 1.0, they sum to {total:.4f}")
    subs = [sub for _, sub in parts]
    signals = [
        signal.model_copy(update={"weight": weight * signal.weight})
        for weight, sub in parts
        for signal in sub.signals
    ]
    names = [signal.name for signal in signals]
    if len(set(names)) != len(names):
        raise ValueError(f"sub-oracles share a signal name: {sorted(names)}")
    score = round(sum(signal.points for signal in signals), 4)

    objections = [(sub.reason, sub.message) for sub in subs if sub.reason is not None]
    passed = not objections and score >= pass_threshold
    if objections:
        reason, message = objections[0]
    elif passed:
        reason, message = Reason.PASSED, "; ".join(sub.message for sub in subs if sub.message)
    else:
        reason = next((sub.shortfall for sub in subs if sub.shortfall), Reason.NOT_CLEARED)
        message = f"score {score:.3f} is below the pass bar {pass_threshold:.2f}"
    excuse = next((sub.excuse for sub in subs if sub.excuse), None)
    if not passed and reason in BEHAVIOURAL_FAILURES and excuse:
        reason, message = Reason.INCONCLUSIVE, f"{reason.value} while {excuse} [{message}]"

    new_alerts: list[str] = []
    for sub in subs:
        new_alerts += [name for name in sub.new_alerts if name not in new_alerts]
    return Verdict(
        signals=signals,
        score=score,
        pass_threshold=pass_threshold,
        passed=passed,
        reason=reason,
        message=message,
        time_to_clear_seconds=next(
            (s.time_to_clear_seconds for s in subs if s.time_to_clear_seconds is not None), None
        ),
        cleared_at=next((s.cleared_at for s in subs if s.cleared_at is not None), None),
        new_alerts=new_alerts,
    )


def evaluate(obs: VerifyObservations, verify: VerifySpec) -> Verdict:
    """Score a submission from its observations: every configured sub-oracle, combined.

    A behavioural failure while the run was starved by other work (mitigate.MIN_OUTSIDE_CPU
    and mitigate.MAX_CPU_WAIT) is Inconclusive: the signals stay as measured, the run is
    not passed, and the reason says why.
    """
    parts = [(weight, oracle.evaluate(obs)) for weight, oracle in configured(verify)]
    return combine(parts, verify.pass_threshold)


def never_fired(verify: VerifySpec, target_alert: str, waited_seconds: float) -> Verdict:
    """The incident never became one: it is not handed to an agent and nothing is scored."""
    # Every sub-oracle sees a run in which nothing happened: no CI, no redeploy, no sample.
    nothing = VerifyObservations(
        target_alert=target_alert, ci=CIResult(status=CIStatus.ERROR), redeployed_at=None
    )
    return evaluate(nothing, verify).model_copy(
        update={
            "score": 0.0,
            "passed": False,
            "reason": Reason.ALERT_NEVER_FIRED,
            "message": (
                f"{target_alert} did not fire within {waited_seconds:.0f}s of the injection"
            ),
        }
    )
