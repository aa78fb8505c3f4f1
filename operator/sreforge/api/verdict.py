"""The verdict of the mitigation oracle, as written to record.json and Submission status."""

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
    CI_GREEN = "ci_green"
    ALERT_CLEARED = "alert_cleared"
    SUSTAINED_CLEAR = "sustained_clear"
    TIME_TO_CLEAR = "time_to_clear"
    NO_NEW_ALERTS = "no_new_alerts"


class Signal(BaseModel):
    """One oracle signal: its raw value, the credit in [0, 1] it earns, and its weight."""

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
