"""The house rules are checked, not hoped for: ruff (lint + format), mypy --strict, pure
layers that do no I/O, and which package may import which."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["operator", "tests", "benchmarks"]


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)


@pytest.mark.skipif(
    shutil.which("ruff") is None and not Path(sys.executable).with_name("ruff").exists(),
    reason="ruff is a dev tool: bash scripts/setup.sh",
)
def test_ruff_clean() -> None:
    ruff = (
        str(Path(sys.executable).with_name("ruff"))
        if Path(sys.executable).with_name("ruff").exists()
        else "ruff"
    )
    lint = run([ruff, "check", *PATHS])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run([ruff, "format", "--check", *PATHS])
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_clean() -> None:
    proc = run([sys.executable, "-m", "mypy"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ----- the pure layers do no I/O ------------------------------------------------------------
# DESIGN.md: oracle, loop and api import neither kopf nor a Kubernetes client nor do I/O.
# The check reads their syntax trees, so it sees function-local imports and calls, too.

PACKAGE = ROOT / "operator"
#: Modules whose purpose is I/O (files, processes, network, the terminal, the cluster);
#: a dotted entry also covers its submodules.
IO_MODULES = frozenset({
    "aiohttp", "asyncio", "bz2", "ctypes", "dbm", "fcntl", "fileinput", "ftplib", "getpass",
    "glob", "grp", "gzip", "http.client", "http.cookiejar", "http.server", "httpx",
    "importlib", "io", "kopf", "kubernetes", "logging", "lzma", "mmap", "multiprocessing",
    "os", "prometheus_api_client", "prometheus_client", "pty", "pwd", "redis", "requests",
    "select", "selectors", "shelve", "shutil", "signal", "smtplib", "socket", "sqlite3",
    "ssl", "subprocess", "tarfile", "telnetlib", "tempfile", "termios", "urllib", "urllib3",
    "webbrowser", "xmlrpc", "zipfile",
})  # fmt: skip
#: The package's own modules the pure layers may import: the pure layers themselves and
#: the error hierarchy (everything else in sreforge may do I/O: runtime, scenarios, ...).
PURE_PACKAGE_MODULES = ("sreforge.api", "sreforge.errors", "sreforge.loop", "sreforge.oracle")
#: Builtins that read or write the terminal or files, or import by name.
IO_BUILTINS = frozenset({"__import__", "breakpoint", "input", "open", "print"})
#: pathlib.Path methods that touch the file system (a Path as a value is fine), by name:
#: the ones other types share (owner, group: re.Match.group; walk: ast.walk) are left out.
#: `replace` is Path.replace(target) only with one positional argument (str.replace takes
#: two). Not checked yet: resolve() (it reads symlinks): api Scenario.source_path uses it.
IO_PATH_METHODS = frozenset({
    "chmod", "exists", "glob", "hardlink_to", "is_block_device", "is_char_device", "is_dir",
    "is_fifo", "is_file", "is_mount", "is_socket", "is_symlink", "iterdir", "lchmod", "lstat",
    "mkdir", "open", "read_bytes", "read_text", "readlink", "rename", "rglob", "rmdir",
    "samefile", "stat", "symlink_to", "touch", "unlink", "write_bytes", "write_text",
})  # fmt: skip
#: module.function calls that read or write a file object.
IO_FILE_FUNCTIONS = frozenset({
    ("json", "dump"), ("json", "load"), ("marshal", "dump"), ("marshal", "load"),
    ("pickle", "dump"), ("pickle", "load"), ("tomllib", "load"),
})  # fmt: skip
IO_SYS_ATTRIBUTES = frozenset(
    {"stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__"}
)


def _module_name(path: Path) -> str:
    """`operator/sreforge/api/scenario.py` -> `sreforge.api.scenario` (a package: its name)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, *, package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `tree`, relative ones resolved.

    `from a import b` yields `a` and `a.b` (b may be a submodule), so both kinds count.
    `module` is the importing module's name; `package` says it is a package's __init__.
    """
    here = module.split(".") if package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _within(name: str, prefixes: frozenset[str] | tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def io_findings(source: str, module: str, *, package: bool = False) -> list[str]:
    """Every I/O the pure-layer rules forbid in `source`, as `line: what` (empty: pure)."""
    tree = ast.parse(source)
    out: list[str] = []
    for line, name in imported_modules(tree, module, package=package):
        if _within(name, IO_MODULES):
            out.append(f"{line}: imports {name}, an I/O module")
        elif name.startswith("sreforge.") and not _within(name, PURE_PACKAGE_MODULES):
            out.append(f"{line}: imports {name}, a package module outside the pure layers")
        elif name.rpartition(".")[::2] in IO_FILE_FUNCTIONS:
            out.append(f"{line}: imports {name}, which reads or writes files")
        elif name.startswith("sys.") and name.removeprefix("sys.") in IO_SYS_ATTRIBUTES:
            out.append(f"{line}: imports {name}, the terminal")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
            and node.attr in IO_SYS_ATTRIBUTES
        ):
            out.append(f"{node.lineno}: uses sys.{node.attr}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IO_BUILTINS:
            out.append(f"{node.lineno}: calls {func.id}()")
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if (owner, func.attr) in IO_FILE_FUNCTIONS:
                out.append(f"{node.lineno}: calls {owner}.{func.attr}() on a file")
            elif func.attr in IO_PATH_METHODS or (
                func.attr == "replace"
                and owner != "dataclasses"
                and len(node.args) == 1
                and not node.keywords
            ):
                out.append(f"{node.lineno}: calls .{func.attr}(), which touches the file system")
    return sorted(set(out), key=lambda f: int(f.split(":")[0]))


def pure_layer_files() -> list[Path]:
    """loop and oracle (as a module or as a package) and api/."""
    src = PACKAGE / "sreforge"
    files = [src / "loop.py", src / "oracle.py"]
    for package in ("loop", "oracle", "api"):
        files += (src / package).rglob("*.py")
    return sorted(p for p in files if p.is_file())


def test_pure_layers_do_no_io() -> None:
    """oracle, loop and api import no I/O module, no impure package module, and call
    nothing that touches files, processes or the terminal."""
    files = pure_layer_files()
    names = {_module_name(p) for p in files}
    assert {"sreforge.loop", "sreforge.api.scenario"} <= names
    assert "sreforge.oracle" in names or any(n.startswith("sreforge.oracle.") for n in names)
    findings = [
        f"{path.relative_to(ROOT)}:{finding}"
        for path in files
        for finding in io_findings(
            path.read_text(encoding="utf-8"), _module_name(path), package=path.stem == "__init__"
        )
    ]
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize(
    "source",
    [
        "from pathlib import Path\n\ndef f(x):\n    return Path(x).read_text()\n",
        "def f(p):\n    return sorted(p.glob('*.patch'))\n",
        "def f(p):\n    return p.is_file()\n",
        "def f(p, q):\n    p.replace(q)\n",
        "def f(p):\n    return open(p).read()\n",
        "print('hello')\n",
        "import tomllib\n\ndef f(fh):\n    return tomllib.load(fh)\n",
        "import json\n\ndef f(d, fh):\n    json.dump(d, fh)\n",
        "from json import load\n",
        "import sys\n\ndef f():\n    sys.stderr.write('x')\n",
        "import os\n",
        "import os.path\n",
        "def f():\n    import subprocess\n",
        "from shutil import copytree\n",
        "import kopf\n",
        "from kubernetes import client\n",
        "from urllib.request import urlopen\n",
        "from sreforge import scenarios\n",
        "from sreforge.runtime.local import LocalRun\n",
        "from ..runtime import kube\n",
    ],
)
def test_purity_check_catches_io(source: str) -> None:
    """The check fails on I/O: it is not a test that cannot fail."""
    findings = io_findings(source, "sreforge.api.example")
    assert findings, source


def test_purity_check_reports_where() -> None:
    source = "from pathlib import Path\n\n\ndef f(x):\n    return Path(x).read_text()\n"
    assert io_findings(source, "sreforge.api.example") == [
        "5: calls .read_text(), which touches the file system"
    ]


def test_purity_check_passes_pure_code() -> None:
    source = """
import ast
import dataclasses
import json
import re
import tomllib
from pathlib import Path

from sreforge import oracle
from sreforge.api.scenario import Scenario
from . import verdict
from .observation import CIStatus


def f(s: Scenario, text: str) -> list[object]:
    path = s.directory / "fixes" / text.replace("a", "b")
    match = re.match("a", text)
    return [
        path,
        dataclasses.replace(s, name="x"),
        json.dumps(json.loads(text)),
        tomllib.loads(text),
        list(ast.walk(ast.parse(text))),
        match and match.group(0),
    ]
"""
    assert io_findings(source, "sreforge.api.example") == []


# ----- which package may import which ----------------------------------------------------


def _imports_under(*roots: Path) -> list[tuple[str, int, str]]:
    """(file, line, module) of every import in the .py files at or under `roots`."""
    files = [r for r in roots if r.suffix == ".py" and r.is_file()]
    files += [f for r in roots if r.is_dir() for f in sorted(r.rglob("*.py"))]
    assert files, f"nothing to check at {roots}"
    return [
        (str(path.relative_to(ROOT)), line, name)
        for path in files
        for line, name in imported_modules(
            ast.parse(path.read_text(encoding="utf-8")),
            _module_name(path),
            package=path.stem == "__init__",
        )
    ]


def test_load_imports_nothing_from_runtime() -> None:
    """The load generator is shared by both runtimes; it depends on none of them."""
    wrong = [
        f"{file}:{line}: {name}"
        for file, line, name in _imports_under(PACKAGE / "sreforge" / "load")
        if _within(name, ("sreforge.runtime",))
    ]
    assert not wrong, "\n".join(wrong)


def test_kube_runtime_imports_nothing_from_the_local_one() -> None:
    """Two runtimes side by side: what both need lives outside runtime.local."""
    runtime = PACKAGE / "sreforge" / "runtime"
    wrong = [
        f"{file}:{line}: {name}"
        for file, line, name in _imports_under(runtime / "kube.py", runtime / "kube")
        if _within(name, ("sreforge.runtime.local", "sreforge.runtime.environment"))
    ]
    assert not wrong, "\n".join(wrong)


def test_import_check_resolves_relative_imports() -> None:
    """`from ..local import X` in runtime/kube/render.py is sreforge.runtime.local."""
    tree = ast.parse("from ..local import SAMPLED_PHASES\nfrom . import render\n")
    names = {n for _, n in imported_modules(tree, "sreforge.runtime.kube.render", package=False)}
    assert "sreforge.runtime.local" in names
    assert "sreforge.runtime.kube.render" in names
    tree = ast.parse("from .local import SAMPLED_PHASES\n")
    names = {n for _, n in imported_modules(tree, "sreforge.runtime", package=True)}
    assert "sreforge.runtime.local" in names


def test_test_modules_have_unique_basenames() -> None:
    """tests/ has no packages (no __init__.py): pytest imports each test module by its
    basename, and two files of one name stop the whole collection ("import file
    mismatch"), which CI only sees on a fresh clone."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes
