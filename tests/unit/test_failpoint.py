"""A failpoint kills the process that reaches it, by SIGKILL, and only when armed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sreforge.runtime import failpoint

CODE = "from sreforge.runtime import failpoint; failpoint.reached('persisted:CI'); print('on')"


def _run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != failpoint.ENV}
    if armed is not None:
        env[failpoint.ENV] = armed
    return subprocess.run(
        [sys.executable, "-c", CODE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_armed_failpoint_is_a_sigkill_there() -> None:
    got = _run("applied:deploy, persisted:CI")
    assert got.returncode == -signal.SIGKILL
    assert got.stdout == ""  # nothing after the point ran


def test_unarmed_or_other_points_change_nothing() -> None:
    for armed in (None, "", "persisted:Deploying", "persisted:ci"):
        got = _run(armed)
        assert (got.returncode, got.stdout) == (0, "on\n"), armed
