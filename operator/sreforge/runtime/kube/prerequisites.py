"""What an Incident needs before it changes anything: its target Deployment, the Service in
front of it, and a Prometheus that answers. A missing one is waited for (a GitOps sync may
create the Incident before its target) until `spec.targetTimeoutSeconds` from the start of
the run; then the run ends Inconclusive with the reason. Nothing is changed meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

from sreforge.api.resources import Condition
from sreforge.runtime.driver import Stop
from sreforge.runtime.kube.client import Kube, KubeError
from sreforge.runtime.kube.status import condition

# How often a missing prerequisite is looked for again.
RECHECK_SECONDS = 5.0
PROBE_TIMEOUT_SECONDS = 3.0
UNREACHABLE = "PrometheusUnreachable"


@dataclass(frozen=True)
class Missing:
    """A prerequisite that is not there: a condition reason and a sentence naming it."""

    reason: str  # DeploymentNotFound | ServiceNotFound | PrometheusUnreachable
    message: str
    error: str | None = None  # Prometheus's: why it did not answer


class PrerequisiteMissing(KubeError):
    """A prerequisite did not appear before the deadline (the run ends Inconclusive)."""

    def __init__(self, missing: Missing, timeout: float) -> None:
        super().__init__(
            f"{missing.message}, still after {timeout:.0f}s (spec.targetTimeoutSeconds)"
        )
        self.missing = missing


def prometheus_error(url: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> str | None:
    """Why the Prometheus at `url` cannot answer a query, or None when it can."""
    try:
        r = requests.get(
            f"{url.rstrip('/')}/api/v1/query", params={"query": "vector(1)"}, timeout=timeout
        )
    except requests.RequestException as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    if r.status_code != 200:
        return f"HTTP {r.status_code}: {r.text.strip()[:300]}"
    try:
        ok = r.json().get("status") == "success"
    except ValueError:
        ok = False
    return None if ok else f"not a Prometheus query API answer: {r.text.strip()[:300]}"


def missing(kube: Kube, ns: str, deployment: str, prometheus_url: str) -> Missing | None:
    """The first prerequisite that is not there, or None."""
    if kube.find_deployment(ns, deployment) is None:
        return Missing(
            "DeploymentNotFound", f"the target Deployment {ns}/{deployment} does not exist"
        )
    if not kube.service_exists(ns, deployment):
        return Missing(
            "ServiceNotFound",
            f"the Service {ns}/{deployment} in front of the target (the load's address) "
            "does not exist",
        )
    err = prometheus_error(prometheus_url)
    if err is not None:
        return Missing(
            UNREACHABLE, f"Prometheus {prometheus_url} does not answer: {err}", error=err
        )
    return None


def waiting_condition(missing: Missing | None, timeout: int) -> Condition:
    """The Injected condition while the run waits for `missing` (None: nothing is)."""
    if missing is None:
        return condition("Injected", None, "Injecting", "the prerequisites are there")
    return condition(
        "Injected",
        False,
        missing.reason,
        f"{missing.message}: waiting for it up to {timeout}s from the start of the run "
        "(spec.targetTimeoutSeconds), changing nothing meanwhile",
    )


def prometheus_condition(url: str, error: str | None) -> Condition:
    """PrometheusReachable: True, or False with the URL and the error."""
    if error is None:
        return condition("PrometheusReachable", True, "Reachable", f"{url} answers queries")
    return condition(
        "PrometheusReachable",
        False,
        "Unreachable",
        f"{url}: {error}; a look without an answer is never a clear",
    )


def await_prerequisites(  # noqa: PLR0917 (what, until when, whom to tell)
    kube: Kube,
    ns: str,
    deployment: str,
    prometheus_url: str,
    since: float,
    timeout: float,
    stop: Stop,
    shown: Callable[[Missing | None], None],
) -> None:
    """Return once every prerequisite is there. `shown` is told each change (a Missing, or
    None once all are there after one was missing). PrerequisiteMissing once `timeout`
    seconds have passed `since` (unix time: the run's start, also across a restart);
    KubeError when `stop` is set."""
    deadline = since + timeout
    last: Missing | None = None
    while True:
        now = missing(kube, ns, deployment, prometheus_url)
        if now != last:
            shown(now)
            last = now
        if now is None:
            return
        if time.time() >= deadline:
            raise PrerequisiteMissing(now, timeout)
        if stop.wait(min(RECHECK_SECONDS, max(0.0, deadline - time.time()))):
            raise KubeError("operator stopping")
