"""Children of the harness do not outlive it, even when it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import sys, time
from pathlib import Path
from sreforge.runtime.process import Managed
m = Managed("sleeper", ["python", "-c", "import time; time.sleep(60)"], log_path=Path(sys.argv[1]))
print(m.pid, flush=True)
time.sleep(60)
"""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_managed_child_is_terminated_when_the_harness_is_sigkilled(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert running(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = running(child)
    if alive:  # do not leave it behind if the property failed
        os.kill(child, signal.SIGKILL)
    assert not alive
