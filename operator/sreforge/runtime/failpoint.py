"""Failpoints: the operator kills itself at a named point, for the crash-and-resume tests.

`SREFORGE_FAILPOINT=NAME[,NAME...]` makes the process SIGKILL itself the first time it
passes any of those points; nothing else changes, and unset (the default) it does nothing.
A SIGKILL at a chosen point is a crash at that point: no handler runs, no status write
finishes after it. The tests restart the operator after each one and check the run
resumes from status and ends with one verdict. The points:

- `persisted:PHASE`: right after this process first records PHASE in the Incident's
  status (a sreforge.loop.Phase, e.g. `persisted:CI`), before the phase's action starts;
- `applied:ACTION`: right after the action's first write to the cluster and before it
  finishes (`applied:inject` the regressed image patched in, `applied:run-ci` the CI Job
  created, `applied:deploy` the patched build patched in, `applied:record` the Incident's
  verdict written but not the Submission's, `applied:restore` the baseline patched back).
"""

from __future__ import annotations

import os
import signal

ENV = "SREFORGE_FAILPOINT"


def armed() -> frozenset[str]:
    return frozenset(n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip())


def reached(name: str) -> None:
    """Die here, by SIGKILL, if `name` is armed."""
    if name in armed():
        os.kill(os.getpid(), signal.SIGKILL)
