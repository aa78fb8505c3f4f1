"""The Incident and Submission custom resources (sreforge.dev/v1alpha1) as pydantic models.

``crds/*.yaml`` is the API's source of truth; these models mirror its spec and
status schemas field for field (tests/crds/test_crd_models_agree.py proves
it). Pure: no I/O. Python names are snake_case, the wire names camelCase
(``model_dump(by_alias=True)``); both are accepted on input.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sreforge.api.verdict import Reason

GROUP = "sreforge.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
INCIDENT_PLURAL = "incidents"
SUBMISSION_PLURAL = "submissions"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# metav1.Condition's rules for type (PascalCase here) and reason (CamelCase)
CONDITION_TYPE = r"^[A-Z][A-Za-z0-9]*$"
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MAX_INLINE_PATCH = 1024 * 1024

DAY_SECONDS = 86_400  # the longest any duration of an Incident may be
DaySeconds = Annotated[int, Field(ge=1, le=DAY_SECONDS)]
SoakSeconds = Annotated[int, Field(ge=0, le=3600)]
Generation = Annotated[int, Field(ge=0)]
Ratio = Annotated[float, Field(ge=0, le=1)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253)]
ConditionStatus = Literal["True", "False", "Unknown"]
LoadRunner = Literal["k6", "builtin"]


class _Spec(BaseModel):
    """What a user writes: unknown fields are an error, as the apiserver would prune them."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class _Status(BaseModel):
    """What the operator writes: tolerant of fields a newer operator added."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(_Status):
    """One entry of ``status.conditions`` (metav1.Condition's shape, keyed by ``type``)."""

    type: Annotated[str, Field(max_length=316, pattern=CONDITION_TYPE)]
    status: ConditionStatus
    reason: Annotated[str, Field(max_length=1024, pattern=CONDITION_REASON)]
    message: Annotated[str, Field(max_length=32_768)] = ""
    last_transition_time: datetime
    observed_generation: Generation | None = None


# ---------------------------------------------------------------- Incident
class IncidentLoad(_Spec):
    """Overrides of the scenario's load profile (constant arrival rate)."""

    rate: Annotated[int, Field(ge=1, le=20_000)] | None = None
    duration_seconds: DaySeconds | None = None
    max_in_flight: Annotated[int, Field(ge=1, le=100_000)] | None = None


class IncidentVerify(_Spec):
    """Overrides of the oracle's windows and threshold; the threshold is a percent (no floats)."""

    sustain_seconds: DaySeconds | None = None
    fire_timeout_seconds: DaySeconds | None = None
    clear_budget_seconds: DaySeconds | None = None
    # the range [low, high] the hidden soak after the window is drawn from ([0, 0]: none)
    soak_seconds: Annotated[list[SoakSeconds], Field(min_length=2, max_length=2)] | None = None
    pass_threshold_percent: Annotated[int, Field(ge=0, le=100)] | None = None

    @model_validator(mode="after")
    def _soak_range(self) -> IncidentVerify:
        if self.soak_seconds is not None and self.soak_seconds[0] > self.soak_seconds[1]:
            low, high = self.soak_seconds
            raise ValueError(
                f"soakSeconds must be [low, high] with low <= high, got [{low}, {high}]"
            )
        return self


class IncidentSpec(_Spec):
    """Desired run: which scenario, against what, with which overrides."""

    scenario: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
    target_namespace: Annotated[str, Field(max_length=63, pattern=DNS_LABEL)] | None = None
    target_deployment: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)] | None = None
    prometheus_url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] | None = Field(
        default=None, alias="prometheusURL"
    )
    load_runner: LoadRunner = "builtin"
    # how long the run waits for its target Deployment, its Service and its Prometheus
    target_timeout_seconds: DaySeconds = 600
    # the ServiceAccount the target's pods (the code under test) run under while the
    # Incident runs (None: the workload's own), and whether its token is mounted (never
    # unless asked: the code under test gets no API credentials)
    service_account_name: (
        Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] | None
    ) = None
    automount_service_account_token: bool = False
    load: IncidentLoad | None = None
    verify: IncidentVerify | None = None
    # a control window: the healthy build under the Incident's own load for this long
    # before the regression is injected (None or 0: none); what it saw is status.control
    control_seconds: Annotated[int, Field(ge=0, le=DAY_SECONDS)] | None = None


class ControlSummary(_Status):
    """The control window of spec.controlSeconds: what the scenario's alerts did on the healthy
    build under the same load, before the injection (runtime/kube/incident.py)."""

    seconds: Annotated[int, Field(ge=0, le=DAY_SECONDS)] | None = None
    # None: Prometheus could not be read in the window (nothing was seen: not quiet)
    target_fired: bool | None = None
    pages_fired: list[str] = Field(default_factory=list)
    restarts: Annotated[int, Field(ge=0)] | None = None
    # the healthy build's highest p95 per route in the window, {"load"|"probe": {route: s}}
    p95_by_route: dict[str, dict[str, float]] | None = None


class VerdictSummary(_Status):
    """The verdict of the Submission that decided the run, as the Incident shows it."""

    passed: bool | None = None
    score: Ratio | None = None
    reason: Reason | None = None
    submission: str | None = None


class McpAccess(_Status):
    """Where the Incident's agent reaches its MCP tools, and as whom (runtime/kube/mcp.py)."""

    url: str | None = None
    service_account_name: str | None = None
    audience: str | None = None


class IncidentStatus(_Status):
    """Observed state of an Incident run."""

    observed_generation: Generation | None = None
    phase: str | None = None
    alert: str | None = None
    run_id: str | None = None
    fired_time: datetime | None = None
    brief: Annotated[str, Field(max_length=65_536)] | None = None
    verdict: VerdictSummary | None = None
    control: ControlSummary | None = None
    mcp: McpAccess | None = None
    # the operator's persisted loop state: free-form on purpose
    loop: dict[str, Any] | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        """The condition of this type, or None."""
        return next((c for c in self.conditions if c.type == type_), None)


# ---------------------------------------------------------------- Submission
class IncidentRef(_Spec):
    name: ObjectName


class ConfigMapKeyRef(_Spec):
    name: ObjectName
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]


class PatchSource(_Spec):
    """A unified diff, inline or in a ConfigMap key: exactly one of the two."""

    inline: Annotated[str, Field(max_length=MAX_INLINE_PATCH)] | None = None
    config_map_key_ref: ConfigMapKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PatchSource:
        # the CRD's CEL rule `has(self.inline) != has(self.configMapKeyRef)`
        if (self.inline is None) == (self.config_map_key_ref is None):
            raise ValueError("patch must set exactly one of inline or configMapKeyRef")
        return self


class SubmissionSpec(_Spec):
    """An agent's fix for an Incident in the same namespace."""

    incident_ref: IncidentRef
    patch: PatchSource
    rca: Annotated[str, Field(max_length=65_536)] | None = None
    agent_model: Annotated[str, Field(max_length=253)] | None = None


class SignalStatus(_Status):
    """One oracle signal as Submission status shows it (the name is the map key)."""

    value: bool | float | None = None
    credit: Ratio | None = None
    weight: Ratio | None = None
    detail: str | None = None


class SoakStatus(_Status):
    """The soak after the sustained window, as drawn for one Submission."""

    seconds: Annotated[float, Field(ge=0, le=86_400)]
    seed: Annotated[str, Field(max_length=128)]


class SubmissionStatus(_Status):
    """Observed grading of a Submission."""

    observed_generation: Generation | None = None
    passed: bool | None = None
    score: Ratio | None = None
    reason: Reason | None = None
    ci_feedback: Annotated[str, Field(max_length=65_536)] | None = None
    signals: dict[str, SignalStatus] | None = None
    # the soak this Submission was held to, published with its verdict (oracle.soak)
    soak: SoakStatus | None = None
    # restarts of the patched service after its rollout (most seen while verifying)
    restarts: Annotated[int, Field(ge=0)] | None = None
    # free-form diagnosis of the agent's run (sreforge.api.diagnosis writes it)
    diagnosis: dict[str, Any] | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        """The condition of this type, or None."""
        return next((c for c in self.conditions if c.type == type_), None)
