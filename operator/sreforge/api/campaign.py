"""A campaign's summary (campaign.json): cases x trials graded on warm sessions, per
scenario and per submitter, with pass@1, pass^k and a 95% interval. Pure: no I/O.

- pass@1: the share of graded trials that passed (Inconclusive trials are the harness's
  fault and are left out, as everywhere else);
- pass^k: the chance that k trials in a row all pass, estimated without bias from n graded
  trials with c passes as C(c, k) / C(n, k) (tau-bench's estimator); with n = k it is 1
  when every trial passed, else 0;
- the 95% interval is Wilson's score interval on pass@1, which stays inside [0, 1] and is
  honest for the handful of trials a campaign affords.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

SCHEMA = "sreforge.campaign.v1"
Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate of the chance that k independent trials all pass; None if k > n."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        return None
    return math.comb(c, k) / math.comb(n, k)


def wilson(n: int, c: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for c successes in n trials; None without trials."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n} c={c}")
    if n == 0:
        return None
    p = c / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, round(centre - half, 4)), min(1.0, round(centre + half, 4)))


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Trial(_Model):
    """One graded case of the campaign, as its record.json says."""

    scenario: str
    submitter: str  # the patch's label or the agent's command
    trial: int = Field(ge=1)
    run_id: str | None  # None: the case never ran (the environment could not be set up)
    passed: bool | None  # None: Inconclusive or not run
    reason: str
    score: float | None = None


class Summary(_Model):
    """pass@1, pass^k and the 95% interval of one scenario x submitter."""

    scenario: str
    submitter: str
    trials: int
    graded: int  # trials with a verdict on the submission (not Inconclusive, not unrun)
    passed: int
    inconclusive: int
    pass_at_1: float | None
    pass_hat_k: float | None
    k: int
    interval95: tuple[float, float] | None


class Campaign(_Model):
    """campaign.json."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    campaign_id: str
    trials: int = Field(ge=1)
    started: str
    finished: str | None = None
    sessions: list[str] = Field(default_factory=list)
    results: list[Trial] = Field(default_factory=list)
    summary: list[Summary] = Field(default_factory=list)


def summarise(results: Iterable[Trial], k: int) -> list[Summary]:
    """One Summary per (scenario, submitter), in the order they first appear."""
    groups: dict[tuple[str, str], list[Trial]] = {}
    for t in results:
        groups.setdefault((t.scenario, t.submitter), []).append(t)
    out = []
    for (scenario, submitter), trials in groups.items():
        graded = [t for t in trials if t.passed is not None]
        n, c = len(graded), sum(1 for t in graded if t.passed)
        k_used = min(k, n) if n else k  # an Inconclusive trial leaves fewer than k graded
        out.append(
            Summary(
                scenario=scenario,
                submitter=submitter,
                trials=len(trials),
                graded=n,
                passed=c,
                inconclusive=len(trials) - n,
                pass_at_1=round(c / n, 4) if n else None,
                pass_hat_k=pass_hat_k(n, c, k_used) if n else None,
                k=k_used,
                interval95=wilson(n, c),
            )
        )
    return out
