"""How much of this machine's CPU went to work that is not this run's.

A graded run shares the machine. When other work takes the CPU (a second run, a build,
a noisy neighbour's steal time), a correct fix can fail for want of CPU: measured here,
fixes that pass alone failed under load averages of 8 to 13 on two cores. The oracle
must not call that the fix's failure. It must not let a fix excuse itself either: a
patch that burns CPU burns it inside this run's own process tree, which counts as the
run's own work, never as contention.

`CpuMeter.sample()` returns, since the last call, two figures. `outside`: the share of
the whole machine's CPU time spent outside this run's process tree (the harness and
every descendant: the service, its dependencies, the load generator, Prometheus), plus
the time the hypervisor stole. `wait`: how long the tree's threads waited, runnable, for
a CPU, per second (schedstat). Either alone misleads: a cheap fix leaves the CPU to
others (outside high, nothing starved), and a patch that burns more CPUs than there are
starves itself (wait high, outside none). Contention is both at once. The harness makes
itself a child subreaper, so a process a patch double-forks away is re-parented to the
harness and stays inside the tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of this process's descendants are re-parented to it (best-effort)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def machine_times(proc: Path = Path("/proc")) -> tuple[int, int]:
    """(total, busy) clock ticks of all CPUs since boot, from /proc/stat; busy includes
    the time the hypervisor stole (another guest had the CPU)."""
    fields = [int(x) for x in (proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal  # guest is in user
    return total, total - idle - iowait


def tree(root: int, proc: Path = Path("/proc")) -> tuple[int, int]:
    """(CPU ticks, run-queue wait in ns) of `root` and every descendant.

    Ticks include the children each has reaped (stat(5) utime, stime, cutime, cstime);
    the wait is the time each live thread spent runnable but not running (schedstat).
    """
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # the command name is in parentheses and may hold spaces: split after the last ')'
        rest = raw[raw.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parent[pid] = int(rest[1])
        # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name
        ticks[pid] = sum(int(x) for x in rest[11:15])
    inside = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in inside and pid not in inside:
                inside.add(pid)
                changed = True
    wait = 0
    for pid in inside:
        with contextlib.suppress(OSError):
            for task in (proc / str(pid) / "task").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    wait += int((task / "schedstat").read_text().split()[1])
    return sum(ticks.get(pid, 0) for pid in inside), wait


@dataclass(frozen=True)
class CpuSample:
    """One interval: the machine's CPU share outside the run, and how starved the run was
    (seconds its threads waited, runnable, for a CPU, per second; summed over threads)."""

    outside: float
    wait: float


class CpuMeter:
    """Contention between successive samples (None on the first)."""

    def __init__(self, root: int | None = None, proc: Path = Path("/proc")) -> None:
        self.root = os.getpid() if root is None else root
        self.proc = proc
        self._last: tuple[int, int, int, int, float] | None = None

    def sample(self) -> CpuSample | None:
        try:
            total, busy = machine_times(self.proc)
            own, wait = tree(self.root, self.proc)
        except (OSError, ValueError, IndexError):
            return None
        now = time.monotonic()
        last, self._last = self._last, (total, busy, own, wait, now)
        if last is None:
            return None
        d_total, d_wall = total - last[0], now - last[4]
        if d_total <= 0 or d_wall <= 0:
            return None
        # the ticks of a process that exited between samples and was reaped outside the
        # tree go missing, so the difference is clamped to [0, 1]; so can a thread's wait
        outside = (busy - last[1]) - (own - last[2])
        return CpuSample(
            outside=round(min(1.0, max(0.0, outside / d_total)), 4),
            wait=round(max(0.0, (wait - last[3]) / 1e9 / d_wall), 4),
        )
