"""The sub-oracle contract: what every sub-oracle reads and what it answers.

A sub-oracle grades one dimension of the SRE lifecycle (detect, diagnose, mitigate) from
the recorded observations and answers a SubVerdict: its own signals and its own reason.
The compound (sreforge.oracle.compound) weighs the answers into one Verdict.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from sreforge.api.diagnosis import Diagnosis
from sreforge.api.observation import AlertSample, CIResult
from sreforge.api.verdict import Reason, Signal


class VerifyObservations(BaseModel):
    """Everything the oracle needs, as recorded by the runtime."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_alert: str
    ci: CIResult
    redeployed_at: float | None
    # Alerts pending or firing at the last sample before the redeploy: their episode began
    # under the old build, so carrying on into firing after the redeploy is not new.
    active_before_redeploy: frozenset[str] = frozenset()
    samples: list[AlertSample] = []
    # The soak drawn for this case (oracle.soak): after the sustained window, the fix must
    # keep holding this many seconds more. 0: no soak.
    soak_seconds: float = 0.0
    # The RCA judge's report, for the diagnose sub-oracle; v1's runtime never sets it.
    diagnosis: Diagnosis | None = None


class SubVerdict(BaseModel):
    """One sub-oracle's answer: its signals and its own reason, before the pass bar.

    Signal weights are shares of this sub-oracle (they sum to 1). `reason` is an objection
    that fails the run whatever the score (fail closed); None leaves it to the score.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    oracle: str = Field(min_length=1)
    signals: list[Signal]
    reason: Reason | None = None
    message: str = ""
    # The reason this sub-oracle gives when no one objects and the score misses the bar.
    shortfall: Reason | None = None
    # Why a behavioural failure of the run is not the agent's (e.g. the run was starved).
    excuse: str | None = None
    # What the mitigation saw of the fix, carried into the Verdict unchanged.
    time_to_clear_seconds: float | None = None
    cleared_at: float | None = None
    new_alerts: list[str] = Field(default_factory=list)

    @property
    def score(self) -> float:
        """This sub-oracle's own score: the sum of its signals' points."""
        return round(sum(s.points for s in self.signals), 4)


class SubOracle(Protocol):
    """One weighted dimension of the compound oracle."""

    @property
    def name(self) -> str:
        """The sub-oracle's name, as `[verify.oracles]` spells it."""
        ...

    def evaluate(self, obs: VerifyObservations) -> SubVerdict:
        """This dimension's answer for a run's observations; pure."""
        ...
