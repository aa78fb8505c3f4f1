"""What every child process the package starts shares, whichever part starts it.

Both runtime/ (services, Prometheus, the local load generator) and load/ (a generator
started on its own) use it, so it lives in neither: load/ imports nothing from runtime/.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
# Looked up once here: the child between fork and exec must not import or dlopen anything.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """`preexec_fn`: the kernel sends the child SIGTERM when the thread that started it ends.

    Without it, a harness killed with SIGKILL (a test timeout, `kill -9`) leaves its
    services, load generator and Prometheus running and loading the machine. Linux only;
    elsewhere a no-op. The threads that start children (the run's own and its one job
    worker) live until the run's teardown, which stops the children first anyway.
    """
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl: do not outlive it
        os._exit(1)
