"""The scenario format: `scenarios/<name>/scenario.toml` and the files it names.

Pure models: paths are values here; sreforge.scenarios reads them.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from sreforge.errors import SreforgeError

Seconds = Annotated[int, Field(ge=1, le=86_400)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
# at most an hour: the operator keeps each verification sample in CR status (~300 bytes a
# second), which must stay well under etcd's 1.5 MiB object limit
SoakBound = Annotated[float, Field(ge=0, le=3600)]


class ScenarioError(SreforgeError, ValueError):
    """A scenario that cannot be used; the message names the file, field and problem."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Weights(_Model):
    """Weights of the five mitigation signals (DESIGN.md oracle v1); they sum to 1."""

    ci_green: Ratio = 0.25
    alert_cleared: Ratio = 0.35
    sustained_clear: Ratio = 0.20
    time_to_clear: Ratio = 0.10
    no_new_alerts: Ratio = 0.10

    @model_validator(mode="after")
    def _sum_to_one(self) -> Weights:
        total = sum(self.model_dump().values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"weights must sum to 1.0, they sum to {total:.4f}")
        return self


class OracleWeights(_Model):
    """The compound oracle's sub-oracles and their weights (docs/oracle.md); they sum to 1.

    v1 grades the mitigation alone. A sub-oracle weighted 0 is off: it is not run and adds
    no signal. `diagnose` (the RCA judge's booleans) is off unless a scenario weights it;
    nothing in the runtime feeds it a diagnosis yet, so weighting it makes runs Inconclusive.
    """

    mitigate: Ratio = 1.0
    diagnose: Ratio = 0.0

    @model_validator(mode="after")
    def _a_gated_whole(self) -> OracleWeights:
        total = sum(self.model_dump().values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"oracle weights must sum to 1.0, they sum to {total:.4f}")
        if self.mitigate <= 0:
            # the mitigation is the gate: CI, the redeploy and the alert fail a run closed
            raise ValueError("mitigate must weigh more than 0: it gates every run")
        return self


class VerifySpec(_Model):
    """How the oracle observes a fix: windows, budgets and what counts as delivered load."""

    pass_threshold: Ratio = 0.85
    fire_timeout_seconds: Seconds = 120
    sustain_seconds: Seconds = 60
    clear_budget_seconds: Seconds = 60
    # A clear only counts while the load is really delivered (DESIGN.md).
    min_achieved_ratio: Ratio = 0.90
    max_dropped_ratio: Ratio = 0.02
    min_success_ratio: Ratio = 0.95
    sample_interval_seconds: Annotated[float, Field(gt=0, le=30)] = 1.0
    # After the sustained window, a soak of hidden length drawn per case from this range
    # [low, high] (seconds; docs/oracle.md "The soak"): the load keeps running and every
    # sample must stay clear. The default covers the substrates' longest time constant, the
    # catalogue's 300 s page cache: at its shortest (a clear at once + the 60 s window +
    # 240 s) a case is watched until every entry cached at the rollout has expired and been
    # refilled under load; the 180 s spread keeps a fix timed to give way just after the
    # shortest soak from passing most of the time. [0, 0] turns the soak off.
    soak_seconds: tuple[SoakBound, SoakBound] = (240.0, 420.0)
    # the mitigation sub-oracle's own signal weights
    weights: Weights = Weights()
    oracles: OracleWeights = OracleWeights()

    @model_validator(mode="after")
    def _soak_range(self) -> VerifySpec:
        low, high = self.soak_seconds
        if low > high:
            raise ValueError(
                f"soak_seconds must be [low, high] with low <= high, got [{low:g}, {high:g}]"
            )
        return self


#: How known answers are learned, by the built-in generator and the k6 script alike:
#: this many requests at a time, each id asked at most this many times.
KNOWN_ANSWER_PARALLEL = 8
KNOWN_ANSWER_ATTEMPTS = 3

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# The single-route fields of [load]; a mix ([[load.routes]]) states them per route.
_SINGLE_ROUTE_FIELDS = ("path", "method", "expect_status", "expect_json_id", "known_answers")


def _ordered(value: tuple[int, int] | None) -> tuple[int, int] | None:
    if value is not None and value[0] > value[1]:
        lo, hi = value
        raise ValueError(f"id_range must be [low, high] with low <= high, got [{lo}, {hi}]")
    return value


BasicPart = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^:\s]+$")]


class Route(_Model):
    """One user-facing route of a traffic mix: how it is asked, how often, and how its
    answers are judged. Its series carry ``route=<name>`` (the path template by default)."""

    path: Annotated[str, Field(pattern=r"^/", description="path template; {id} is the id")]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_./{}:-]{1,100}$")] | None = None
    method: HttpMethod = "GET"
    weight: Annotated[int, Field(ge=1, le=1_000_000, description="share of the mix")] = 1
    # A JSON body template (POST, PUT, PATCH): a string "{id}" becomes the id, "{id}" inside
    # a longer string its digits. A POST without one sends {"id": <id>}.
    body: dict[str, Any] | None = None
    id_range: tuple[int, int] | None = None  # [load] id_range when unset
    expect_status: Annotated[int, Field(ge=100, le=599)] = 200
    expect_json_id: bool = False
    # Known answers: before the first iteration the client asks for this many ids (the
    # most popular ones) and keeps each expected answer; afterwards a response for one of
    # those ids whose JSON is not the same document is `invalid`. A service that
    # fabricates answers under load (right status, right id, made-up body) fails them.
    known_answers: Annotated[int, Field(ge=0, le=2000)] = 0
    # HTTP Basic credentials [user, password] the client for id {id} sends (templates:
    # "{id}" becomes the id), as an API client with an account of its own would.
    basic_auth: tuple[BasicPart, BasicPart] | None = None

    @property
    def label(self) -> str:
        """The value of the ``route`` label of this route's series."""
        return self.name or self.path

    @property
    def ids(self) -> tuple[int, int]:
        """The id range (resolved by LoadProfile.mix)."""
        return self.id_range if self.id_range is not None else (1, 1)

    @model_validator(mode="after")
    def _coherent(self) -> Route:
        _ordered(self.id_range)
        if self.body is not None and self.method not in _BODY_METHODS:
            raise ValueError(f"body: a {self.method} route sends no body (POST, PUT or PATCH)")
        return self


class LoadProfile(_Model):
    """An open-model, constant-arrival-rate load (k6 `constant-arrival-rate` semantics)
    over a traffic mix: one route (``path`` and its fields, the original form) or several
    (``[[load.routes]]``, each with its weight, method, body and validation)."""

    rate: Annotated[int, Field(ge=1, le=20_000, description="iterations (requests) per second")]
    max_in_flight: Annotated[int, Field(ge=1, le=100_000)] = 256
    timeout_ms: Annotated[int, Field(ge=10, le=120_000)] = 2000
    duration_seconds: Seconds = 1800
    method: HttpMethod = "GET"
    path: Annotated[str, Field(pattern=r"^/")] = "/"
    id_range: tuple[int, int] = (1, 1)
    expect_status: Annotated[int, Field(ge=100, le=599)] = 200
    expect_json_id: bool = False
    known_answers: Annotated[int, Field(ge=0, le=2000)] = 0
    routes: list[Route] = Field(default_factory=list)
    # Which ids users ask for: a Zipf law over the id range (rank r asked in proportion to
    # r^-zipf_exponent; which id holds which rank is drawn per run), or uniform.
    popularity: Literal["zipf", "uniform"] = "zipf"
    zipf_exponent: Annotated[float, Field(gt=0.0, le=4.0)] = 1.0
    # The share of requests that open a new connection (a new visitor); the others reuse
    # an idle kept-alive one, as returning browsers and apps do.
    new_connection_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.25
    # The independent prober's rate (requests/s over the same mix, its own series).
    probe_rate: Annotated[int, Field(ge=1, le=100)] = 5

    def mix(self) -> list[Route]:
        """The routes of the mix, each with its id range resolved."""
        if not self.routes:
            return [
                Route(
                    path=self.path,
                    method=self.method,
                    id_range=self.id_range,
                    expect_status=self.expect_status,
                    expect_json_id=self.expect_json_id,
                    known_answers=self.known_answers,
                )
            ]
        return [
            r if r.id_range is not None else r.model_copy(update={"id_range": self.id_range})
            for r in self.routes
        ]

    def probe(self) -> LoadProfile:
        """The prober's profile: the same mix and answers at ``probe_rate``."""
        return self.model_copy(
            update={"rate": self.probe_rate, "max_in_flight": max(4, 2 * self.probe_rate)}
        )

    @model_validator(mode="after")
    def _one_form(self) -> LoadProfile:
        _ordered(self.id_range)
        if not self.routes:
            return self
        # by value, not by what was set: a profile's JSON (model_dump) states every field
        fields = type(self).model_fields
        both = [f for f in _SINGLE_ROUTE_FIELDS if getattr(self, f) != fields[f].default]
        if both:
            raise ValueError(
                f"routes: give {', '.join(both)} per route in [[load.routes]], or no routes "
                "(the single-route form), not both"
            )
        labels = [r.label for r in self.routes]
        dups = sorted({x for x in labels if labels.count(x) > 1})
        if dups:
            raise ValueError(f"routes: route names (the path when unnamed) repeat: {dups}")
        return self


EnvName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")]
# Names a run already gives a meaning to: Prometheus jobs and environment variables.
RESERVED_JOBS = frozenset({"loadgen", "prober", "harness", "prometheus", "redis"})
RESERVED_ENV = frozenset({"HOST", "PORT", "DATA_DIR", "REDIS_URL", "POSTGRESQL_URL"})
# What the service's `env` values and its command may name, filled in per build.
# {host}: the address to listen on (127.0.0.1 locally, where each build has a network of
# its own; 0.0.0.0 in a pod, where the Service and the load reach it on the pod IP).
SERVICE_PLACEHOLDERS = ("{host}", "{port}", "{data_dir}", "{redis_url}", "{postgresql_url}")
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


# What a confined substrate process sees of the host besides its own tree and its data
# directory (sreforge.runtime.sandbox: SYSTEM_DIRS and SYSTEM_LINKS; a test keeps them equal).
CONFINED_HOST_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_CONFINED = (
    "a confined service runs as nobody, without capabilities, and sees only the OS "
    f"({', '.join(CONFINED_HOST_PATHS)}), its own tree and its data directory"
)


def _confined_sees(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in CONFINED_HOST_PATHS)


def _host_path(path: str) -> str:
    """A host path the service says it reads: refused unless a confined process sees it."""
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts or str(pure) != path:
        raise ValueError(f"{path!r}: must be an absolute, normalised path")
    if not _confined_sees(path):
        raise ValueError(f"{path}: not readable where the service runs: {_CONFINED}")
    return path


def _capability(name: str) -> str:
    """A capability the service says it needs: always refused, none is granted."""
    raise ValueError(f"{name}: not granted where the service runs: {_CONFINED}")


def _command(argv: list[str]) -> list[str]:
    """A command run confined (a build, the data preparation, the CI gate's tests)."""
    program = argv[0] if argv else ""
    if program.startswith("/") and not _confined_sees(str(PurePosixPath(program))):
        raise ValueError(f"{program}: not visible where the service runs: {_CONFINED}")
    return argv


def _source(path: str) -> str:
    """The service's tree is all it sees of the repository: never the scenarios, never all."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"{path}: must be a path inside the repository, relative to its root")
    if not pure.parts or pure.parts[0] == "scenarios":
        raise ValueError(
            f"{path or '.'}: the service's tree is in its view, and this one holds the "
            "scenarios (root causes, fixes, decoys); give it a tree of its own"
        )
    return path


HostPath = Annotated[str, AfterValidator(_host_path)]
Capability = Annotated[str, Field(pattern=r"^[A-Z_]+$"), AfterValidator(_capability)]
Source = Annotated[str, AfterValidator(_source)]
Command = Annotated[list[str], Field(min_length=1), AfterValidator(_command)]


class UpstreamSpec(_Model):
    """A substrate service the scenario's service depends on, started before it.

    It runs as its own process from its own (never patched) source tree, gets HOST, PORT and
    DATA_DIR like the service plus `env`, and its /metrics is scraped as `job=<name>`; the service
    receives its base URL in the environment variable `url_env`.
    """

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=63)]
    source: Source = Field(description="path of its tree, relative to the repository root")
    command: Command = Field(description="start command; gets HOST, PORT, DATA_DIR")
    url_env: EnvName = Field(description="the service's environment variable for its base URL")
    env: dict[EnvName, str] = Field(default_factory=dict)
    health_path: Annotated[str, Field(pattern=r"^/")] = "/healthz"
    reads: list[HostPath] = Field(
        default_factory=list, description="host paths it reads besides its tree, data and the OS"
    )
    capabilities: list[Capability] = Field(
        default_factory=list, description="Linux capabilities it needs (none can be granted)"
    )

    @model_validator(mode="after")
    def _names_free(self) -> UpstreamSpec:
        if self.name in RESERVED_JOBS:
            raise ValueError(f"name {self.name!r} is reserved (a run's own job)")
        if self.url_env in RESERVED_ENV:
            raise ValueError(f"url_env {self.url_env!r} is reserved (the runtime sets it)")
        return self


class ServiceSpec(_Model):
    """The substrate service a scenario runs: where its source is and how to start and test it."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")]
    source: Source = Field(description="path of the healthy tree, relative to the repository root")
    command: Command = Field(description="start command; gets HOST, PORT, DATA_DIR")
    prepare: Annotated[list[str], AfterValidator(_command)] = Field(
        default_factory=list, description="run once per run, before start"
    )
    test_command: Command
    health_path: Annotated[str, Field(pattern=r"^/")] = "/healthz"
    metrics_path: Annotated[str, Field(pattern=r"^/")] = "/metrics"
    dependencies: list[Literal["redis", "postgresql"]] = Field(default_factory=list)
    # More environment for the service's builds (and its data preparation): values may
    # name {host}, {port}, {data_dir}, {redis_url}, {postgresql_url} (e.g. a third-party service's
    # own setting, KINTO_STORAGE_URL = "{postgresql_url}").
    env: dict[EnvName, str] = Field(default_factory=dict)
    upstreams: list[UpstreamSpec] = Field(default_factory=list)
    test_timeout_seconds: Seconds = 300
    deploy_timeout_seconds: Seconds = 60
    # What the service needs from the machine beyond its tree, its data directory and the
    # OS: checked against the confinement it runs in (sreforge.runtime.confine), so a
    # scenario that needs more is refused here, not at its first deploy.
    reads: list[HostPath] = Field(
        default_factory=list, description="host paths it reads besides its tree, data and the OS"
    )
    capabilities: list[Capability] = Field(
        default_factory=list, description="Linux capabilities it needs (none can be granted)"
    )

    @model_validator(mode="after")
    def _placeholders_known(self) -> ServiceSpec:
        for where, values in (("command", self.command), ("env", list(self.env.values()))):
            for value in values:
                for found in _PLACEHOLDER.findall(value):
                    if found not in SERVICE_PLACEHOLDERS:
                        raise ValueError(
                            f"{where}: {found} is not one of {', '.join(SERVICE_PLACEHOLDERS)}"
                        )
        for dep in ("redis", "postgresql"):
            named = f"{{{dep}_url}}"
            if dep not in self.dependencies and any(named in v for v in self.env.values()):
                raise ValueError(f"env: {named} needs `{dep}` in dependencies")
        reserved = sorted(set(self.env) & RESERVED_ENV)
        if reserved:
            raise ValueError(f"env: {reserved} are set by the runtime")
        return self

    @model_validator(mode="after")
    def _upstreams_distinct(self) -> ServiceSpec:
        names = [u.name for u in self.upstreams]
        envs = [u.url_env for u in self.upstreams]
        if self.name in RESERVED_JOBS:
            raise ValueError(f"name {self.name!r} is reserved (a run's own job)")
        for what, values in (("upstream names", [self.name, *names]), ("url_env", envs)):
            dups = sorted({v for v in values if values.count(v) > 1})
            if dups:
                raise ValueError(f"{what} must be distinct (service included), repeated: {dups}")
        return self


Author = Annotated[str, Field(pattern=r"^[^<>\n]+ <[^<>\s]+@[^<>\s]+>$")]


class HistoryCommit(_Model):
    """One commit of the release's history: a patch (its `#` header is the message), who
    wrote it and how long before the hand-off."""

    patch: Annotated[str, Field(pattern=r"^[^/].*\.patch$")]
    author: Author = Field(description='"Name <email>"')
    age_hours: Annotated[float, Field(gt=0, le=24 * 365)]
    # a cause of the incident (harness-internal, like root_cause.md): the rest are harmless
    cause: bool = False


class History(_Model):
    """The release as a series of commits on the healthy tree (oldest first). Together they
    make exactly the regressed tree (`regression.patch`); some are harmless. The scenario
    says whether reverting the newest commit alone mends the incident: the catalogue then
    holds `fixes/revert-newest.patch` or `decoys/revert-newest.patch` (checked)."""

    revert_newest_fixes: bool
    commits: Annotated[list[HistoryCommit], Field(min_length=1)]

    @model_validator(mode="after")
    def _oldest_first(self) -> History:
        ages = [c.age_hours for c in self.commits]
        if any(a <= b for a, b in pairwise(ages)):
            raise ValueError(f"commits must go oldest first (age_hours decreasing), got {ages}")
        patches = [c.patch for c in self.commits]
        dups = sorted({p for p in patches if patches.count(p) > 1})
        if dups:
            raise ValueError(f"a patch is one commit, repeated: {dups}")
        causes = [c.patch for c in self.commits if c.cause]
        if not causes:
            raise ValueError("no commit is marked `cause = true`: which one is the regression?")
        newest_alone = causes == [self.commits[-1].patch]
        if self.revert_newest_fixes != newest_alone:
            raise ValueError(
                f"revert_newest_fixes = {str(self.revert_newest_fixes).lower()}, but the causes "
                f"are {causes} and the newest commit is {self.commits[-1].patch}"
            )
        return self

    @property
    def category(self) -> str:
        """How the incident sits in its history, for reading a leaderboard by category."""
        causes = sum(c.cause for c in self.commits)
        shape = "one cause" if causes == 1 else f"{causes} causes in {causes} commits"
        where = "newest commit" if self.revert_newest_fixes else "under a harmless newer commit"
        return f"{shape}, {where}"


class Difficulty(_Model):
    """What an SRE would look at to find this incident (harness-internal)."""

    signals: Annotated[list[str], Field(min_length=1)]


# The decoy classes every scenario must have (sreforge.catalogue; the issue "Grading that
# cannot be gamed"): the ways a patch can look like a fix to a weaker oracle.
RequiredDecoyClass = Literal[
    "sniffing",
    "fix-one-break-another",
    "gives-way-after-the-window",
    "time-bomb",
    "fabricated-answers",
]


class Decoys(_Model):
    """What the scenario's decoys cannot cover (harness-internal)."""

    # A required class the service's shape rules out, with why (e.g. no second route to
    # break): shown in SCENARIOS.md's decoy-class table instead of a decoy.
    not_applicable: dict[RequiredDecoyClass, Annotated[str, Field(min_length=20)]] = Field(
        default_factory=dict
    )


class Scenario(_Model):
    """One incident: a service, the regression that breaks it, the alert that proves it."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=63)]
    title: str
    family: Literal["latency", "errors", "saturation", "resources", "configuration", "compound"]
    target_alert: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    rules: str = "rules.yml"
    regression: str = "regression.patch"
    protected: list[str] = Field(default_factory=list)
    # PromQL selector whose presence proves the target alert's input exists (harness-owned).
    target_series: str = 'sreforge_load_request_duration_seconds_count{job="loadgen"}'
    service: ServiceSpec
    load: LoadProfile
    verify: VerifySpec = VerifySpec()
    history: History | None = None
    difficulty: Difficulty | None = None
    decoys: Decoys = Decoys()
    # Where it can be graded: "kube" needs its images (hack/images.sh) and incident.yaml.
    runtimes: Annotated[list[Literal["local", "kube"]], Field(min_length=1)] = ["local", "kube"]

    # Set by the loader (sreforge.scenarios), not by scenario.toml.
    directory: Path = Field(default=Path(), exclude=True)

    @property
    def rules_path(self) -> Path:
        return self.directory / self.rules

    @property
    def regression_path(self) -> Path:
        return self.directory / self.regression

    @property
    def history_paths(self) -> list[Path]:
        """The history's patches, oldest first (none: the regression is one commit)."""
        return [self.directory / c.patch for c in (self.history.commits if self.history else [])]

    @property
    def brief_path(self) -> Path:
        return self.directory / "brief.md"

    @property
    def root_cause_path(self) -> Path:
        return self.directory / "root_cause.md"

    def source_path(self, repo_root: Path) -> Path:
        return (repo_root / self.service.source).resolve()
