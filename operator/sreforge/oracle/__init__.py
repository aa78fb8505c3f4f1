"""The compound oracle: pure functions from recorded observations to a Verdict.

detect -> diagnose -> mitigate: each dimension is a sub-oracle behind one small contract
(contract.SubOracle -> contract.SubVerdict), weighted by `[verify.oracles]` and combined
by one pure combiner (compound.combine). v1 weighs mitigate alone (docs/oracle.md).

No I/O: a verdict can be recomputed from record.json. Missing telemetry is never a clear.
"""

from sreforge.oracle.compound import (
    BEHAVIOURAL_FAILURES,
    ORACLES,
    combine,
    configured,
    evaluate,
    never_fired,
)
from sreforge.oracle.contract import SubOracle, SubVerdict, VerifyObservations
from sreforge.oracle.diagnose import DiagnosisOracle
from sreforge.oracle.mitigate import (
    MAX_CPU_WAIT,
    MAX_GAP_INTERVALS,
    MIN_OUTSIDE_CPU,
    MitigationOracle,
    SampleState,
    classify,
    contention,
    window_complete,
)

__all__ = [
    "BEHAVIOURAL_FAILURES",
    "MAX_CPU_WAIT",
    "MAX_GAP_INTERVALS",
    "MIN_OUTSIDE_CPU",
    "ORACLES",
    "DiagnosisOracle",
    "MitigationOracle",
    "SampleState",
    "SubOracle",
    "SubVerdict",
    "VerifyObservations",
    "classify",
    "combine",
    "configured",
    "contention",
    "evaluate",
    "never_fired",
    "window_complete",
]
