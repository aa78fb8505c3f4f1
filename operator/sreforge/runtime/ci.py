"""The CI gate: vet a submitted patch, apply it to a pristine copy, run the pristine tests.

User text never reaches a shell: patches are parsed here, then applied by `git apply`
with an argument list, in a directory git cannot mistake for part of a repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from sreforge.api.observation import CIResult, CIStatus
from sreforge.errors import SreforgeError
from sreforge.runtime.process import resolve_command

# argv, tree -> the argv and environment (None: the harness's) that run it confined
Confine = Callable[[list[str], Path], tuple[list[str], dict[str, str] | None]]
MAX_PATCH_BYTES = 1024 * 1024  # documented limit: 1 MiB of unified diff
OUTPUT_TAIL_CHARS = 4000
_HEADER = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (\S+)|\+\+\+ (\S+))")
# File names a patch may write: no quoting, spaces or shell metacharacters to misread.
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_.+=@,-]+(?:/[A-Za-z0-9_.+=@,-]+)*$")
_SYMLINK_MODE = re.compile(r"^(?:(?:new|deleted|old) (?:file )?mode|index \S+) 120000\b")


class PatchRejected(SreforgeError, ValueError):
    """A patch the gate refuses before applying anything; the message is the CI feedback."""


def _check_path(path: str) -> str:
    """`path` (already without its a/ or b/ prefix) if it is safe to write, else reject."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("/"):
        raise PatchRejected(f"absolute path in patch: {path}")
    if ".." in pure.parts or "\\" in path:
        raise PatchRejected(f"path escapes the workspace: {path}")
    if pure.parts and pure.parts[0] == ".git":
        raise PatchRejected(f"patch touches git metadata: {path}")
    if not _SAFE_PATH.match(path):
        raise PatchRejected(
            f"file name outside the allowed characters [A-Za-z0-9._+=@,-/]: {path!r}"
        )
    return str(pure)


def _clean_path(raw: str) -> str:
    if raw == "/dev/null":
        return raw
    path = raw.split("\t", 1)[0]
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return _check_path(path)


def touched_paths(patch: str) -> list[str]:
    """Every path a unified diff touches; raises PatchRejected on unsafe content."""
    try:
        size = len(patch.encode("utf-8"))
    except UnicodeEncodeError as exc:  # e.g. a lone surrogate from a JSON "\ud800"
        raise PatchRejected(f"patch is not valid UTF-8 text: {exc.reason}") from exc
    if size > MAX_PATCH_BYTES:
        raise PatchRejected(f"patch is larger than the {MAX_PATCH_BYTES} byte limit")
    if "\x00" in patch:
        raise PatchRejected("patch contains NUL bytes (binary content is not accepted)")
    paths: list[str] = []
    for line in patch.splitlines():
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchRejected("binary patches are not accepted")
        if _SYMLINK_MODE.match(line):
            raise PatchRejected("patches may not create symlinks")
        m = _HEADER.match(line)
        if m:
            for raw in m.groups():
                if raw is not None:
                    p = _clean_path(raw)
                    if p != "/dev/null" and p not in paths:
                        paths.append(p)
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            p = _clean_path(line.split(" ", 2)[2])
            if p not in paths:
                paths.append(p)
    return paths


def is_protected(path: str, protected: Sequence[str]) -> bool:
    for rule in protected:
        rule_path = rule.rstrip("/")
        if path == rule_path or path.startswith(rule_path + "/"):
            return True
    return False


def vet_patch(patch: str, protected: Sequence[str]) -> list[str]:
    """The paths a patch changes, after refusing unsafe or protected edits."""
    paths = touched_paths(patch)
    if patch.strip() and not paths:
        raise PatchRejected("not a unified diff: no file headers (--- / +++) found")
    if patch.strip():
        paths += [p for p in _paths_git_sees(patch) if p not in paths]
    bad = [p for p in paths if is_protected(p, protected)]
    if bad:
        raise PatchRejected(f"patch edits protected paths: {', '.join(bad)}")
    return paths


def _git_env(tree: Path) -> dict[str, str]:
    # Stop git from discovering an enclosing repository: paths stay relative to `tree`.
    return {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}


def _paths_git_sees(patch: str) -> list[str]:
    """The paths `git apply -p1` itself would write, by its own parser, each vetted.

    The header regex above can be misled (a C-quoted name, a prefix other than a/ and b/
    that -p1 strips all the same); git's own reading of the patch cannot.
    """
    with tempfile.TemporaryDirectory(prefix="sreforge-vet-") as tmp:
        outputs = []
        for flag in ("--numstat", "--summary"):
            proc = subprocess.run(
                ["git", "apply", flag, "-z", "-p1", "-"],
                cwd=tmp,
                input=patch.encode(),
                capture_output=True,
                env=_git_env(Path(tmp)),
                timeout=60,
                check=False,
            )
            if proc.returncode != 0:
                raise PatchRejected("malformed patch: " + proc.stderr.decode(errors="replace"))
            outputs.append(proc.stdout.decode(errors="replace"))
    numstat, summary = outputs
    if re.search(r"(?:mode|=>) 120000\b", summary):
        raise PatchRejected("patches may not create symlinks")
    paths: list[str] = []
    for field in numstat.split("\0"):
        raw = field.rsplit("\t", 1)[-1]  # "added<TAB>deleted<TAB>path", renames: bare paths
        if raw and (path := _check_path(raw)) not in paths:
            paths.append(path)
    return paths


def apply_patch(tree: Path, patch: str) -> None:
    """Apply a unified diff (-p1) inside `tree`; raises PatchRejected with git's message."""
    if not patch.strip():
        return  # the empty patch: a submission that changes nothing
    argv = ["git", "apply", "--whitespace=nowarn", "-p1", "-"]
    for check in (True, False):
        cmd = [*argv[:2], "--check", *argv[2:]] if check else argv
        proc = subprocess.run(
            cmd,
            cwd=tree,
            input=patch.encode(),
            capture_output=True,
            env=_git_env(tree),
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise PatchRejected("patch does not apply: " + proc.stderr.decode(errors="replace"))


def diff_trees(before: Path, after: Path) -> str:
    """A unified diff with a/ and b/ prefixes from tree `before` to tree `after`."""
    with tempfile.TemporaryDirectory(prefix="sreforge-diff-") as tmp:
        # Named a/ and b/ side by side, `--no-prefix` yields exactly a/<path> and b/<path>.
        copy_tree(before, Path(tmp) / "a")
        copy_tree(after, Path(tmp) / "b")
        proc = subprocess.run(
            ["git", "diff", "--no-index", "--no-prefix", "--no-color", "--binary", "a", "b"],
            cwd=tmp,
            capture_output=True,
            env=_git_env(Path(tmp)),
            timeout=60,
            check=False,
        )
    if proc.returncode not in (0, 1):
        raise RuntimeError(proc.stderr.decode(errors="replace"))
    return proc.stdout.decode(errors="replace")


def copy_tree(src: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(
        src,
        dest,
        symlinks=True,
        # .git: the workspace's deploy history (runtime/workspace.py) is never a tree's content
        ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", ".git"
        ),
    )


def gate_steps(test_command: Sequence[str]) -> list[list[str]]:
    """What the CI gate runs in the patched tree, in order, locally and in the CI Job:
    every module must compile, then the service's own (pristine) tests must pass."""
    return [["python", "-m", "compileall", "-q", "."], list(test_command)]


def run_gate(
    *,
    pristine: Path,
    workdir: Path,
    patch: str,
    protected: Sequence[str],
    test_command: Sequence[str],
    test_paths: Sequence[str],
    timeout: float,
    confine: Confine | None = None,
) -> tuple[CIResult, Path | None]:
    """Apply `patch` to a copy of `pristine` in `workdir`, restore the pristine tests, test.

    The steps run the patch's code: `confine(argv, workdir)` gives the command line and
    environment that run a step confined (sreforge.runtime.confine); without it a step
    runs as the harness's user. Returns the CI result and, when green, the patched tree
    to deploy.
    """
    started = time.monotonic()
    try:
        files = vet_patch(patch, protected)
        copy_tree(pristine, workdir)
        apply_patch(workdir, patch)
    except PatchRejected as exc:
        return CIResult(
            status=CIStatus.REJECTED,
            reason=str(exc).strip()[:2000],
            duration_seconds=time.monotonic() - started,
        ), None
    for rel in test_paths:  # the pristine tests, never the agent's
        src, dest = pristine / rel, workdir / rel
        if dest.exists():
            shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
        if src.is_dir():
            shutil.copytree(src, dest)
        elif src.exists():
            shutil.copyfile(src, dest)
    steps = gate_steps(test_command)
    output = ""

    def result(status: CIStatus, reason: str) -> CIResult:
        return CIResult(
            status=status,
            reason=reason,
            output_tail=output[-OUTPUT_TAIL_CHARS:],
            files_changed=files,
            duration_seconds=time.monotonic() - started,
        )

    for argv in steps:
        # `python` is resolved by whoever runs the step: confined, the service's own
        # interpreter (a fetched service's venv) is the substrate's to choose
        command, env = resolve_command(argv), {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        if confine is not None:
            command, confined_env = confine(list(argv), workdir)
            env = confined_env if confined_env is not None else env
        try:
            proc = subprocess.run(
                command,
                cwd=workdir,
                capture_output=True,
                timeout=timeout,
                check=False,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return result(CIStatus.RED, f"{' '.join(argv)} timed out"), None
        output += proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            return result(CIStatus.RED, f"`{' '.join(argv)}` exited {proc.returncode}"), None
    return result(CIStatus.GREEN, "build and tests passed"), workdir
