"""The CI gate's patch vetting and application, on real trees in tmp_path (git apply)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sreforge.api import CIStatus
from sreforge.runtime import ci

OK = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -1 +1 @@
-x = 1
+x = 2
"""


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "pristine"
    (root / "tests").mkdir(parents=True)
    (root / "app.py").write_text("x = 1\n")
    (root / "tests" / "test_app.py").write_text(
        "from app import x\n\ndef test_x():\n    assert x in (1, 2)\n"
    )
    return root


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        (OK.replace("a/app.py", "a/../etc/passwd"), "escapes"),
        (OK.replace("+++ b/app.py", "+++ /etc/passwd"), "absolute"),
        (
            "diff --git a/l b/l\nnew file mode 120000\n"
            "--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n",
            "symlink",
        ),
        ("diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 3\n", "binary"),
        (OK + "\x00", "NUL"),
        (OK + "+" + "y" * ci.MAX_PATCH_BYTES, "larger"),
        (OK.replace("app.py", "tests/test_app.py"), "protected"),
        ("just some prose, not a diff\n", "not a unified diff"),
    ],
    ids=["dotdot", "absolute", "symlink", "binary", "nul", "oversize", "protected", "prose"],
)
def test_unsafe_patches_are_rejected_before_anything_is_applied(
    tmp_path: Path, patch: str, why: str
) -> None:
    pristine = tree(tmp_path)
    before = {p: p.read_bytes() for p in pristine.rglob("*") if p.is_file()}
    result, deployed = ci.run_gate(
        pristine=pristine,
        workdir=tmp_path / "ci",
        patch=patch,
        protected=["tests"],
        test_command=["python", "-m", "pytest"],
        test_paths=["tests"],
        timeout=60,
    )
    assert result.status is CIStatus.REJECTED
    assert why in result.reason
    assert deployed is None
    assert {p: p.read_bytes() for p in pristine.rglob("*") if p.is_file()} == before


def test_patch_that_does_not_apply_is_rejected_with_gits_reason(tmp_path: Path) -> None:
    pristine = tree(tmp_path)
    result, _ = ci.run_gate(
        pristine=pristine,
        workdir=tmp_path / "ci",
        patch=OK.replace("-x = 1", "-x = 99"),
        protected=[],
        test_command=["python", "-m", "pytest", "-q"],
        test_paths=[],
        timeout=60,
    )
    assert result.status is CIStatus.REJECTED
    assert "does not apply" in result.reason


def test_green_patch_runs_pristine_tests_and_returns_the_patched_tree(tmp_path: Path) -> None:
    pristine = tree(tmp_path)
    result, deployed = ci.run_gate(
        pristine=pristine,
        workdir=tmp_path / "ci",
        patch=OK,
        protected=["tests"],
        test_command=["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        test_paths=["tests"],
        timeout=120,
    )
    assert result.status is CIStatus.GREEN, result.output_tail
    assert result.files_changed == ["app.py"]
    assert deployed is not None
    assert (deployed / "app.py").read_text() == "x = 2\n"
    assert (pristine / "app.py").read_text() == "x = 1\n"


def test_red_tests_give_ci_red_with_output(tmp_path: Path) -> None:
    pristine = tree(tmp_path)
    result, deployed = ci.run_gate(
        pristine=pristine,
        workdir=tmp_path / "ci",
        patch=OK.replace("+x = 2", "+x = 3"),
        protected=["tests"],
        test_command=["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        test_paths=["tests"],
        timeout=120,
    )
    assert result.status is CIStatus.RED
    assert "assert" in result.output_tail
    assert deployed is None


def test_diff_trees_round_trips_through_apply(tmp_path: Path) -> None:
    pristine = tree(tmp_path)
    edited = tmp_path / "edited"
    ci.copy_tree(pristine, edited)
    (edited / "app.py").write_text("x = 2\n")
    (edited / "new.py").write_text("y = 1\n")
    patch = ci.diff_trees(pristine, edited)
    assert ci.touched_paths(patch) == ["app.py", "new.py"]
    target = tmp_path / "target"
    ci.copy_tree(pristine, target)
    ci.apply_patch(target, patch)
    assert (target / "new.py").read_text() == "y = 1\n"
