"""The real third-party services, as scripts/setup.sh fetched them: each one's own test
suite runs from the fetched tree with the source's pinned venv (what a CI gate on it
will run), and its licence is the one source.toml records."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sreforge.runtime import sources

ROOT = Path(__file__).resolve().parents[2]

# name: (a phrase of its LICENSE, at least this many test files, one quick test module and
# the extra pytest arguments it needs, the count that module passes)
CASES = {
    # its own config asks for pytest-xdist, which a gate does not need: -o addopts=
    "kinto": ("Apache License", 100, ["-o", "addopts=", "tests/test_views_hello.py"], 11),
    "ihatemoney": (
        "Redistribution and use in source and binary forms",
        6,
        ["ihatemoney/tests/api_test.py"],
        18,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fetched_service_runs_its_own_tests_from_its_tree(name: str, tmp_path: Path) -> None:
    licence, test_files, argv, passed = CASES[name]
    directory = ROOT / "substrate" / name
    spec = sources.load(directory)
    fetched = sources.Fetched(spec)
    assert fetched.ready((directory / spec.requirements).read_text()), (
        f"{spec.label} is not fetched: run scripts/setup.sh (or `sreforge sources fetch`)"
    )
    assert licence in (fetched.tree / "LICENSE").read_text()
    assert len(list((fetched.tree / spec.tests).rglob("*.py"))) >= test_files
    # on a copy, as a gate does: a suite may write into its tree (I Hate Money's compiles
    # its translations there), and the cache is every build's pristine source
    tree = tmp_path / "tree"
    shutil.copytree(fetched.tree, tree, symlinks=True)
    done = subprocess.run(
        [str(fetched.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{passed} passed" in done.stdout


def test_every_fetched_service_of_the_repository_is_covered() -> None:
    assert {spec.name for _, spec in sources.discover(ROOT)} == set(CASES)
