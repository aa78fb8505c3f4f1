"""The local runtime: the closed loop over the cases of one environment on this machine.

`LocalRun` is the `sreforge.runtime.driver.Runtime` of a local run: it hands each case off,
runs CI, deploys, restores and records, on a `LocalEnvironment` (its processes and
Prometheus, sreforge.runtime.environment). The decisions are `sreforge.loop.step` and the
oracle.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

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
from sreforge.loop import Phase, RunState
from sreforge.mcp import trajectory
from sreforge.mcp.server import ToolServer
from sreforge.mcp.tools import Incident, IncidentTools
from sreforge.runtime import ci, contention, handoff, sandbox
from sreforge.runtime.driver import Driver
from sreforge.runtime.environment import LocalEnvironment
from sreforge.runtime.process import ProcessError

PROGRESS_EVERY_SECONDS = 5.0


@dataclass
class RunOptions:
    """How one local run gets its submission and where it writes."""

    runs_dir: Path
    fix: Path | None = None
    agent: str | None = None
    mcp: bool = False  # wait for a submission through the MCP server (an agent run by hand)
    agent_model: str | None = None
    rca: Path | None = None
    sustain_seconds: int | None = None
    soak_seconds: tuple[float, float] | None = None  # the range the soak is drawn from
    control_seconds: int = 0
    agent_timeout_seconds: int = 1800
    agent_shares: list[Path] = field(default_factory=list)  # read-only inside the sandbox
    agent_unsandboxed: bool = False  # run the agent as the harness's user, unconfined
    substrate_unconfined: bool = False  # run the builds, upstreams and Redis unconfined
    rearm_timeout_seconds: float | None = None  # between cases: None = the fire timeout
    progress: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))
    # told the MCP server's URL and the text for a client at each hand-off of an agent or
    # --mcp case (default for --mcp: printed on stdout)
    mcp_ready: Callable[[str, str], None] | None = None
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
    mcp: bool = False  # the submission comes through the MCP server (an agent run by hand)

    def __post_init__(self) -> None:
        if (self.fix is not None) + (self.agent is not None) + self.mcp != 1:
            raise ValueError("give exactly one of a fix patch, an agent command or --mcp")

    @classmethod
    def of(cls, options: RunOptions) -> CaseSpec:
        """The one case of `sreforge run`."""
        if options.fix is not None:
            label = options.fix.name
        elif options.agent is not None:
            label = f"agent: {options.agent}"
        else:
            label = "mcp"
        return cls(
            label,
            options.fix,
            options.agent,
            options.rca,
            options.agent_model,
            mcp=options.mcp and options.fix is None and options.agent is None,
        )


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
        if not options.substrate_unconfined:
            why = sandbox.available()
            if why is not None:  # refused before anything starts
                raise ValueError(
                    f"confining the substrate: {why}; or pass --substrate-unconfined to run "
                    "the service builds as this user, able to reach the harness"
                )
        missing = [str(p) for p in options.agent_shares if not p.exists()]
        if missing:
            raise ValueError(f"--agent-share: no such path: {', '.join(missing)}")
        verify = scenario.verify
        if options.sustain_seconds is not None:
            verify = verify.model_copy(update={"sustain_seconds": options.sustain_seconds})
        if options.soak_seconds is not None:
            verify = verify.model_copy(update={"soak_seconds": options.soak_seconds})
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
            # drawn here, kept in this process and the run directory (never the agent's)
            soak_key=secrets.token_hex(32),
        )
        self.records: list[RunRecord] = []  # one per case graded, in order
        self.driver = Driver(self.state, self, name="sreforge")
        self._last_progress = 0.0
        self._live_shown = False
        self.t_begin = time.time()
        self.env = LocalEnvironment(
            self.scenario,
            repo_root,
            self.dir,
            control_seconds=options.control_seconds,
            confined=not options.substrate_unconfined,
            say=self._say,
        )
        self._begin_case(0, self.t_begin)

    @property
    def env_wall(self) -> dict[str, float]:
        """The environment's own seconds (setup, warmup), shown in its first case's record."""
        return self.env.wall

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
        self.submission_kind: Literal["fix", "agent", "mcp"] = (
            "fix" if self.case.fix is not None else "mcp" if self.case.mcp else "agent"
        )
        self.submitted_via: Literal["fix", "exit", "mcp", "timeout"] | None = None
        self.sandboxed: bool | None = None
        self.desk: handoff.Desk | None = None  # an agent's or --mcp case's submission desk
        self.tool_server: ToolServer | None = None
        # the seconds this case's steps took; the first case also shows the environment's
        self.wall: dict[str, float] = dict(self.env_wall) if index == 0 else {}
        # the load generator's counters run for the whole environment: a later case's
        # record shows what they counted since the case began
        self._generator_base = None if index == 0 else self.env.generator_stats()

    def _label(self, what: str) -> str:
        """A process label unique in the environment (one per case in a session)."""
        return what if self.session is None else f"{what}-{self.case_index + 1}"

    # ----- actions (sreforge.runtime.driver.Runtime) ---------------------------------
    def inject(self) -> loop.Event:
        self._say("inject: swapping in the regressed build")
        return loop.Injected(t=self.env.swap_service(self.env.regressed, "regressed"))

    def hand_off(self) -> loop.Event:
        self._say(f"{self.scenario.target_alert} is firing: handing off to the agent")
        return self._obtain_submission()

    def restore(self) -> None:
        t0 = time.time()
        try:
            if self.state.injected_at is not None and self.env.service is not None:
                label = self._label("baseline")
                self.env.fresh_state(label)  # the next case must not inherit this one's data
                self.env.swap_service(self.env.regressed, label)
        finally:
            self.wall["restore"] = time.time() - t0

    def reopen(self) -> None:
        self._stop_tool_server()
        self._begin_case(self.case_index + 1, time.time())
        self._say(
            f"case {self._place()}: {self.case.label}; waiting for "
            f"{self.scenario.target_alert} to fire again on the restored baseline"
        )

    def finish(self) -> None:
        self._stop_tool_server()

    def sample(self) -> AlertSample:
        return self.env.sample()

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
        case = self.case
        if case.fix is not None:
            ci.copy_tree(self.env.regressed, workspace)
            self.patch_text = case.fix.read_text(encoding="utf-8", errors="replace")
            self.submitted_via = "fix"
        else:
            self._prepare_workspace(workspace)
            desk = self._serve_tools(workspace, brief)
            if case.agent is not None:
                self._run_agent(case.agent, workspace, brief, desk)
            else:
                self._await_mcp(desk)
            rca = workspace / "rca.txt"
            if rca.is_file():
                shutil.move(rca, self.case_dir / "rca.txt")
            desk.close()
            if desk.via_mcp and desk.patch is not None:
                self.patch_text, self.submitted_via = desk.patch, "mcp"
            else:
                self.patch_text = ci.diff_trees(self.env.regressed, workspace)
        if case.rca is not None:
            shutil.copyfile(case.rca, self.case_dir / "rca.txt")
        (self.case_dir / "submission.patch").write_text(self.patch_text, encoding="utf-8")
        self.wall["agent"] = time.time() - t0
        return loop.Submitted(t=time.time())

    def _prepare_workspace(self, workspace: Path) -> None:
        """The regressed tree as a repository with its deploy history (handoff.py)."""
        self.revisions = handoff.scenario_workspace(
            self.scenario,
            self.env.healthy,
            self.env.regressed,
            workspace,
            self.case_dir / "handoff" / "history.git",
        )

    def _serve_tools(self, workspace: Path, brief: Path) -> handoff.Desk:
        """Start this case's MCP tool server; returns the desk its `submit` lands on."""
        regressed = self.env.regressed
        desk = handoff.Desk(lambda: ci.diff_trees(regressed, workspace), self.case_dir / "rca.txt")
        incident = Incident(
            run_id=self.case_run_id,
            alert=self.scenario.target_alert,
            service=self.scenario.service.name,
            brief=brief,
            workspace=workspace,
            prometheus_url=self.env.prom.url if self.env.prom is not None else "",
            history=self.case_dir / "handoff" / "history.git",
            desk=desk,
            log_files=self._log_files,
        )
        record = trajectory.Trajectory(self.case_dir / trajectory.FILE)
        self.tool_server = ToolServer(IncidentTools(incident), record).start()
        handoff.write_url(self.case_dir / "handoff" / handoff.URL_FILE, self.tool_server.url)
        self.desk = desk
        self.handed_off_at = time.time()
        return desk

    def _stop_tool_server(self) -> None:
        if self.tool_server is not None:
            self.tool_server.stop()
            self.tool_server = None

    def _log_files(self) -> dict[str, list[tuple[str, Path]]]:
        return handoff.log_files(
            self.env.dir / "logs",
            self.scenario,
            getattr(self, "revisions", {}),
            own_patched=self._label("patched"),
        )

    def _announce(self, workspace: Path) -> None:
        assert self.tool_server is not None
        url = self.tool_server.url
        text = handoff.client_config_text(url, workspace, self.case_run_id)
        if self.opts.mcp_ready is not None:
            self.opts.mcp_ready(url, text)
        elif self.case.mcp:
            sys.stdout.write(text)
            sys.stdout.flush()

    def _await_mcp(self, desk: handoff.Desk) -> None:
        """`--mcp`: wait for a submission through the tool server (an agent run by hand)."""
        self._announce(self.case_dir / "workspace")
        timeout = self.opts.agent_timeout_seconds
        self._say(f"waiting up to {timeout}s for a submission through the MCP server")
        if desk.wait(timeout):
            self.submitted_via = "mcp"
        else:
            self._say("no submission through MCP in time: grading the workspace as it is")
            self.submitted_via = "timeout"

    def _run_agent(self, command: str, workspace: Path, brief: Path, desk: handoff.Desk) -> None:
        assert self.tool_server is not None
        self._announce(workspace)
        extra = {
            "SREFORGE_WORKSPACE": str(workspace),
            "SREFORGE_BRIEF": str(brief),
            "SREFORGE_ALERT": self.scenario.target_alert,
            "SREFORGE_MCP_URL": self.tool_server.url,  # loopback: the sandbox shares the network
        }
        if self.env.prom is not None:
            extra["SREFORGE_PROMETHEUS_URL"] = self.env.prom.url
        confined = not self.opts.agent_unsandboxed
        logs = self.case_dir / "logs"
        logs.mkdir(exist_ok=True)
        self.submitted_via = handoff.run_agent(
            shlex.split(command),
            workspace,
            brief,
            desk,
            extra_env=extra,
            log=logs / "agent.log",
            timeout=self.opts.agent_timeout_seconds,
            shares=self.opts.agent_shares if confined else None,
            say=self._say,
        )
        self.sandboxed = confined

    def run_ci(self) -> loop.Event:
        self._say("CI: applying the patch to a pristine copy and running the pristine tests")
        svc = self.scenario.service
        result, tree = ci.run_gate(
            pristine=self.env.regressed,
            workdir=self.case_dir / "trees" / "patched",
            patch=self.patch_text,
            protected=self.scenario.protected,
            test_command=svc.test_command,
            test_paths=[p for p in self.scenario.protected if (self.env.regressed / p).exists()],
            timeout=svc.test_timeout_seconds,
            confine=self.env.confine_ci,
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
            switched = self.env.swap_service(self.patched_tree, self._label("patched"))
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
                self.env.setup()
            except (ProcessError, OSError, subprocess.SubprocessError) as exc:
                self._say(f"setup failed: {exc}")
                self.driver.run(loop.Fault(t=time.time(), reason=str(exc)))
                return self.record
            self.wall.update(self.env.wall)
            self.driver.run(loop.Start(t=time.time()))
            return self.record
        except KeyboardInterrupt:
            self._say("interrupted: recording an Inconclusive verdict and cleaning up")
            if self.state.verdict is None:
                loop.step(self.state, loop.Fault(t=time.time(), reason="interrupted"))
                self.record_verdict()
            raise
        finally:
            self._stop_tool_server()
            self.env.teardown()

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
        series = self.env.series(since, time.time()) if since else None
        if series is not None:
            (self.case_dir / "metrics.json").write_text(json.dumps(series), encoding="utf-8")
        if self.session is not None:  # a warm session's case keeps the logs it could see
            handoff.keep_logs(self._log_files(), self.case_dir / "logs", since=self.case_began)
        generator = _since(self.env.generator_stats(), self._generator_base)
        control = self.env.control if self.case_index == 0 else None
        case, d, sess = self.case, self.case_dir, self.session
        self.run_record = RunRecord.build(
            st,
            scenario=ScenarioRecord.from_scenario(self.scenario),
            submission=SubmissionRecord(
                kind=self.submission_kind,
                source=str(case.fix) if case.fix is not None else case.agent,
                submitted_via=self.submitted_via,
                patch="submission.patch" if (d / "submission.patch").exists() else None,
                rca="rca.txt" if (d / "rca.txt").exists() else None,
                trajectory=trajectory.FILE if (d / trajectory.FILE).exists() else None,
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
        if self.desk is not None:  # the agent may ask how its submission fared
            v = self.run_record
            self.desk.graded(v.reason.value, v.passed, v.score, v.message)
        self.records.append(self.run_record)
        self.record: dict[str, Any] = self.run_record.model_dump(mode="json", by_alias=True)
        _write_text(d / "record.json", self.run_record.to_json())
        _write_json(d / "state.json", st.model_dump(mode="json"))


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


def _write_json(path: Path, data: Any) -> None:
    _write_text(path, json.dumps(data, indent=2, default=str))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
