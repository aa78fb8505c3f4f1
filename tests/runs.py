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
