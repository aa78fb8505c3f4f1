"""The operator's configuration, the names it gives its objects, and the Incident's overrides.

Configuration (environment of the operator):

    SREFORGE_SCENARIOS_DIR     scenarios directory (default: the checkout's scenarios/, in
                               the image /opt/sreforge/scenarios)
    SREFORGE_IMAGE_PREFIX      service images are <prefix><service>:healthy and, the regressed
                               build of each scenario, <prefix><service>:<scenario> (default
                               "sreforge/"; hack/images.sh builds them)
    SREFORGE_OPERATOR_IMAGE    image of the built-in load generator and the patch init
                               container (default "sreforge/operator:dev"; the chart sets
                               its own image)
    SREFORGE_OPERATOR_IMAGE_PULL_POLICY
                               their imagePullPolicy (default IfNotPresent; the chart sets
                               its image.pullPolicy)
    SREFORGE_RUNNER_IMAGE     image of what runs in tenant namespaces: the built-in load
                               generator, the prober and the patch init containers (the
                               Dockerfile's `runner` target: the package, no scenarios, so
                               no root cause, regression, fix or decoy); default: the
                               operator image (which carries the scenarios: set it)
    SREFORGE_SCRAPER_NAMESPACE the namespace of the pods that scrape the targets (the only
                               ones the Incident's NetworkPolicies let in beside the load);
                               default: the namespace of the Prometheus URL's Service
                               (http://<svc>.<ns>.svc...), or the URL's address if an IP
    SREFORGE_SCRAPER_POD_LABELS
                               k=v[,k=v] of those pods (default: any pod there)
    SREFORGE_SOURCE_DIR        where a service image holds its source tree (default "/app")
    SREFORGE_PROMETHEUS_URL    Prometheus to read when an Incident sets no prometheusURL
    SREFORGE_LEARN_WAIT_SECONDS
                               how long an injection waits for the load and the prober to
                               learn their known answers from the healthy build (default
                               50: the generator's 20 s and scrapes); 0: no wait
    SREFORGE_SOAK_SECRET       the secret each Incident's soak key is derived from (the chart
                               keeps one in a Secret); unset: a random one per operator
                               process, so a restarted operator draws new soak lengths
    SREFORGE_MCP_PORT          serve each handed-off Incident's MCP tools on this port
                               (runtime/kube/mcp.py; unset: no endpoint)
    SREFORGE_MCP_URL           the endpoint's base URL as agents reach it (the chart's
                               Service), written to each Incident's status.mcp.url
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sreforge.api.resources import IncidentSpec
from sreforge.api.scenario import LoadProfile, Scenario, VerifySpec
from sreforge.load.generator import LEARN_SECONDS
from sreforge.scenarios import load_scenario

REPO_SCENARIOS = Path(__file__).resolve().parents[4] / "scenarios"
IMAGE_SCENARIOS = Path("/opt/sreforge/scenarios")  # the root Dockerfile copies them there
MANAGED = {"app.kubernetes.io/managed-by": "sreforge"}
INCIDENT_LABEL = "sreforge.dev/incident"
# the Incident's scenario on its pods: on a shared Prometheus a scenario's rules read only its own
SCENARIO_LABEL = "sreforge.dev/scenario"
ROLE_LABEL = "sreforge.dev/role"
OVERLAY_ANNOTATION = "sreforge.dev/overlay"
CI_MARGIN_SECONDS = 120
PATCH_KEY = "patch.diff"
FILES_KEY = "files.txt"  # beside the vetted patch: the paths it changes, one a line
TERMINATION_LOG = "/dev/termination-log"
SRC_VOLUME = "sreforge-src"
PATCH_VOLUME = "sreforge-patch"
TMP_VOLUME = "sreforge-tmp"  # the overlay init containers' /tmp: their root is read-only
OVERLAY_SRC = "/sreforge/src"
OVERLAY_PATCH = "/sreforge/patch"


# Without SREFORGE_SOAK_SECRET: one secret for the operator process (a restart draws anew).
_PROCESS_SOAK_SECRET = secrets.token_hex(32)


def default_scenarios_dir() -> Path:
    """The checkout's scenarios/ (editable install), else the image's /opt/sreforge/scenarios
    (a wheel install has no checkout around it), else ./scenarios."""
    for candidate in (REPO_SCENARIOS, IMAGE_SCENARIOS):
        if candidate.is_dir():
            return candidate
    return Path.cwd() / "scenarios"


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _pull_policy(value: str | None) -> str:
    if not value:
        return "IfNotPresent"
    if value not in PULL_POLICIES:
        raise ValueError(
            f"SREFORGE_OPERATOR_IMAGE_PULL_POLICY={value!r}: one of {', '.join(PULL_POLICIES)}"
        )
    return value


def _labels(var: str, value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in value.split(","))):
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{var}={value!r}: each item must be KEY=VALUE, got {item!r}")
        out[key.strip()] = val.strip()
    return out


#: The generator's own learning limit (sreforge.load.generator.LEARN_SECONDS) and a scrape
#: or two: how long an injection waits by default for the known answers to be learned.
DEFAULT_LEARN_WAIT_SECONDS = LEARN_SECONDS + 30.0


def _seconds(var: str, value: str | None) -> float:
    if value is None or value == "":
        return DEFAULT_LEARN_WAIT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{var}={value!r}: not a number of seconds") from None
    if not 0 <= seconds <= 600:
        raise ValueError(f"{var}={value!r}: must be between 0 and 600 seconds")
    return seconds


@dataclass(frozen=True)
class OperatorConfig:
    scenarios_dir: Path = field(default_factory=default_scenarios_dir)
    image_prefix: str = "sreforge/"
    operator_image: str = "sreforge/operator:dev"
    operator_image_pull_policy: str = "IfNotPresent"
    source_dir: str = "/app"
    prometheus_url: str | None = None
    # the secret each Incident's soak key is derived from (sreforge.oracle.soak); never
    # written to CR status, never given to a Job or a tenant's pod
    soak_secret: str = field(default=_PROCESS_SOAK_SECRET, repr=False)
    soak_secret_from_env: bool = False
    runner_image: str | None = None
    scraper_namespace: str | None = None
    scraper_labels: dict[str, str] = field(default_factory=dict)
    mcp_url: str | None = None  # the operator's MCP endpoint, as agents reach it
    # how long an injection waits for the load's and prober's known answers (incident.py)
    learn_wait_seconds: float = DEFAULT_LEARN_WAIT_SECONDS

    @property
    def runner(self) -> str:
        """The image of the pods the operator runs in tenant namespaces."""
        return self.runner_image or self.operator_image

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorConfig:
        e = dict(os.environ) if env is None else env
        return cls(
            scenarios_dir=Path(e.get("SREFORGE_SCENARIOS_DIR") or default_scenarios_dir()),
            image_prefix=e.get("SREFORGE_IMAGE_PREFIX", "sreforge/"),
            operator_image=e.get("SREFORGE_OPERATOR_IMAGE") or "sreforge/operator:dev",
            operator_image_pull_policy=_pull_policy(e.get("SREFORGE_OPERATOR_IMAGE_PULL_POLICY")),
            source_dir=e.get("SREFORGE_SOURCE_DIR") or "/app",
            prometheus_url=e.get("SREFORGE_PROMETHEUS_URL") or None,
            soak_secret=e.get("SREFORGE_SOAK_SECRET") or _PROCESS_SOAK_SECRET,
            soak_secret_from_env=bool(e.get("SREFORGE_SOAK_SECRET")),
            runner_image=e.get("SREFORGE_RUNNER_IMAGE") or None,
            scraper_namespace=e.get("SREFORGE_SCRAPER_NAMESPACE") or None,
            scraper_labels=_labels(
                "SREFORGE_SCRAPER_POD_LABELS", e.get("SREFORGE_SCRAPER_POD_LABELS") or ""
            ),
            mcp_url=(e.get("SREFORGE_MCP_URL") or "").rstrip("/") or None,
            learn_wait_seconds=_seconds(
                "SREFORGE_LEARN_WAIT_SECONDS", e.get("SREFORGE_LEARN_WAIT_SECONDS")
            ),
        )

    def image(self, service: str, variant: str) -> str:
        return f"{self.image_prefix}{service}:{variant}"

    def scenario(self, name: str) -> Scenario:
        return load_scenario(self.scenarios_dir / name)


def effective_verify(scenario: Scenario, spec: IncidentSpec) -> VerifySpec:
    v = scenario.verify
    o = spec.verify
    if o is None:
        return v
    update: dict[str, Any] = {}
    for name in ("sustain_seconds", "fire_timeout_seconds", "clear_budget_seconds"):
        if getattr(o, name) is not None:
            update[name] = getattr(o, name)
    if o.soak_seconds is not None:
        update["soak_seconds"] = (float(o.soak_seconds[0]), float(o.soak_seconds[1]))
    if o.pass_threshold_percent is not None:
        update["pass_threshold"] = o.pass_threshold_percent / 100
    return v.model_copy(update=update)


def effective_load(scenario: Scenario, spec: IncidentSpec) -> LoadProfile:
    o = spec.load
    if o is None:
        return scenario.load
    update = {
        k: getattr(o, k)
        for k in ("rate", "duration_seconds", "max_in_flight")
        if getattr(o, k) is not None
    }
    return scenario.load.model_copy(update=update)
