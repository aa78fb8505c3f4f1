"""One environment of a scenario on this machine: processes on 127.0.0.1 and a real Prometheus.

The service's trees (healthy, regressed), its data, Redis and upstreams, the harness
exporter, the scrape proxy, Prometheus and the load generator; swapping one build of the
service for another; what the run observes of them. Which build runs when is the driver's
business (`sreforge.runtime.local.LocalRun`), not this module's.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sreforge.api.observation import AlertSample
from sreforge.api.scenario import LoadProfile, Scenario
from sreforge.load import control as load_control
from sreforge.load.command import generator_argv
from sreforge.runtime import ci, contention, postgres, sources
from sreforge.runtime.confine import Place, Substrate
from sreforge.runtime.harness import HARNESS_JOB, HarnessExporter, ScrapeProxy
from sreforge.runtime.process import Managed, ProcessError, free_port, resolve_command
from sreforge.runtime.prometheus import PrometheusServer
from sreforge.telemetry import LOAD_JOB, PROBE_JOB, Telemetry, control_window

# How long a swap waits for Prometheus to scrape the new build before stopping the old.
SCRAPE_SWITCH_SECONDS = 10.0
# Quiet this long (a rate window plus the rules' `for`) before the injection counts.
QUIET_SECONDS = 15.0
# A build that exits is started again in place, as a kubelet restarts a container
# (restartPolicy Always): after this back-off, doubling per restart up to the cap.
RESTART_BACKOFF_SECONDS = 1.0
RESTART_BACKOFF_CAP_SECONDS = 10.0
SUPERVISE_EVERY_SECONDS = 0.25

# Range queries recorded into the run directory before Prometheus stops (for reports).
SERIES = {
    "target_rate": 'max(sreforge_load_target_rate{job="loadgen"})',
    "achieved_rate": (
        'sum(rate(sreforge_load_scheduled_iterations_total{job="loadgen"}[10s]))'
        ' - sum(rate(sreforge_load_dropped_iterations_total{job="loadgen"}[10s]))'
    ),
    "p95_latency_seconds": (
        "histogram_quantile(0.95, sum by (le) "
        '(rate(sreforge_load_request_duration_seconds_bucket{job="loadgen"}[10s])))'
    ),
    "error_ratio": (
        'sum(rate(sreforge_load_requests_total{job="loadgen",outcome!="success"}[10s]))'
        ' / sum(rate(sreforge_load_requests_total{job="loadgen"}[10s]))'
    ),
    # The independent prober's share of good answers (job="prober").
    "probe_success_ratio": (
        'sum(rate(sreforge_probe_requests_total{job="prober",outcome="success"}[30s]))'
        ' / sum(rate(sreforge_probe_requests_total{job="prober"}[30s]))'
    ),
    # The harness exporter's view of the service process (job="harness").
    "target_memory_rss_bytes": f'max(sreforge_target_memory_rss_bytes{{job="{HARNESS_JOB}"}})',
}


LOAD_LIFETIME_SECONDS = 86_400  # the longest an environment's load and prober may run


def environment_load(scenario: Scenario) -> LoadProfile:
    """The load of an environment: the scenario's, running as long as the environment,
    however many cases (each with its soak) it holds. The harness stops it by PID at
    teardown and it dies with the harness (PDEATHSIG); the profile's own 30 minutes ended
    the load in the middle of a ten-case validation of the Kinto scenario (Inconclusive:
    the target series vanished)."""
    return scenario.load.model_copy(update={"duration_seconds": LOAD_LIFETIME_SECONDS})


@dataclass(frozen=True)
class Build:
    """A build as it was rolled out: what starting it again in place needs."""

    tree: Path
    label: str
    place: Place
    data: Path
    database: str = ""  # its PostgreSQL database, when the service has one

    @property
    def port(self) -> int:
        return self.place.port


class LocalEnvironment:
    """The processes of one scenario's environment under `directory`, set up once.

    `setup` starts everything with the healthy build under load and waits until the target
    alert is quiet; `swap_service` rolls another build in; `teardown` stops it all.
    """

    def __init__(
        self,
        scenario: Scenario,
        repo_root: Path,
        directory: Path,
        *,
        control_seconds: int = 0,
        confined: bool = True,
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.scenario = scenario
        self.repo_root = repo_root
        self.dir = directory
        self.control_seconds = control_seconds
        self.say = say
        self.confined = confined
        self.substrate: Substrate | None = None  # made by setup
        self.dependency_ports: list[int] = []  # Redis's, the upstreams': what a build reaches
        self.procs: list[Managed] = []
        self.service: Managed | None = None
        self.service_port = 0
        self.loadgen: Managed | None = None
        self.loadgen_port = 0
        self.loadgen_socket: Path | None = None
        # the independent prober: the same mix at a low rate, its own identity and series
        self.prober: Managed | None = None
        self.prober_port = 0
        self.prober_socket: Path | None = None
        # which ids are popular this run: drawn once, shared by the load and the prober
        self.ids_seed = secrets.randbelow(2**31)
        self.prom: PrometheusServer | None = None
        self.cpu = contention.CpuMeter()  # CPU spent outside this run's process tree
        self.telemetry: Telemetry | None = None
        self.redis_url: str | None = None
        self.redis_port = 0
        # PostgreSQL: its port, and the database the next build is given (runtime/postgres)
        self.pg_port = 0
        self.pg_database = ""
        # the interpreter `python` means for the service: a fetched source's own venv
        self.service_python: str | None = None
        self.upstream_env: dict[str, str] = {}  # url_env -> base URL of each upstream
        self.harness: HarnessExporter | None = None
        self.scrape: ScrapeProxy | None = None
        self.control: dict[str, Any] | None = None  # the control window's observation
        # The running build's restarts since it was rolled out (the supervisor's count)
        # and what it needs to start it again in place: its tree, label and place.
        self.restarts = 0
        self._build: Build | None = None
        self._lock = threading.RLock()  # a swap and a restart never interleave
        self._closing = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.wall: dict[str, float] = {}  # the environment's own seconds: setup, warmup

    # ----- trees -------------------------------------------------------------------
    def prepare_trees(self) -> None:
        """Copy the service's source twice: the healthy tree and the regressed one."""
        self.healthy = self.dir / "trees" / "healthy"
        self.regressed = self.dir / "trees" / "regressed"
        try:
            self.service_python = sources.scenario_trees(
                self.scenario, self.repo_root, self.healthy, self.regressed
            )
        except sources.SourceError as exc:
            raise ProcessError(str(exc)) from exc
        self.data_dir = self.dir / "data"
        self.data_dir.mkdir()

    def fresh_state(self, label: str) -> None:
        """The next build starts on a copy of the data as the scenario prepared it, with an
        empty Redis: nothing a graded case wrote (an index a fix created, pages it cached in
        Redis) reaches the next case. A build already running keeps the data it has."""
        fresh = self.dir / f"data-{label}"
        shutil.copytree(self.dir / "data-prepared", fresh)
        self.data_dir = fresh
        if self.redis_port:
            _redis_flushall(self.redis_port)
        if self.pg_port:
            self.pg_database = f"case_{label.replace('-', '_')}"[:63].lower()
            postgres.create_database(self.pg_port, self.pg_database, template=postgres.PREPARED)

    # ----- processes ---------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], **kw: Any) -> Managed:
        """A harness process (the load generator): never confined."""
        proc = Managed(name, argv, log_path=self.dir / "logs" / f"{name}.log", **kw)
        self.procs.append(proc)
        return proc

    def _spawn_substrate(
        self, name: str, argv: list[str], *, tree: Path | None = None, **kw: Any
    ) -> Managed:
        """A substrate process (a build, an upstream, Redis), confined (runtime.confine)."""
        assert self.substrate is not None
        proc = self.substrate.spawn(
            name, argv, log_path=self.dir / "logs" / f"{name}.log", tree=tree, **kw
        )
        self.procs.append(proc)
        return proc

    def confine_ci(self, argv: list[str], tree: Path) -> tuple[list[str], dict[str, str] | None]:
        """The CI gate's step `argv` in the patched `tree`, confined like the builds (the
        patch's code runs in it too); as it is before the substrate exists."""
        if self.substrate is None:
            return resolve_command(argv, self.service_python), None
        return self.substrate.wrap(argv, tree=tree, tree_writable=True, python=self.service_python)

    def _service_env(self, port: int, data_dir: Path, database: str = "") -> dict[str, str]:
        assert self.substrate is not None
        data = self.substrate.data_path(data_dir)
        env = {"HOST": "127.0.0.1", "PORT": str(port), "DATA_DIR": data}
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        if self.pg_port and database:
            env["POSTGRESQL_URL"] = postgres.url(self.pg_port, database)
        env.update(self.upstream_env)
        for key, value in self.scenario.service.env.items():
            env[key] = self._fill(value, env)
        return env

    @staticmethod
    def _fill(value: str, env: dict[str, str]) -> str:
        """A scenario's {host}, {port}, {data_dir}, {redis_url}, {postgresql_url} for one
        build."""
        for name, key in (
            ("host", "HOST"),
            ("port", "PORT"),
            ("data_dir", "DATA_DIR"),
            ("redis_url", "REDIS_URL"),
            ("postgresql_url", "POSTGRESQL_URL"),
        ):
            value = value.replace(f"{{{name}}}", env.get(key, ""))
        return value

    def start_service(self, tree: Path, label: str) -> tuple[Managed, Build]:
        """Start the service from `tree` on a new port; returns it once it is healthy."""
        assert self.substrate is not None
        build = Build(
            tree,
            label,
            self.substrate.place(reach=self.dependency_ports),
            self.data_dir,
            self.pg_database,
        )
        svc = self.scenario.service
        proc = self._spawn_build(build)
        try:
            proc.wait_http(
                f"http://127.0.0.1:{build.port}{svc.health_path}", svc.deploy_timeout_seconds
            )
        except ProcessError:
            self._retire(proc, build.port)
            raise
        return proc, build

    def _spawn_build(self, build: Build, restart: int = 0) -> Managed:
        svc = self.scenario.service
        name = f"{svc.name}-{build.label}" + (f"-restart{restart}" if restart else "")
        env = self._service_env(build.port, build.data, build.database)
        return self._spawn_substrate(
            name,
            [self._fill(a, env) for a in svc.command],
            place=build.place,
            tree=build.tree,
            data=build.data,
            env=env,
            python=self.service_python,
        )

    # ----- the supervisor: a build that exits is started again, and counted -------------
    def _supervise(self) -> None:
        down: tuple[Managed, float] | None = None  # the build that exited, when to restart it
        while not self._closing.wait(SUPERVISE_EVERY_SECONDS):
            with self._lock:
                proc, build = self.service, self._build
                if proc is None or build is None or proc.alive():
                    down = None
                    continue
                now = time.monotonic()
                if down is None or down[0] is not proc:
                    # counted as it exits: the build is down from now on, not from the restart
                    self.restarts += 1
                    delay = min(
                        RESTART_BACKOFF_CAP_SECONDS,
                        RESTART_BACKOFF_SECONDS * 2 ** (self.restarts - 1),
                    )
                    down = (proc, now + delay)
                    self.say(
                        f"{proc.name} exited (code {proc.proc.returncode}); restarting it "
                        f"in {delay:.0f}s, as a kubelet would"
                    )
                if now < down[1]:
                    continue
                try:
                    new = self._spawn_build(build, restart=self.restarts)
                except (OSError, ProcessError) as exc:
                    self.say(f"restarting {proc.name} failed: {exc}; trying again")
                    down = (proc, now + RESTART_BACKOFF_CAP_SECONDS)
                    continue
                self.service = new
                if self.harness is not None:
                    self.harness.follow(self.scenario.service.name, new.pid)

    def _retire(self, proc: Managed, port: int) -> None:
        proc.stop()
        assert self.substrate is not None
        self.substrate.release(port)

    def swap_service(self, tree: Path, label: str) -> float:
        """Start `tree` beside the running build, move the load and the scrape, stop the old.

        Returns the moment the load moved: that is the rollout time, not the old build's exit.
        """
        new, build = self.start_service(tree, label)
        port = build.port
        with self._lock:
            old, old_port = self.service, self.service_port
            self.service, self.service_port = new, port
            self._build = build
            self.restarts = 0  # counted per rollout, as a new pod's restartCount
        if self.harness is not None:
            self.harness.follow(self.scenario.service.name, new.pid)
        assert self.scrape is not None
        self.scrape.point(port)
        for what, client, sock in (
            ("load generator", self.loadgen, self.loadgen_socket),
            ("prober", self.prober, self.prober_socket),
        ):
            if client is None or sock is None:
                continue
            try:  # over the client's control socket: no network path can re-point it
                load_control.set_target(sock, f"http://127.0.0.1:{port}")
            except OSError as exc:
                raise ProcessError(f"the {what} did not move to {port}: {exc}") from exc
        switched = time.time()
        if old is not None:
            self.await_scrape(port)
            # Out of the way already (no load, no scrape): a build that ignores SIGTERM
            # costs its stop timeout in the background, not in the next step (teardown
            # still stops everything it started).
            threading.Thread(
                target=self._retire, args=(old, old_port), name="sreforge-retire", daemon=True
            ).start()
        return switched

    def await_scrape(self, port: int, timeout: float = SCRAPE_SWITCH_SECONDS) -> None:
        """Wait until Prometheus has scraped the new build once before stopping the old.

        Like endpoints being updated before the old pod terminates: stopping the old build
        while a scrape of it is in flight records a failed scrape (up=0), which the oracle
        rightly reads as service-down. Best effort: after `timeout` the old build is stopped
        anyway.
        """
        assert self.scrape is not None
        deadline = time.monotonic() + timeout
        while self.scrape.served(port) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)

    def setup(self) -> None:
        """Start everything, the healthy build under load, and wait until it is quiet."""
        t0 = time.time()
        self.prepare_trees()
        self.substrate = Substrate(self.dir, confined=self.confined)
        svc = self.scenario.service
        if "postgresql" in svc.dependencies:
            self._start_postgres()
        if svc.prepare:
            given = self._service_env(0, self.data_dir, postgres.PREPARED if self.pg_port else "")
            given.pop("PORT")
            argv = [self._fill(a, given) for a in svc.prepare]
            self.say(f"preparing data: {' '.join(argv)}")
            # it reaches the service's dependencies (PostgreSQL) like a build
            where = self.substrate.place(reach=self.dependency_ports) if self.pg_port else None
            command, env = self.substrate.wrap(
                argv,
                tree=self.healthy,
                data=self.data_dir,
                python=self.service_python,
                place=where,
                env=given,
            )
            done = subprocess.run(
                command,
                cwd=self.healthy,
                env=env,
                check=False,
                capture_output=True,
                timeout=300,
            )
            if where is not None:
                self.substrate.release(where.port)
            if done.returncode != 0:
                out = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
                raise ProcessError(
                    f"preparing data ({' '.join(argv)}) exited {done.returncode}: {out}"
                )
        # every case of a session starts from the data as prepared here (see fresh_state)
        shutil.copytree(self.data_dir, self.dir / "data-prepared")
        if self.pg_port:  # the first builds' database; later cases get theirs in fresh_state
            self.pg_database = "live"
            postgres.create_database(self.pg_port, self.pg_database, template=postgres.PREPARED)
        if "redis" in svc.dependencies:
            place = self.substrate.place()
            port = place.port
            self.dependency_ports.append(port)
            redis = self._spawn_substrate(
                "redis",
                [
                    shutil.which("redis-server") or "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                place=place,
            )
            deadline = time.monotonic() + 10
            while not _tcp_ready(port):
                if not redis.alive() or time.monotonic() > deadline:
                    raise redis.fail("did not listen")
                time.sleep(0.05)
            self.redis_url = f"redis://127.0.0.1:{port}/0"
            self.redis_port = port
        upstream_targets = self._start_upstreams()
        self.harness = HarnessExporter()
        self.harness.start()
        self.scrape = ScrapeProxy(svc.name)
        self.scrape.start()
        loadgen_port = free_port()
        prober_port = free_port()
        self.prom = PrometheusServer(
            self.dir / "prometheus",
            [self.scenario.rules_path],
            [svc.name, LOAD_JOB, PROBE_JOB, HARNESS_JOB, *upstream_targets],
        )
        # Every target is known before Prometheus starts: its first discovery finds them
        # all, and none waits for the discovery manager's throttle after a later change.
        self.prom.set_targets(HARNESS_JOB, [self.harness.address])
        # stable: swaps never touch it; scraped at the service's own metrics path
        self.prom.set_target_groups(
            svc.name,
            [{"targets": [self.scrape.address], "labels": {"__metrics_path__": svc.metrics_path}}],
        )
        self.prom.set_targets(LOAD_JOB, [f"127.0.0.1:{loadgen_port}"])
        self.prom.set_targets(PROBE_JOB, [f"127.0.0.1:{prober_port}"])
        for job, address in upstream_targets.items():
            self.prom.set_targets(job, [address])
        self.prom.start()
        self.procs.append(self.prom.proc)  # type: ignore[arg-type]
        self.telemetry = Telemetry(
            self.prom.url, target_series=self.scenario.target_series, service_job=svc.name
        )
        self.say("starting the healthy build under load")
        t_healthy = time.time()
        self.swap_service(self.healthy, "healthy")
        self._supervisor = threading.Thread(
            target=self._supervise, name="sreforge-supervisor", daemon=True
        )
        self._supervisor.start()
        self.wall["healthyStart"] = time.time() - t_healthy
        # the control sockets live outside the run directory, in a 0700 folder of their own
        controls = Path(tempfile.mkdtemp(prefix="sreforge-ctl-"))
        self.loadgen_socket = controls / "load.sock"
        self.prober_socket = controls / "probe.sock"
        self.loadgen, self.loadgen_port = self._start_client(
            "loadgen", loadgen_port, self.loadgen_socket, probe=False
        )
        self.prober, self.prober_port = self._start_client(
            "prober", prober_port, self.prober_socket, probe=True
        )
        deadline = time.monotonic() + 30
        while self.telemetry.load() is None or self._probe_unseen():  # first scrapes with rates
            if time.monotonic() > deadline:
                raise ProcessError("Prometheus saw no load-generator or prober metrics in 30s")
            time.sleep(0.5)
        self.say("waiting for the healthy build to warm up (target alert quiet)")
        self.wall["warmup"] = self._wait_quiet()
        if self.control_seconds:
            self._control_window()
        self.wall["setup"] = time.time() - t0

    def _probe_unseen(self) -> bool:
        assert self.telemetry is not None
        probe = self.telemetry.probe()
        return probe is None or probe.success_ratio is None

    def _start_client(
        self, name: str, port: int, socket_path: Path, *, probe: bool
    ) -> tuple[Managed, int]:
        """Start the load generator or the prober against the current build; both draw
        their ids from the run's one popularity layout (`ids_seed`)."""
        port_file = self.dir / f"{name}.port"
        proc = self._spawn(
            name,
            generator_argv(
                environment_load(self.scenario),
                f"http://127.0.0.1:{self.service_port}",
                listen=f"127.0.0.1:{port}",
                port_file=port_file,
                control_socket=socket_path,
                seed=secrets.randbelow(2**31),
                ids_seed=self.ids_seed,
                probe=probe,
            ),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        return proc, int(proc.wait_file(port_file, 20))

    def _start_postgres(self) -> None:
        """Debian's PostgreSQL, confined like Redis, with an empty `prepared` database."""
        assert self.substrate is not None
        pg_data = self.dir / "postgres"
        pg_data.mkdir()
        where = self.substrate.data_path(pg_data)
        self.say("starting postgresql")
        command, env = self.substrate.wrap(postgres.initdb_argv(where), tree=None, data=pg_data)
        done = subprocess.run(
            command, env=env, cwd="/", capture_output=True, timeout=120, check=False
        )
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise ProcessError(f"initdb exited {done.returncode}: {out}")
        place = self.substrate.place()
        server = self._spawn_substrate(
            "postgresql", postgres.server_argv(where, place.port), place=place, data=pg_data
        )
        postgres.wait_ready(place.port, server.alive)
        self.dependency_ports.append(place.port)
        self.pg_port = place.port
        postgres.create_database(self.pg_port, postgres.PREPARED)

    def _start_upstreams(self) -> dict[str, str]:
        """Start every upstream service from a copy of its tree; returns job -> host:port."""
        targets: dict[str, str] = {}
        for up in self.scenario.service.upstreams:
            src = (self.repo_root / up.source).resolve()
            if not src.is_dir():
                raise ProcessError(f"upstream {up.name}: source {src} does not exist")
            tree = self.dir / "trees" / f"upstream-{up.name}"
            ci.copy_tree(src, tree)
            data = self.dir / f"data-upstream-{up.name}"  # its own: not inside the service's
            data.mkdir()
            assert self.substrate is not None
            place = self.substrate.place()
            port = place.port
            self.dependency_ports.append(port)
            env = {
                "HOST": "127.0.0.1",
                "PORT": str(port),
                "DATA_DIR": self.substrate.data_path(data),
                **up.env,
            }
            self.say(f"starting upstream {up.name}")
            proc = self._spawn_substrate(
                f"upstream-{up.name}", up.command, place=place, tree=tree, data=data, env=env
            )
            proc.wait_http(
                f"http://127.0.0.1:{port}{up.health_path}",
                self.scenario.service.deploy_timeout_seconds,
            )
            self.upstream_env[up.url_env] = f"http://127.0.0.1:{port}"
            targets[up.name] = f"127.0.0.1:{port}"
        return targets

    def _wait_quiet(self) -> float:
        """Wait until the healthy build has warmed up: the target alert neither pending nor
        firing. The injection starts from quiet, so the fire it confirms is the regression's,
        not the healthy build's cold-cache transient. Returns the seconds waited."""
        assert self.telemetry is not None
        target = self.scenario.target_alert
        started = time.time()
        deadline = started + self.scenario.verify.fire_timeout_seconds
        quiet_since: float | None = None
        while time.time() < deadline:
            alerts = self.telemetry.alerts()
            if alerts is not None and target not in alerts[0] and target not in alerts[1]:
                quiet_since = quiet_since or time.time()
                if time.time() - quiet_since >= QUIET_SECONDS:
                    return time.time() - started
            else:
                quiet_since = None
            time.sleep(1)
        raise ProcessError(
            f"{target} is still pending or firing on the healthy build after "
            f"{self.scenario.verify.fire_timeout_seconds}s: the scenario's baseline is unhealthy"
        )

    def _control_window(self) -> None:
        """Observe the healthy build under the same load for as long as a fix is held: the
        target alert and every page must stay quiet, and the build must not restart. Its
        highest p95 per route is kept with the verdict."""
        assert self.telemetry is not None
        self.say(f"control: healthy build under load for {self.control_seconds}s")
        self.control = control_window(
            self.telemetry,
            self.scenario.target_alert,
            self.control_seconds,
            restarts=lambda: self.restarts,
        )

    # ----- observations ------------------------------------------------------------
    def generator_stats(self) -> dict[str, Any] | None:
        """The load generator's /stats (counted since it started), or None if unreachable."""
        if self.loadgen_socket is None or not self.loadgen_port:
            return None
        with contextlib.suppress(OSError, ValueError):
            return load_control.read_stats(self.loadgen_socket, timeout=3)
        return None

    def sample(self) -> AlertSample:
        """One look at the alerts and the load, with the CPU contention outside the run."""
        assert self.telemetry is not None
        sample = self.telemetry.sample()
        cpu = self.cpu.sample()
        if cpu is not None:
            sample = sample.model_copy(update={"outside_cpu": cpu.outside, "cpu_wait": cpu.wait})
        return sample.model_copy(update={"restarts": self.restarts})

    def series(self, since: float, end: float) -> dict[str, Any] | None:
        """The SERIES range queries over [since, end], or None before Prometheus started."""
        if self.telemetry is None:
            return None
        return {name: self.telemetry.query_range(q, since, end, 1.0) for name, q in SERIES.items()}

    def teardown(self) -> None:
        """Stop every process (newest first) and the harness's own servers; never raises."""
        self._closing.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=15)
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        for server in (self.harness, self.scrape):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()
        if self.substrate is not None:
            with contextlib.suppress(Exception):
                self.substrate.close()
        if self.loadgen_socket is not None:
            shutil.rmtree(self.loadgen_socket.parent, ignore_errors=True)


def _redis_flushall(port: int) -> None:
    """FLUSHALL in Redis's wire protocol (RESP): no client library for one command."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        answer = conn.recv(64)
    if not answer.startswith(b"+OK"):
        raise ProcessError(f"redis on port {port} did not flush: {answer!r}")


def _tcp_ready(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
