"""A process's own CPU time and resident memory from /proc, for the benchmarks that sample
one (the load generator, the operator, the local driver)."""

from __future__ import annotations

import os
from pathlib import Path

from sreforge.runtime.harness import rss_bytes

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its own, not its children's), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (0 when it is gone)."""
    return (rss_bytes(pid) or 0) / 2**20
