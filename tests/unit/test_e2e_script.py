"""tests/e2e/kind.sh cannot run here (no Docker); at least it must parse."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "kind.sh"


def test_kind_script_parses() -> None:
    res = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_kind_script_is_shellcheck_clean() -> None:
    res = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout
