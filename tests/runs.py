"""Run `sreforge run` as a real subprocess, the way a user does, and read what it recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    code: int
    record: dict[str, Any]
    run_dir: Path
    output: str


# Graded runs in tests have no soak unless they test it (tests/integration/test_soak.py):
# the soak's mechanism is the same at any length, and its default costs minutes per case.
NO_SOAK = "0:0"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "operator"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.update(extra)
    return env


def sreforge_run(
    runs_dir: Path,
    scenario: Path,
    *args: str,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> Run:
    """`sreforge run SCENARIO ARGS --runs-dir RUNS_DIR`; exactly one run must be recorded."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sreforge.cli",
            "run",
            str(scenario),
            *args,
            *([] if "--soak-seconds" in args else ["--soak-seconds", NO_SOAK]),
            "--runs-dir",
            str(runs_dir),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=env or cli_env(),
    )
    output = proc.stdout + proc.stderr
    records = list(runs_dir.glob("*/record.json"))
    assert len(records) == 1, output
    return Run(
        proc.returncode,
        json.loads(records[0].read_text(encoding="utf-8")),
        records[0].parent,
        output,
    )


AGENTS = ROOT / "tests" / "agents"


def agent_args(script: str, *paths: Path) -> list[str]:
    """`--agent` for one of tests/agents/ run by the system's python3 inside the agent's
    sandbox, with the script's folder and the files it is given shared read-only."""
    argv = " ".join(["python3", str(AGENTS / script), *map(str, paths)])
    shares = [AGENTS, *paths]
    return ["--agent", argv, *[a for p in shares for a in ("--agent-share", str(p))]]


def inventory_from_log(run_dir: Path) -> dict[str, Any]:
    """What tests/agents/inventory_agent.py printed to its log (logs/agent.log)."""
    log = (run_dir / "logs" / "agent.log").read_text(encoding="utf-8")
    (line,) = [x for x in log.splitlines() if x.startswith(INVENTORY_PREFIX)]
    found: dict[str, Any] = json.loads(line.removeprefix(INVENTORY_PREFIX))
    return found


INVENTORY_PREFIX = "sreforge-inventory: "
