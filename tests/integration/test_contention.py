"""The CPU meter tells other work from the run's own, on this machine's real /proc.

Real processes, bounded: each CPU burner is a Python busy loop that stops by itself after
BURN seconds. The meter's root stands for the harness. A burner outside the root's tree
is outside work; one inside it is the run's own, and so is one that a process of the
tree double-forks away (re-parented to the subreaper root). A tree that runs more
burners than there are CPUs waits for a CPU; one that runs a single burner on an
otherwise idle machine barely does. Figures are compared with each other within one
test, never with a fixed time.
"""

from __future__ import annotations

import subprocess
import sys
import time

from sreforge.runtime.contention import CpuMeter, CpuSample

BURN = 3.0
BURNER = f"import time\nend = time.time() + {BURN}\nwhile time.time() < end: pass\n"
# a stand-in harness: subreaper, then starts the burner directly or double-forked away
ROOT = """
import os, sys, time
from sreforge.runtime.contention import become_subreaper
become_subreaper()
time.sleep(0.5)
burner = [sys.executable, "-c", sys.argv[2]]
if sys.argv[1] == "direct":
    os.spawnv(os.P_WAIT, burner[0], burner)
elif sys.argv[1] == "crowd":  # more burners than CPUs: the tree waits for a CPU
    crowd = [os.spawnv(os.P_NOWAIT, burner[0], burner) for _ in range(2 * os.cpu_count())]
    for pid in crowd:
        os.waitpid(pid, 0)
else:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(burner[0], burner)
        os._exit(0)
    os.wait()
    time.sleep(float(sys.argv[3]) + 1)
"""


def _measure(meter: CpuMeter) -> CpuSample:
    meter.sample()
    time.sleep(0.8)  # the burner is running
    meter.sample()
    time.sleep(BURN - 1.2)
    got = meter.sample()
    assert got is not None
    return got


def _root(mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", ROOT, mode, BURNER, str(BURN)])


def test_outside_work_is_contention_and_the_runs_own_is_not() -> None:
    got = {}
    for mode in ("direct", "double-forked", "crowd"):
        root = _root(mode)
        try:
            got[mode] = _measure(CpuMeter(root.pid))
        finally:
            root.wait(timeout=30)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    outside = subprocess.Popen([sys.executable, "-c", BURNER])  # not in idle's tree
    try:
        time.sleep(0.5)
        got["outside"] = _measure(CpuMeter(idle.pid))
    finally:
        outside.wait(timeout=30)
        idle.kill()
        idle.wait(timeout=10)
    print(got)
    # one busy loop is one CPU: on an otherwise quiet machine of N CPUs, ~1/N outside
    assert got["outside"].outside > got["direct"].outside + 0.2, got
    assert got["outside"].outside > got["double-forked"].outside + 0.2, got
    # the crowd is the tree's own: little outside, much waiting
    assert got["outside"].outside > got["crowd"].outside + 0.2, got
    assert got["crowd"].wait > got["direct"].wait + 0.5, got


def test_first_sample_has_no_interval_and_a_vanished_root_counts_nothing_inside() -> None:
    meter = CpuMeter(2**22 + 7)  # no such pid (above the default pid_max)
    assert meter.sample() is None
    time.sleep(0.2)
    got = meter.sample()
    assert got is None or 0.0 <= got.outside <= 1.0


def test_samples_are_shares_of_the_machine() -> None:
    meter = CpuMeter()
    values = [meter.sample()]
    for _ in range(3):
        time.sleep(0.3)
        values.append(meter.sample())
    assert values[0] is None
    assert all(v is not None and 0.0 <= v.outside <= 1.0 for v in values[1:]), values
    assert all(v is not None and v.wait >= 0.0 for v in values[1:]), values
