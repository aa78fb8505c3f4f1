"""The local runtime: the closed loop with processes on 127.0.0.1 and a real Prometheus.

It owns all I/O of a local run; the decisions are `sreforge.loop.step` and the oracle.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sreforge import loop
from sreforge.api.observation import AlertSample
from sreforge.api.record import (
    ControlRecord,
    RunRecord,
    ScenarioRecord,
    SessionRecord,
    SubmissionRecord,
)
from sreforge.api.scenario import Scenario
from sreforge.load.command import generator_argv
from sreforge.loop import Phase, RunState
from sreforge.runtime import ci, contention, sandbox
from sreforge.runtime.driver import Driver
from sreforge.runtime.harness import HARNESS_JOB, HarnessExporter, ScrapeProxy
from sreforge.runtime.process import Managed, ProcessError, free_port, resolve_command
from sreforge.runtime.prometheus import PrometheusServer
from sreforge.telemetry import LOAD_JOB, Telemetry

PROGRESS_EVERY_SECONDS = 5.0
# How long a swap waits for Prometheus to scrape the new build before stopping the old.
SCRAPE_SWITCH_SECONDS = 10.0
# Quiet this long (a rate window plus the rules' `for`) before the injection counts.
QUIET_SECONDS = 15.0

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
    # The harness exporter's view of the service process (job="harness").
    "target_memory_rss_bytes": f'max(sreforge_target_memory_rss_bytes{{job="{HARNESS_JOB}"}})',
}


@dataclass
class RunOptions:
    """How one local run gets its submission and where it writes."""

    runs_dir: Path
    fix: Path | None = None
    agent: str | None = None
    agent_model: str | None = None
    rca: Path | None = None
    sustain_seconds: int | None = None
    control_seconds: int = 0
    agent_timeout_seconds: int = 1800
    agent_shares: list[Path] = field(default_factory=list)  # read-only inside the sandbox
    agent_unsandboxed: bool = False  # run the agent as the harness's user, unconfined
    rearm_timeout_seconds: float | None = None  # between cases: None = the fire timeout
    progress: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))
    live: bool = True  # a live progress line on a terminal; plain lines otherwise


def new_run_id(scenario: str) -> str:
    stamp = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario}-{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class CaseSpec:
    """One submission to grade: a patch, or an agent command whose edits are the patch."""

    label: str
    fix: Path | None = None
    agent: str | None = None
    rca: Path | None = None
    agent_model: str | None = None
    trial: int = 1  # a campaign grades each submitter several times

    def __post_init__(self) -> None:
        if (self.fix is None) == (self.agent is None):
            raise ValueError("give exactly one of a fix patch or an agent command")

    @classmethod
    def of(cls, options: RunOptions) -> CaseSpec:
        """The one case of `sreforge run`."""
        label = options.fix.name if options.fix is not None else f"agent: {options.agent}"
        return cls(label, options.fix, options.agent, options.rca, options.agent_model)


@dataclass(frozen=True)
class SessionContext:
    """Where an environment stands in a warm session (sreforge.runtime.session)."""

    id: str
    environment: int = 1
    campaign: str | None = None
    first_case: int = 1  # the place in the session of this environment's first case
    cases: int = 1  # the session's case count
    restarted_because: str | None = None


class LocalRun:
    """One environment of a scenario on this machine, grading its cases one after another.

    `sreforge run` grades one case and the run directory holds everything. In a warm
    session (`session` given) the environment has its own directory and each case writes
    a run directory of its own (record.json, submission, workspace, metrics).
    """

    def __init__(
        self,
        scenario: Scenario,
        repo_root: Path,
        options: RunOptions,
        cases: list[CaseSpec] | None = None,
        *,
        session: SessionContext | None = None,
        case_root: Path | None = None,
    ) -> None:
        cases = cases if cases is not None else [CaseSpec.of(options)]
        if not cases:
            raise ValueError("nothing to grade: no case")
        agents = [c for c in cases if c.agent is not None]
        if agents and not options.agent_unsandboxed:
            why = sandbox.available()
            if why is not None:  # refused before anything starts
                raise ValueError(f"{why}; or pass --agent-unsandboxed to run it unconfined")
        missing = [str(p) for p in options.agent_shares if not p.exists()]
        if missing:
            raise ValueError(f"--agent-share: no such path: {', '.join(missing)}")
        verify = scenario.verify
        if options.sustain_seconds is not None:
            verify = verify.model_copy(update={"sustain_seconds": options.sustain_seconds})
        self.scenario = scenario.model_copy(update={"verify": verify})
        self.repo_root = repo_root
        self.opts = options
        self.cases = cases
        self.session = session
        self.run_id = (
            new_run_id(scenario.name)
            if session is None
            else f"{session.id}-env{session.environment}"
        )
        name = self.run_id if session is None else f"env{session.environment}"
        self.dir = (options.runs_dir / name).resolve()
        self.case_root = (case_root or options.runs_dir).resolve()
        self.dir.mkdir(parents=True)
        self.state = RunState(
            run_id=self.run_id,
            target_alert=scenario.target_alert,
            verify=verify,
            cases=len(cases),
            stop_on_pass=False,
            rearm_timeout_seconds=options.rearm_timeout_seconds,
        )
        self.records: list[RunRecord] = []  # one per case graded, in order
        self.procs: list[Managed] = []
        self.service: Managed | None = None
        self.service_port = 0
        self.loadgen: Managed | None = None
        self.loadgen_port = 0
        self.prom: PrometheusServer | None = None
        self.cpu = contention.CpuMeter()  # CPU spent outside this run's process tree
        self.telemetry: Telemetry | None = None
        self.redis_url: str | None = None
        self.upstream_env: dict[str, str] = {}  # url_env -> base URL of each upstream
        self.harness: HarnessExporter | None = None
        self.scrape: ScrapeProxy | None = None
        self.env_wall: dict[str, float] = {}  # the environment's own: setup, warmup
        self.driver = Driver(self.state, self, name="sreforge")
        self._last_progress = 0.0
        self._live_shown = False
        self.t_begin = time.time()
        self._begin_case(0, self.t_begin)

    def _begin_case(self, index: int, began: float) -> None:
        """Make `cases[index]` the current case, with its own run directory."""
        self.case_index = index
        self.case = self.cases[index]
        self.case_began = began
        if self.session is None:
            self.case_run_id, self.case_dir = self.run_id, self.dir
        else:
            self.case_run_id = new_run_id(self.scenario.name)
            self.case_dir = self.case_root / self.case_run_id
            self.case_dir.mkdir(parents=True)
        self.patch_text = ""
        self.patched_tree: Path | None = None
        self.submission_kind = "fix" if self.case.fix is not None else "agent"
        self.sandboxed: bool | None = None
        # the seconds this case's steps took; the first case also shows the environment's
        self.wall: dict[str, float] = dict(self.env_wall) if index == 0 else {}
        # the load generator's counters run for the whole environment: a later case's
        # record shows what they counted since the case began
        self._generator_base = None if index == 0 else self._generator_stats()

    def _generator_stats(self) -> dict[str, Any] | None:
        if not self.loadgen_port:
            return None
        with contextlib.suppress(OSError, ValueError):
            url = f"http://127.0.0.1:{self.loadgen_port}/stats"
            with urllib.request.urlopen(url, timeout=3) as resp:
                stats = json.loads(resp.read())
            return stats if isinstance(stats, dict) else None
        return None

    def _label(self, what: str) -> str:
        """A process label unique in the environment (one per case in a session)."""
        return what if self.session is None else f"{what}-{self.case_index + 1}"

    # ----- trees -------------------------------------------------------------------
    def _prepare_trees(self) -> None:
        src = self.scenario.source_path(self.repo_root)
        if not src.is_dir():
            raise ProcessError(f"service source {src} does not exist")
        self.healthy = self.dir / "trees" / "healthy"
        self.regressed = self.dir / "trees" / "regressed"
        ci.copy_tree(src, self.healthy)
        ci.copy_tree(src, self.regressed)
        try:
            ci.apply_patch(self.regressed, self.scenario.regression_path.read_text("utf-8"))
        except ci.PatchRejected as exc:
            raise ProcessError(f"{self.scenario.regression_path}: {exc}") from exc
        self.data_dir = self.dir / "data"
        self.data_dir.mkdir()

    # ----- processes ---------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], **kw: Any) -> Managed:
        proc = Managed(name, argv, log_path=self.dir / "logs" / f"{name}.log", **kw)
        self.procs.append(proc)
        return proc

    def _service_env(self, port: int) -> dict[str, str]:
        env = {"HOST": "127.0.0.1", "PORT": str(port), "DATA_DIR": str(self.data_dir)}
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        env.update(self.upstream_env)
        return env

    def _start_service(self, tree: Path, label: str) -> tuple[Managed, int]:
        port = free_port()
        svc = self.scenario.service
        proc = self._spawn(
            f"{svc.name}-{label}", svc.command, cwd=tree, env=self._service_env(port)
        )
        proc.wait_http(f"http://127.0.0.1:{port}{svc.health_path}", svc.deploy_timeout_seconds)
        return proc, port

    def _swap_service(self, tree: Path, label: str) -> float:
        """Start `tree` beside the running build, move the load and the scrape, stop the old.

        Returns the moment the load moved: that is the rollout time, not the old build's exit.
        """
        new, port = self._start_service(tree, label)
        old = self.service
        self.service, self.service_port = new, port
        if self.harness is not None:
            self.harness.follow(self.scenario.service.name, new.pid)
        assert self.scrape is not None
        self.scrape.point(port)
        if self.loadgen is not None:
            self._post_json(
                f"http://127.0.0.1:{self.loadgen_port}/target", {"url": f"http://127.0.0.1:{port}"}
            )
        switched = time.time()
        if old is not None:
            self._await_scrape(port)
            old.stop()
        return switched

    def _await_scrape(self, port: int, timeout: float = SCRAPE_SWITCH_SECONDS) -> None:
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

    @staticmethod
    def _post_json(url: str, body: dict[str, Any]) -> None:
        req = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            if resp.status != 200:
                raise ProcessError(f"{url} answered {resp.status}")

    def _setup(self) -> None:
        t0 = time.time()
        self._prepare_trees()
        svc = self.scenario.service
        if svc.prepare:
            argv = [a.replace("{data_dir}", str(self.data_dir)) for a in svc.prepare]
            self._say(f"preparing data: {' '.join(argv)}")
            subprocess.run(
                resolve_command(argv),
                cwd=self.healthy,
                check=True,
                capture_output=True,
                timeout=300,
            )
        if "redis" in svc.dependencies:
            port = free_port()
            redis = self._spawn(
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
            )
            deadline = time.monotonic() + 10
            while not _tcp_ready(port):
                if not redis.alive() or time.monotonic() > deadline:
                    raise redis.fail("did not listen")
                time.sleep(0.05)
            self.redis_url = f"redis://127.0.0.1:{port}/0"
        upstream_targets = self._start_upstreams()
        self.harness = HarnessExporter()
        self.harness.start()
        self.scrape = ScrapeProxy(svc.name)
        self.scrape.start()
        loadgen_port = free_port()
        self.prom = PrometheusServer(
            self.dir / "prometheus",
            [self.scenario.rules_path],
            [svc.name, LOAD_JOB, HARNESS_JOB, *upstream_targets],
        )
        # Every target is known before Prometheus starts: its first discovery finds them
        # all, and none waits for the discovery manager's throttle after a later change.
        self.prom.set_targets(HARNESS_JOB, [self.harness.address])
        self.prom.set_targets(svc.name, [self.scrape.address])  # stable: swaps never touch it
        self.prom.set_targets(LOAD_JOB, [f"127.0.0.1:{loadgen_port}"])
        for job, address in upstream_targets.items():
            self.prom.set_targets(job, [address])
        self.prom.start()
        self.procs.append(self.prom.proc)  # type: ignore[arg-type]
        self.telemetry = Telemetry(
            self.prom.url, target_series=self.scenario.target_series, service_job=svc.name
        )
        self._say("starting the healthy build under load")
        t_healthy = time.time()
        self._swap_service(self.healthy, "healthy")
        self.env_wall["healthyStart"] = time.time() - t_healthy
        port_file = self.dir / "loadgen.port"
        self.loadgen = self._spawn(
            "loadgen",
            generator_argv(
                self.scenario.load,
                f"http://127.0.0.1:{self.service_port}",
                listen=f"127.0.0.1:{loadgen_port}",
                port_file=port_file,
            ),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        self.loadgen_port = int(self.loadgen.wait_file(port_file, 20))
        deadline = time.monotonic() + 30
        while self.telemetry.load() is None:  # the first scrape with a rate
            if time.monotonic() > deadline:
                raise ProcessError("Prometheus saw no load-generator metrics within 30s")
            time.sleep(0.5)
        self._say("waiting for the healthy build to warm up (target alert quiet)")
        self.env_wall["warmup"] = self._wait_quiet()
        if self.opts.control_seconds:
            self._control_window()
        self.env_wall["setup"] = time.time() - t0
        self.wall.update(self.env_wall)

    def _start_upstreams(self) -> dict[str, str]:
        """Start every upstream service from a copy of its tree; returns job -> host:port."""
        targets: dict[str, str] = {}
        for up in self.scenario.service.upstreams:
            src = (self.repo_root / up.source).resolve()
            if not src.is_dir():
                raise ProcessError(f"upstream {up.name}: source {src} does not exist")
            tree = self.dir / "trees" / f"upstream-{up.name}"
            ci.copy_tree(src, tree)
            data = self.data_dir / up.name
            data.mkdir()
            port = free_port()
            env = {"HOST": "127.0.0.1", "PORT": str(port), "DATA_DIR": str(data), **up.env}
            self._say(f"starting upstream {up.name}")
            proc = self._spawn(f"upstream-{up.name}", up.command, cwd=tree, env=env)
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
        """Observe the healthy build under the same load: the target alert must stay quiet."""
        assert self.telemetry is not None
        target = self.scenario.target_alert
        self._say(f"control: healthy build under load for {self.opts.control_seconds}s")
        end = time.time() + self.opts.control_seconds
        fired = False
        while time.time() < end:
            alerts = self.telemetry.alerts()
            fired = fired or bool(alerts and target in alerts[0])
            time.sleep(1)
        self.control = {"seconds": self.opts.control_seconds, "targetFired": fired}

    # ----- actions (sreforge.runtime.driver.Runtime) ---------------------------------
    def inject(self) -> loop.Event:
        self._say("inject: swapping in the regressed build")
        return loop.Injected(t=self._swap_service(self.regressed, "regressed"))

    def hand_off(self) -> loop.Event:
        self._say(f"{self.scenario.target_alert} is firing: handing off to the agent")
        return self._obtain_submission()

    def restore(self) -> None:
        t0 = time.time()
        try:
            if self.state.injected_at is not None and self.service is not None:
                self._swap_service(self.regressed, self._label("baseline"))
        finally:
            self.wall["restore"] = time.time() - t0

    def reopen(self) -> None:
        self._begin_case(self.case_index + 1, time.time())
        self._say(
            f"case {self._place()}: {self.case.label}; waiting for "
            f"{self.scenario.target_alert} to fire again on the restored baseline"
        )

    def finish(self) -> None:
        return None

    def sample(self) -> AlertSample:
        assert self.telemetry is not None
        sample = self.telemetry.sample()
        cpu = self.cpu.sample()
        if cpu is not None:
            sample = sample.model_copy(update={"outside_cpu": cpu.outside, "cpu_wait": cpu.wait})
        return sample

    def poll(self) -> loop.Event | None:
        return None  # the submission comes from the hand-off itself

    def stepped(self, _before: Phase, event: loop.Event) -> None:
        if isinstance(event, loop.Sampled):
            self._progress(event.sample)

    def _place(self) -> str:
        s = self.session
        return "1/1" if s is None else f"{s.first_case + self.case_index}/{s.cases}"

    def _handoff_brief(self) -> Path:
        handoff = self.case_dir / "handoff"
        handoff.mkdir(exist_ok=True)
        brief = handoff / "brief.md"
        brief.write_text(self.scenario.brief_path.read_text("utf-8"), encoding="utf-8")
        return brief

    def _obtain_submission(self) -> loop.Event:
        t0 = time.time()
        brief = self._handoff_brief()
        workspace = self.case_dir / "workspace"
        ci.copy_tree(self.regressed, workspace)
        case = self.case
        if case.fix is not None:
            self.patch_text = case.fix.read_text(encoding="utf-8", errors="replace")
        else:
            assert case.agent is not None
            argv = shlex.split(case.agent)
            confined = not self.opts.agent_unsandboxed
            self._say(
                f"running the agent: {argv[0]} (timeout {self.opts.agent_timeout_seconds}s, "
                + (
                    "sandboxed: it sees the OS, /workspace, /handoff/brief.md"
                    if confined
                    else "UNSANDBOXED: it can read everything this user can"
                )
                + ")"
            )
            extra = {
                "SREFORGE_WORKSPACE": str(workspace),
                "SREFORGE_BRIEF": str(brief),
                "SREFORGE_ALERT": self.scenario.target_alert,
            }
            if self.prom is not None:
                extra["SREFORGE_PROMETHEUS_URL"] = self.prom.url
            with contextlib.ExitStack() as stack:
                if confined:
                    box = stack.enter_context(
                        sandbox.Sandbox(workspace, brief, self.opts.agent_shares)
                    )
                    argv, env = box.argv(argv), box.env(_env(), extra)
                else:
                    env = {**_env(), **extra}
                logs = self.case_dir / "logs"
                logs.mkdir(exist_ok=True)
                log = stack.enter_context((logs / "agent.log").open("ab"))
                try:
                    subprocess.run(
                        argv,
                        cwd=workspace,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=self.opts.agent_timeout_seconds,
                        check=False,
                        env=env,
                    )
                except subprocess.TimeoutExpired:
                    self._say("agent timed out: grading what it left in the workspace")
            self.sandboxed = confined
            rca = workspace / "rca.txt"
            if rca.is_file():
                shutil.move(rca, self.case_dir / "rca.txt")
            self.patch_text = ci.diff_trees(self.regressed, workspace)
        if case.rca is not None:
            shutil.copyfile(case.rca, self.case_dir / "rca.txt")
        (self.case_dir / "submission.patch").write_text(self.patch_text, encoding="utf-8")
        self.wall["agent"] = time.time() - t0
        return loop.Submitted(t=time.time())

    def run_ci(self) -> loop.Event:
        self._say("CI: applying the patch to a pristine copy and running the pristine tests")
        svc = self.scenario.service
        result, tree = ci.run_gate(
            pristine=self.regressed,
            workdir=self.case_dir / "trees" / "patched",
            patch=self.patch_text,
            protected=self.scenario.protected,
            test_command=svc.test_command,
            test_paths=[p for p in self.scenario.protected if (self.regressed / p).exists()],
            timeout=svc.test_timeout_seconds,
        )
        self.patched_tree = tree
        self.wall["ci"] = result.duration_seconds
        self._say(f"CI {result.status.value}: {result.reason}")
        return loop.CIFinished(t=time.time(), result=result)

    def deploy(self) -> loop.Event:
        t0 = time.time()
        assert self.patched_tree is not None
        self._say("deploy: rolling out the patched build")
        try:
            switched = self._swap_service(self.patched_tree, self._label("patched"))
        except ProcessError as exc:
            self.wall["deploy"] = time.time() - t0
            self._say(f"deploy failed: {str(exc).splitlines()[0]}")
            return loop.DeployFailed(t=time.time(), reason=str(exc)[:2000])
        self.wall["deploy"] = switched - t0
        return loop.Deployed(t=switched)

    # ----- the run ------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        """Run the whole loop; returns the record (also written to record.json)."""
        contention.become_subreaper()  # a process a patch daemonizes stays in the run's tree
        try:
            try:
                self._setup()
            except (ProcessError, OSError, subprocess.SubprocessError) as exc:
                self._say(f"setup failed: {exc}")
                self.driver.run(loop.Fault(t=time.time(), reason=str(exc)))
                return self.record
            self.driver.run(loop.Start(t=time.time()))
            return self.record
        except KeyboardInterrupt:
            self._say("interrupted: recording an Inconclusive verdict and cleaning up")
            if self.state.verdict is None:
                loop.step(self.state, loop.Fault(t=time.time(), reason="interrupted"))
                self.record_verdict()
            raise
        finally:
            self._teardown()

    # ----- output ------------------------------------------------------------------
    def _say(self, line: str) -> None:
        if self._live_shown:
            sys.stderr.write("\n")
            self._live_shown = False
        self.opts.progress(f"[{time.time() - self.t_begin:6.1f}s] {line}")

    def _progress(self, s: AlertSample) -> None:
        live = self.opts.live and sys.stderr.isatty()
        if not live and time.time() - self._last_progress < PROGRESS_EVERY_SECONDS:
            return
        self._last_progress = time.time()
        target = self.scenario.target_alert
        if s.firing is None:
            alert = "prometheus unreachable"
        else:
            alert = (
                "firing"
                if target in s.firing
                else ("pending" if target in s.pending else "inactive")
            )
        load = (
            f"load {s.load.achieved_rate:.1f}/{s.load.target_rate:.0f} rps"
            if s.load
            else "load unknown"
        )
        line = f"{self.state.phase.value:<19} {target}={alert:<8} {load}"
        if live:  # one line rewritten in place on a terminal
            sys.stderr.write(f"\r\x1b[K[{time.time() - self.t_begin:6.1f}s] {line}")
            sys.stderr.flush()
            self._live_shown = True
        else:
            self._say(line)

    def record_verdict(self) -> None:
        st = self.state
        since = st.started_at if self.case_index == 0 else self.case_began
        if self.telemetry is not None and since:
            end = time.time()
            series = {
                name: self.telemetry.query_range(q, since, end, 1.0) for name, q in SERIES.items()
            }
            (self.case_dir / "metrics.json").write_text(json.dumps(series), encoding="utf-8")
        generator = _since(self._generator_stats(), self._generator_base)
        control = getattr(self, "control", None) if self.case_index == 0 else None
        case, d, sess = self.case, self.case_dir, self.session
        self.run_record = RunRecord.build(
            st,
            scenario=ScenarioRecord.from_scenario(self.scenario),
            submission=SubmissionRecord(
                kind=self.submission_kind,
                source=str(case.fix) if case.fix is not None else case.agent,
                patch="submission.patch" if (d / "submission.patch").exists() else None,
                rca="rca.txt" if (d / "rca.txt").exists() else None,
                agent_model=case.agent_model,
                sandboxed=self.sandboxed,
            ),
            target_rate=self.scenario.load.rate,
            generator=generator,
            control=None if control is None else ControlRecord.model_validate(control),
            wall_seconds=self.wall,
            began_at=self.case_began,
            recorded_at=time.time(),
            run_id=self.case_run_id,
            session=None
            if sess is None
            else SessionRecord(
                id=sess.id,
                campaign=sess.campaign,
                label=case.label,
                case=sess.first_case + self.case_index,
                cases=sess.cases,
                environment=sess.environment,
                restarted_because=sess.restarted_because,
            ),
        )
        self.records.append(self.run_record)
        self.record: dict[str, Any] = self.run_record.model_dump(mode="json", by_alias=True)
        _write_text(d / "record.json", self.run_record.to_json())
        _write_json(d / "state.json", st.model_dump(mode="json"))

    def _teardown(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        for server in (self.harness, self.scrape):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()


# The load generator's /stats counters that count up for as long as it runs.
_COUNTERS = (
    "completed",
    "dropped",
    "dropped_late",
    "interrupted",
    "scheduled",
    "started",
    "target_switches",
    "elapsed_seconds",
)


def _since(stats: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any] | None:
    """`stats` with its counters (and outcomes) counted from `base` on; gauges as they are."""
    if stats is None or base is None:
        return stats
    out = dict(stats)
    for key in _COUNTERS:
        if isinstance(stats.get(key), int | float) and isinstance(base.get(key), int | float):
            out[key] = round(stats[key] - base[key], 3)
    now, then = stats.get("outcomes"), base.get("outcomes")
    if isinstance(now, dict) and isinstance(then, dict):
        out["outcomes"] = {k: v - then.get(k, 0) for k, v in now.items()}
    if isinstance(out.get("elapsed_seconds"), float) and out["elapsed_seconds"] > 0:
        out["achieved_rate_total"] = round(out["started"] / out["elapsed_seconds"], 3)
    out["since_case_began"] = True
    return out


def _env() -> dict[str, str]:
    return dict(os.environ)


def _tcp_ready(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _write_json(path: Path, data: Any) -> None:
    _write_text(path, json.dumps(data, indent=2, default=str))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
