"""Session-wide hooks of the test suite."""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path

import pytest

from sreforge import catalogue

SCENARIOS_MD_COMMAND = (
    "SREFORGE_SCENARIOS_MD=SCENARIOS.md .venv/bin/python -m pytest "
    "tests/integration/test_scenario_runs.py"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    target = os.environ.get("SREFORGE_SCENARIOS_MD")
    if target and not hasattr(session.config, "workerinput"):
        Path(f"{target}.rows.jsonl").unlink(missing_ok=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write SCENARIOS.md from the graded runs' rows, once, in the controlling process."""
    target = os.environ.get("SREFORGE_SCENARIOS_MD")
    if not target or hasattr(session.config, "workerinput"):
        return
    rows_file = Path(f"{target}.rows.jsonl")
    if not rows_file.exists():
        return
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: (r["scenario"], r["expected"] != "pass", r["patch"]))
    catalogue.write_markdown(Path(target), rows, SCENARIOS_MD_COMMAND, catalogue.when())
    rows_file.unlink()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport() -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In CI (CI=true) a skipped test fails: every tool the suite needs is installed by
    scripts/setup.sh, so a skip there means a missing install step, never a pass."""
    report = yield
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must install everything it needs: {reason}"
    return report
