"""What the harness observed: the pure oracle and loop consume these and nothing else."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadStats(_Model):
    """The load generator's own view over the last sample window (harness-owned telemetry)."""

    target_rate: float = Field(ge=0)
    achieved_rate: float = Field(ge=0, description="requests started per second")
    dropped_ratio: float = Field(ge=0, le=1, description="iterations dropped / scheduled")
    success_ratio: float | None = Field(
        default=None, ge=0, le=1, description="validated responses / completed; None if none"
    )


class ProbeStats(_Model):
    """The independent prober's view over its window (harness-owned, its own identity).

    `success_ratio is None`: the prober completed nothing in the window or its series are
    gone (a harness fault, never a clear).
    """

    success_ratio: float | None = Field(default=None, ge=0, le=1)


class AlertSample(_Model):
    """One look at Prometheus: the firing set, whether the target series exists, the load.

    `firing is None` means Prometheus could not be asked: that is never a clear.
    """

    t: float = Field(description="unix time of the sample")
    firing: frozenset[str] | None
    pending: frozenset[str] = frozenset()
    # the firing alerts labelled severity="page" (user-facing breakage)
    pages: frozenset[str] = frozenset()
    target_series_present: bool = False
    service_up: bool = False
    load: LoadStats | None = None
    # None: this run has no prober (older records); else what the prober saw
    probe: ProbeStats | None = None
    # Restarts of the running build's processes or containers since it was rolled out
    # (None: not observed, e.g. older records). After a redeploy, any restart of the
    # patched service fails the fix: it did not stay up under load.
    restarts: int | None = Field(default=None, ge=0)
    # over the last sample interval (sreforge.runtime.contention; None where not measured):
    # the share of the machine's CPU spent outside this run's own process tree, and the
    # seconds per second the run's threads waited, runnable, for a CPU
    outside_cpu: float | None = Field(default=None, ge=0, le=1)
    cpu_wait: float | None = Field(default=None, ge=0)


class CIStatus(StrEnum):
    GREEN = "green"
    RED = "red"
    REJECTED = "rejected"  # the patch did not apply or touched a protected path
    ERROR = "error"  # the harness could not run CI (an infrastructure fault)


class CIResult(_Model):
    status: CIStatus
    reason: str = ""
    output_tail: str = ""
    duration_seconds: float = 0.0
    files_changed: list[str] = Field(default_factory=list)

    @property
    def green(self) -> bool:
        return self.status is CIStatus.GREEN
