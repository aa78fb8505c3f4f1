"""Where the agent's sandbox cannot be made, a run with an agent is refused before it starts.

The sandbox needs root. These tests run as root here, so "not root" is simulated by
replacing os.geteuid (named as such: the one stand-in in this module); the refusal path
itself, and the command line the sandbox builds, are the real code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sreforge.runtime import sandbox
from sreforge.runtime.local import LocalRun, RunOptions
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"


def test_not_root_refuses_an_agent_run_naming_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)  # stand-in: an ordinary user
    assert sandbox.available() is not None
    with pytest.raises(ValueError, match=r"needs root.*--agent-unsandboxed"):
        LocalRun(
            load_scenario(SCENARIO),
            ROOT,
            RunOptions(runs_dir=tmp_path, agent="true", substrate_unconfined=True),
        )
    assert not any(tmp_path.iterdir())  # nothing was started or written
    # unconfined on request
    LocalRun(
        load_scenario(SCENARIO),
        ROOT,
        RunOptions(
            runs_dir=tmp_path / "a", agent="true", agent_unsandboxed=True, substrate_unconfined=True
        ),
    )


def test_not_root_refuses_any_run_whose_substrate_cannot_be_confined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --fix run needs no agent sandbox, but its patched build is confined the same way."""
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)  # stand-in: an ordinary user
    fix = SCENARIO / "fixes" / "memoize-query.patch"
    with pytest.raises(ValueError, match=r"confining the substrate.*--substrate-unconfined"):
        LocalRun(load_scenario(SCENARIO), ROOT, RunOptions(runs_dir=tmp_path, fix=fix))
    assert not any(tmp_path.iterdir())
    LocalRun(
        load_scenario(SCENARIO),
        ROOT,
        RunOptions(runs_dir=tmp_path / "b", fix=fix, substrate_unconfined=True),
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox is made only as root")
def test_the_agent_command_is_passed_as_argv_never_through_a_shell(tmp_path: Path) -> None:
    ws, brief = tmp_path / "ws", tmp_path / "brief.md"
    ws.mkdir()
    brief.write_text("b", encoding="utf-8")
    hostile = ["agent", "; rm -rf / #", "$(id)", "`id`"]
    box = sandbox.Sandbox(ws, brief)
    try:
        argv = box.argv(hostile)
        assert argv[-len(hostile) :] == hostile
        assert sandbox.Spec.from_json(argv[argv.index("--") - 1]) == box.spec
        assert not {"sh", "bash", "/bin/sh", "-c"} & set(argv[: argv.index("--")])
    finally:
        box.root.rmdir()


def test_the_child_side_refuses_a_malformed_command_line() -> None:
    assert sandbox.main([]) == 2
    assert sandbox.main(["{}", "agent"]) == 2
    assert sandbox.main(["[]", "--", "agent"]) == 2  # not a spec
    assert sandbox.main(['{"root": "/x"}', "--", "agent"]) == 2  # a spec without its cwd
