"""Per-case counts for RELIABILITY.md, written by the tests, read by benchmarks/reliability.py.

    with case("patch: ../ paths") as c:
        ...
        c.lost = files_changed  # measured before it is asserted
        assert c.lost == 0

Each case (a hypothesis example, an apiserver request, a fault run) logs one line when it
ends: its class, whether every assertion held, and the data it lost as measured. With
SREFORGE_RELIABILITY_LOG unset (a normal pytest run) nothing is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "SREFORGE_RELIABILITY_LOG"


@dataclass
class Case:
    cls: str
    lost: int | None = None  # None: this class writes nothing whose loss could be measured


@contextmanager
def case(cls: str) -> Iterator[Case]:
    """One case of class `cls`; survived unless the body raises."""
    c = Case(cls)
    ok = False
    try:
        yield c
        ok = True
    finally:
        path = os.environ.get(LOG_ENV)
        if path:
            # "tests/x.py::test_y[param] (call)" -> the test it belongs to
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("[")[0]
            entry = {"class": c.cls, "survived": ok, "lost": c.lost, "test": test}
            with Path(path).open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
