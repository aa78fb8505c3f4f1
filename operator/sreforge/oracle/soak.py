"""The soak: how long a fix must keep holding after the sustained window, drawn per case.

A soak's length is hidden from whoever writes the fix: it is drawn from the scenario's
`[verify] soak_seconds` range with a key that only the harness holds (a random key per
local run; on Kubernetes one derived from the operator's secret and the Incident's uid, so
that a restarted operator draws the same length again). Each case of a run gets its own
seed, a one-way hash of the key and the case number: publishing a graded case's seed and
length after its verdict tells nothing about the next case's. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac

# A drawn length is rounded to this many seconds (what the record shows).
RESOLUTION_SECONDS = 0.1


def case_seed(key: str, case: int) -> str:
    """The seed of case `case` (1-based) of the run whose soak key is `key` (hex digest)."""
    return hmac.new(key.encode(), f"soak/case/{case}".encode(), hashlib.sha256).hexdigest()


def derive_key(secret: str, name: str) -> str:
    """A run's soak key from a harness-held `secret` and a stable `name` (an Incident's uid):
    the same inputs give the same key, so a resumed run keeps its soak."""
    return hmac.new(secret.encode(), f"soak/run/{name}".encode(), hashlib.sha256).hexdigest()


def draw(seed: str, low: float, high: float) -> float:
    """The soak's length for `seed`: uniform in [low, high], rounded to RESOLUTION_SECONDS."""
    if high <= low:
        return float(low)
    unit = int(seed[:16], 16) / float(1 << 64)
    length = low + unit * (high - low)
    return round(round(length / RESOLUTION_SECONDS) * RESOLUTION_SECONDS, 3)
