"""The verdict of the compound oracle, as written to record.json and Submission status.

v1 weighs the mitigation sub-oracle alone, so a verdict is the mitigation's (docs/oracle.md).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Reason(StrEnum):
    """The one fixed reason every verdict carries (DESIGN.md)."""

    PASSED = "Passed"
    ALERT_NEVER_FIRED = "AlertNeverFired"
    CI_RED = "CIRed"
    PATCH_REJECTED = "PatchRejected"
    NO_REDEPLOY = "NoRedeploy"
    NOT_CLEARED = "NotCleared"
    REFIRED = "Refired"
    NEW_ALERTS = "NewAlerts"
    LOAD_NOT_DELIVERED = "LoadNotDelivered"
    INCONCLUSIVE = "Inconclusive"


class SignalName(StrEnum):
    """Every sub-oracle's signals, by one name each across the compound."""

    # mitigate
    CI_GREEN = "ci_green"
    ALERT_CLEARED = "alert_cleared"
    SUSTAINED_CLEAR = "sustained_clear"
    TIME_TO_CLEAR = "time_to_clear"
    NO_NEW_ALERTS = "no_new_alerts"
    # diagnose (off in v1: the diagnosis is reported beside the verdict)
    ROOT_CAUSE_CORRECT = "root_cause_correct"
    EVIDENCE_GROUNDED = "evidence_grounded"
    NO_FALSE_LEADS = "no_false_leads"


class Signal(BaseModel):
    """One oracle signal: its raw value, the credit in [0, 1] it earns, and its weight.

    In a sub-oracle's finding the weight is its share of that sub-oracle; in a Verdict it is
    its share of the whole score (sub-oracle weight x own weight), so score = sum of points.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SignalName
    value: bool | float | None
    credit: float = Field(ge=0, le=1)
    weight: float = Field(ge=0, le=1)
    detail: str = ""

    @property
    def points(self) -> float:
        return self.credit * self.weight


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    signals: list[Signal]
    score: float = Field(ge=0, le=1)
    pass_threshold: float
    passed: bool
    reason: Reason
    message: str
    time_to_clear_seconds: float | None = None
    cleared_at: float | None = None
    new_alerts: list[str] = Field(default_factory=list)

    def signal(self, name: SignalName | str) -> Signal:
        for s in self.signals:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def failing_signals(self) -> list[str]:
        return [s.name.value for s in self.signals if s.credit < 1.0]
