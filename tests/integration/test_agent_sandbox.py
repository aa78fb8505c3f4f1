"""A local agent reaches nothing but its workspace, its brief and what it is lent.

`sreforge run --agent CMD` starts CMD in a sandbox (sreforge.runtime.sandbox): its own
mount and PID namespaces with a root built from an allow-list, as nobody, no_new_privs.
The agent here is tests/agents/snoop_agent.py, a real subprocess (a scripted stand-in for
a dishonest agent, not an AI) started by the local runtime's own hand-off
(`LocalRun._obtain_submission`). It tries to read the scenario's root cause, decoys and
healthy source, the run directory's healthy tree, the git history, the same paths through
/proc/HARNESS/root; to write outside its workspace; to unmount its view; to see the
harness's processes. Every attempt must fail, and it must still be able to do its job:
its edit becomes the submission.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from tests.reliability_cases import case
from tests.runs import AGENTS

from sreforge.runtime import sandbox
from sreforge.runtime.local import LocalRun, RunOptions
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
FIX = SCENARIO / "fixes" / "memoize-query.patch"
VIEW = {"bin", "dev", "etc", "handoff", "home", "lib", "lib32", "lib64", "libx32", "opt",
        "proc", "sbin", "tmp", "usr", "workspace"}  # fmt: skip

pytestmark = pytest.mark.skipif(
    sandbox.available() is not None, reason=f"no agent sandbox here: {sandbox.available()}"
)


def _run(tmp_path: Path, agent: str, **options: object) -> LocalRun:
    run = LocalRun(
        load_scenario(SCENARIO),
        ROOT,
        RunOptions(
            runs_dir=tmp_path / "runs",
            agent=agent,
            live=False,
            progress=lambda _line: None,
            **options,  # type: ignore[arg-type]
        ),
    )
    run.env.prepare_trees()
    (run.dir / "logs").mkdir()  # made by the first process a full run starts
    return run


def _logged(run: LocalRun, prefix: str) -> dict[str, object]:
    log = (run.dir / "logs" / "agent.log").read_text(encoding="utf-8")
    (line,) = [x for x in log.splitlines() if x.startswith(prefix)]
    found: dict[str, object] = json.loads(line.removeprefix(prefix))
    return found


def test_sandboxed_agent_reaches_nothing_internal_and_still_fixes(tmp_path: Path) -> None:
    with case("security: local agent sandbox (reads, writes, processes, unmount)"):
        leftovers = set(Path("/tmp").glob("sreforge-agent-root-*"))
        # lend it copies, so no share has a path inside the repository or the run
        lent = tmp_path / "lent"
        shutil.copytree(AGENTS, lent / "agents", ignore=shutil.ignore_patterns("__pycache__"))
        fix = Path(shutil.copy(FIX, lent))
        run = _run(tmp_path / "r", "replaced below", agent_shares=[lent])
        secrets = [
            SCENARIO / "root_cause.md",
            SCENARIO / "decoys",
            ROOT / "scenarios",
            ROOT / ".git",
            ROOT / "substrate" / "catalog" / "catalog",  # the healthy source
            ROOT.parent,
            Path("/root"),
            run.dir / "trees" / "healthy",
            run.dir,
        ]
        secrets = [s for s in secrets if s.exists()]
        assert {SCENARIO / "root_cause.md", run.dir / "trees" / "healthy"} <= set(secrets)
        # the case was made at construction; its command needs the run directory's paths
        run.case = dataclasses.replace(
            run.case,
            agent=" ".join(
                ["python3", str(lent / "agents" / "snoop_agent.py"), str(os.getpid()), str(fix)]
                + [str(s) for s in secrets]
            ),
        )
        run._obtain_submission()
        seen = _logged(run, "sreforge-snoop: ")

        reads, via_proc = seen["reads"], seen["via_proc_root"]
        assert isinstance(reads, dict)
        assert isinstance(via_proc, dict)
        assert len(reads) == len(secrets), reads
        for attempts in (reads, via_proc):
            for path, got in attempts.items():
                assert got in {"FileNotFoundError", "PermissionError"}, (path, got)
        assert seen["harness_cmdline"] in {"FileNotFoundError", "PermissionError"}
        writes = seen["writes"]
        assert isinstance(writes, dict)
        assert len(writes) == 4
        assert "written" not in writes.values(), writes
        assert seen["scratch"] == {"/tmp/snoop": "written", "/home/agent/snoop": "written"}
        assert seen["umount"] != "succeeded"
        assert (seen["uid"], seen["euid"], seen["groups"]) == (65534, 65534, [])
        assert seen["no_new_privs"] == "1"
        assert int(str(seen["cap_eff"]), 16) == 0
        procs = seen["processes"]
        assert isinstance(procs, dict)
        assert procs
        assert all("snoop_agent.py" in argv for argv in procs.values()), procs
        assert str(os.getpid()) not in procs
        root_entries = seen["root_entries"]
        assert isinstance(root_entries, list)
        assert set(root_entries) <= VIEW, root_entries

        # ... and it did its job: its edit is the submission, its rca the write-up
        assert run.sandboxed is True
        assert "catalog/db.py" in (run.dir / "submission.patch").read_text(encoding="utf-8")
        assert (run.dir / "rca.txt").read_text(encoding="utf-8").startswith("The product cache")
        workspace = run.dir / "workspace"
        assert {p.stat().st_uid for p in [workspace, *workspace.rglob("*")]} == {os.getuid()}
        assert set(Path("/tmp").glob("sreforge-agent-root-*")) == leftovers


def test_unsandboxed_agent_is_recorded_as_such(tmp_path: Path) -> None:
    run = _run(tmp_path, "sh -c 'echo unconfined > note.txt'", agent_unsandboxed=True)
    run._obtain_submission()
    assert run.sandboxed is False
    assert "note.txt" in (run.dir / "submission.patch").read_text(encoding="utf-8")


def test_a_missing_share_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--agent-share: no such path: /nonexistent"):
        _run(tmp_path, "true", agent_shares=[Path("/nonexistent")])
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_agent_missing_inside_the_view_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    hidden = ROOT / "tests" / "agents" / "patch_agent.py"  # not shared
    run = _run(tmp_path, f"python3 {hidden}")
    run._obtain_submission()
    log = (run.dir / "logs" / "agent.log").read_text(encoding="utf-8")
    assert "No such file or directory" in log, log
    assert (run.dir / "submission.patch").read_text(encoding="utf-8") == ""
