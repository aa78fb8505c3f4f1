"""Pure data models: scenarios, observations, verdicts. No I/O (sreforge.scenarios reads files)."""

from sreforge.api.observation import AlertSample, CIResult, CIStatus, LoadStats
from sreforge.api.scenario import (
    LoadProfile,
    Scenario,
    ScenarioError,
    ServiceSpec,
    UpstreamSpec,
    VerifySpec,
    Weights,
)
from sreforge.api.verdict import Reason, Signal, SignalName, Verdict

__all__ = [
    "AlertSample",
    "CIResult",
    "CIStatus",
    "LoadProfile",
    "LoadStats",
    "Reason",
    "Scenario",
    "ScenarioError",
    "ServiceSpec",
    "Signal",
    "SignalName",
    "UpstreamSpec",
    "Verdict",
    "VerifySpec",
    "Weights",
]
