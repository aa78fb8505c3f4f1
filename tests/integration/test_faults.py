"""Faults injected into a real `sreforge run` during verification: it must fail closed.

Each test starts `sreforge run` with a reference fix (real Prometheus, real catalog, real
Redis, real open-model load on 127.0.0.1) as a subprocess in its own session, waits on
its progress output until the run is Verifying *and the fix has cleared the alert*
(`CatalogLatencyHigh=inactive`), then kills one child of the run, found among the run's
own descendants in /proc (ppid chain + cmdline), by PID.

Why a reference fix: without the fault the run would pass (test_scenario_runs.py's
test_case[latency-cache-stampede:fixes/memoize-query.patch] grades the same fix Passed),
and the kill lands after the alert already cleared. A fault test on a run that would fail anyway
proves nothing; here only the fault can make the verdict "not passed".

The runs use a copy of the scenario whose clear budget and fire timeout (240 s; the fire
timeout also bounds the healthy build's warm-up) and deploy timeout (180 s) are wider than
the real ones: on a loaded shared machine every cache-aside build needs its ~300 cold
lookups to warm up, which was seen to take 55-90 s, and a fault test must not depend on a
quiet machine. The fix, the build, the alert rules and the load
are the scenario's own. Each assertion on the verdict also names the state the fault
caused (`harness-fault`, `service-down`), so the verdict is shown to be the fault's.

Each run takes ~1.5-2 min on a quiet machine, up to ~4 min on a loaded one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.test_agent_view import assert_nothing_internal
from tests.reliability_cases import Case, case
from tests.runs import NO_SOAK, agent_args, inventory_from_log

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
FIX = SCENARIO / "fixes" / "memoize-query.patch"
RUN_TIMEOUT = 420.0

pytestmark = [
    pytest.mark.graded,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="needs Debian's prometheus: bash scripts/setup.sh",
    ),
]


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may itself hold spaces or parentheses
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> dict[int, list[str]]:
    """pid -> argv of every live descendant of `root`, from the /proc ppid chain."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (pp := _ppid(int(entry.name))) is not None:
            parent[int(entry.name)] = pp
    found: dict[int, list[str]] = {}
    for pid in parent:
        p: int | None = pid
        while p is not None and p > 1:
            p = parent.get(p)
            if p == root:
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    break
                found[pid] = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
                break
    return found


def cwd_of(pid: int) -> str:
    try:
        return str(Path(f"/proc/{pid}/cwd").readlink())
    except OSError:
        return ""


def tree_of(pid: int) -> str:
    """The host tree a build runs from: its cwd, or when it is confined (its cwd is then
    /srv/app in its own view), the tree the view that its parent unshare builds mounts at
    its cwd (sreforge.runtime.sandbox.Spec, the JSON before `--`)."""
    parent = _ppid(pid)
    try:
        raw = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return cwd_of(pid)
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if not argv or Path(argv[0]).name != "unshare" or "--" not in argv:
        return cwd_of(pid)
    spec = json.loads(argv[argv.index("--") - 1])
    return next((m["source"] for m in spec["mounts"] if m["target"] == spec["cwd"]), "")


def patient_copy(dest: Path) -> Path:
    """The scenario with 240 s clear budget and fire timeout, 180 s deploy timeout."""
    shutil.copytree(SCENARIO, dest)
    toml = dest / "scenario.toml"
    text = toml.read_text(encoding="utf-8")
    for old, new in (
        ("clear_budget_seconds = 60\n", "clear_budget_seconds = 240\n"),
        ("fire_timeout_seconds = 90\n", "fire_timeout_seconds = 240\n"),
        ('dependencies = ["redis"]\n', 'dependencies = ["redis"]\ndeploy_timeout_seconds = 180\n'),
    ):
        assert text.count(old) == 1, f"scenario.toml changed: {old!r}"
        text = text.replace(old, new)
    toml.write_text(text, encoding="utf-8")
    return dest


class Run:
    """One `sreforge run` subprocess and the lines it printed so far."""

    def __init__(self, runs_dir: Path, *submission: str, command: str = "run") -> None:
        self.runs_dir = runs_dir
        scenario = patient_copy(runs_dir.parent / "scenario")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sreforge.cli",
                command,
                str(scenario),
                *submission,
                "--sustain-seconds",
                "30",
                "--soak-seconds",
                NO_SOAK,
                "--runs-dir",
                str(runs_dir),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "RCA_JUDGE_URL": ""},
        )
        self.lines: list[str] = []
        self.seen: dict[int, list[str]] = {}  # every descendant ever seen (for cleanup)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, match: Callable[[str], bool], timeout: float = RUN_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.seen.update(descendants(self.proc.pid))
            hit = next((ln for ln in self.lines if match(ln)), None)
            if hit is not None:
                return hit
            if self.proc.poll() is not None:
                pytest.fail(f"the run ended before the awaited line:\n{self.output}")
            time.sleep(0.2)
        pytest.fail(f"no awaited line within {timeout:.0f}s:\n{self.output}")

    def kill_child(self, match: Callable[[int, list[str]], bool]) -> tuple[int, float]:
        """SIGKILL the one descendant `match` picks; returns its pid and the kill time."""
        found = descendants(self.proc.pid)
        self.seen.update(found)
        picked = [pid for pid, argv in found.items() if match(pid, argv)]
        assert len(picked) == 1, (picked, found)
        os.kill(picked[0], signal.SIGKILL)
        return picked[0], time.time()

    def finish(self, c: Case) -> tuple[int, dict[str, object]]:
        try:
            code = self.proc.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run hung after the fault:\n{self.output}")
        self._reader.join(10)
        records = list(self.runs_dir.glob("*/record.json"))
        c.lost = int(len(records) != 1)  # the run's one record.json
        assert len(records) == 1, f"record.json lost:\n{self.output}"
        return code, json.loads(records[0].read_text())

    def cleanup(self) -> None:
        """Stop whatever this run left behind, by PID: SIGINT lets it record and tear down."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid, argv in self.seen.items():
            current = Path(f"/proc/{pid}/cmdline")
            try:
                same = [a.decode() for a in current.read_bytes().split(b"\0") if a] == argv
            except OSError:
                continue
            if same:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def _start(*submission: str, command: str = "run") -> Run:
        run = Run(tmp_path / "runs", *submission, command=command)
        runs.append(run)
        return run

    yield _start
    for run in runs:
        run.cleanup()


def cleared_while_verifying(line: str) -> bool:
    """A progress line saying the fix is under verification and the alert is inactive."""
    return "Verifying" in line and "CatalogLatencyHigh=inactive" in line


def assert_not_passed(code: int, record: dict[str, object], out: str) -> None:
    assert record["passed"] is False, out
    assert code != 0, out
    assert "Traceback" not in out, out
    assert record["message"], record
    stamps = record["timestamps"]
    assert isinstance(stamps, dict)
    assert stamps["redeployed"] is not None, out  # the fault hit after the fix was live
    # The oracle saw the fix clear before the fault: only the fault can have failed the run.
    # (If not, the fix cleared too late on a loaded machine and this run proves nothing.)
    assert stamps["cleared"] is not None, f"the fix never cleared in time: void run\n{out}"


def test_prometheus_killed_during_verification_is_inconclusive(
    start: Callable[..., Run],
) -> None:
    with case("fault: Prometheus killed during verification") as c:
        run = start("--fix", str(FIX))
        run.wait_for_line(cleared_while_verifying)
        run_dir = next(run.runs_dir.iterdir())
        pid, _ = run.kill_child(
            lambda _pid, argv: (
                Path(argv[0]).name == "prometheus"
                and any(a.startswith(f"--config.file={run_dir}") for a in argv)
            )
        )
        code, record = run.finish(c)
        out = run.output
        assert_not_passed(code, record, out)
        # Prometheus gone is the harness's fault, not the agent's: Inconclusive, exit 2.
        assert record["reason"] == "Inconclusive", out
        assert code == 2, out
        signals = record["signals"]
        assert isinstance(signals, dict)
        assert signals["sustained_clear"]["value"] is False, signals
        assert "harness-fault" in signals["sustained_clear"]["detail"], signals
        assert pid not in descendants(run.proc.pid)


def test_substrate_crash_after_the_fix_is_not_cleared(start: Callable[..., Run]) -> None:
    with case("fault: substrate (patched build) crashes after the fix") as c:
        run = start("--fix", str(FIX))
        run.wait_for_line(cleared_while_verifying)
        run_dir = next(run.runs_dir.iterdir())
        patched = str(run_dir / "trees" / "patched")
        run.kill_child(lambda pid, argv: argv[1:3] == ["-m", "catalog"] and tree_of(pid) == patched)
        code, record = run.finish(c)
        out = run.output
        assert_not_passed(code, record, out)
        # A crashed service is the submission's failure, graded, never excused as a harness fault.
        assert record["reason"] in {"NotCleared", "LoadNotDelivered", "Refired"}, out
        assert code == 1, out
        signals = record["signals"]
        assert isinstance(signals, dict)
        assert signals["sustained_clear"]["value"] is False, signals
        detail = signals["sustained_clear"]["detail"]
        # the harness starts a crashed build again, as a kubelet would, and counts it: the
        # restart fails the fix (whatever a sample saw first of the outage otherwise)
        assert record["restarts"] == 1, out
        assert "restarted 1 time after the rollout" in detail, detail


def test_load_generator_death_fails_closed(start: Callable[..., Run]) -> None:
    with case("fault: load generator dies during verification") as c:
        # This run also hands off to an agent command, which records what it was given.
        run = start(*agent_args("inventory_agent.py", FIX))
        run.wait_for_line(cleared_while_verifying)
        # the load generator, not the independent prober (the same program, `--series probe`)
        run.kill_child(
            lambda _pid, argv: argv[1:3] == ["-m", "sreforge.load"] and "probe" not in argv
        )
        code, record = run.finish(c)
        out = run.output
        assert_not_passed(code, record, out)
        # No load, no verdict on the fix: the run is invalid (Inconclusive) or not delivered.
        assert record["reason"] in {"Inconclusive", "LoadNotDelivered"}, out
        signals = record["signals"]
        assert isinstance(signals, dict)
        assert signals["sustained_clear"]["value"] is False, signals
        assert "harness-fault" in signals["sustained_clear"]["detail"], signals
        assert record["submission"]["kind"] == "agent"  # type: ignore[index]
        assert record["submission"]["sandboxed"] is True  # type: ignore[index]
        assert_nothing_internal(inventory_from_log(next(run.runs_dir.iterdir())))


# slow (~245 s): three graded cases in one session; the other fault tests stay in the default suite
@pytest.mark.slow
def test_a_fault_in_one_case_of_a_session_does_not_poison_the_next(
    start: Callable[..., Run],
) -> None:
    """A warm session of two cases of the same fix; Prometheus is killed while the first is
    verified. That case is Inconclusive, the session starts a new environment, and the
    second case is graded there on its own merits, its record saying why."""
    with case("fault: Prometheus killed during one case of a warm session") as c:
        run = start("--fix", str(FIX), "--fix", str(FIX), "-v", command="campaign")
        run.wait_for_line(cleared_while_verifying)
        env1 = next(p for p in run.runs_dir.glob("*/env1") if p.is_dir())
        run.kill_child(
            lambda _pid, argv: (
                Path(argv[0]).name == "prometheus"
                and any(a.startswith(f"--config.file={env1}") for a in argv)
            )
        )
        try:
            code = run.proc.wait(2 * RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the session hung after the fault:\n{run.output}")
        out = run.output
        records = sorted(
            (json.loads(p.read_text()) for p in run.runs_dir.glob("*/record.json")),
            key=lambda r: r["session"]["case"],
        )
        c.lost = int(len(records) != 2)
        assert code == 0, out
        assert "Traceback" not in out, out
        assert len(records) == 2, out
        first, second = records
        assert first["reason"] == "Inconclusive", out
        assert first["session"]["environment"] == 1
        assert second["session"]["environment"] == 2  # a new environment, not the broken one
        assert "Inconclusive" in second["session"]["restartedBecause"], second["session"]
        assert second["passed"] is True, second["message"]
        assert second["timestamps"]["fired"] is not None
        session = json.loads(next(run.runs_dir.glob("*/session.json")).read_text())
        assert [e["graded"] for e in session["environments"]] == [1, 1]
