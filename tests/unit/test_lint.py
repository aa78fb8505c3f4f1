"""The house rules are checked, not hoped for: ruff (lint + format) and mypy --strict."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["operator", "tests", "benchmarks"]


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)


@pytest.mark.skipif(
    shutil.which("ruff") is None and not Path(sys.executable).with_name("ruff").exists(),
    reason="ruff is a dev tool: bash scripts/setup.sh",
)
def test_ruff_clean() -> None:
    ruff = (
        str(Path(sys.executable).with_name("ruff"))
        if Path(sys.executable).with_name("ruff").exists()
        else "ruff"
    )
    lint = run([ruff, "check", *PATHS])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run([ruff, "format", "--check", *PATHS])
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_clean() -> None:
    proc = run([sys.executable, "-m", "mypy"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pure_layers_do_no_io() -> None:
    """oracle, loop and api import neither kopf, a Kubernetes client nor an HTTP library."""
    forbidden = (
        "kopf",
        "kubernetes",
        "aiohttp",
        "requests",
        "urllib",
        "socket",
        "subprocess",
        "prometheus_api_client",
    )
    pure = [
        *sorted((ROOT / "operator/sreforge/oracle").glob("*.py")),
        ROOT / "operator/sreforge/loop.py",
        *sorted((ROOT / "operator/sreforge/api").glob("*.py")),
    ]
    for path in pure:
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")):
                module = stripped.split()[1]
                assert module.split(".")[0] not in forbidden, f"{path.name}: {stripped}"
