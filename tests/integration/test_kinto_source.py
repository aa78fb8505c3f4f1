"""The real Kinto, as scripts/setup.sh fetched it: its own test suite runs from the
fetched tree with the source's pinned venv (what a CI gate on Kinto will run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sreforge.runtime import sources

ROOT = Path(__file__).resolve().parents[2]


def test_the_fetched_kinto_runs_its_own_tests_from_its_tree() -> None:
    directory = ROOT / "substrate" / "kinto"
    spec = sources.load(directory)
    fetched = sources.Fetched(spec)
    assert fetched.ready((directory / spec.requirements).read_text()), (
        f"{spec.label} is not fetched: run scripts/setup.sh (or `sreforge sources fetch`)"
    )
    assert "Apache License" in (fetched.tree / "LICENSE").read_text()
    assert len(list((fetched.tree / "tests").rglob("*.py"))) > 100
    done = subprocess.run(
        [
            str(fetched.python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",  # its own config asks for pytest-xdist, which a gate does not need
            "tests/test_views_hello.py",
        ],
        cwd=fetched.tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "11 passed" in done.stdout
