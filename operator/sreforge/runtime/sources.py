"""Fetching third-party services under test: pinned, checksummed, never committed.

`substrate/<name>/source.toml` (sreforge.api.source.SourceSpec) names a release sdist and
its sha256; `fetch` downloads it, refuses it unless the checksum matches, unpacks it with
tarfile's `data` filter (no absolute paths, no `..`, no links out, no devices), checks that
the project's own test suite is there, and installs the pinned requirements beside
source.toml into a virtual environment of its own. Everything is built in a staging
folder and renamed into place last, so a fetch that fails half-way leaves nothing that
could be used: the cache holds a source only when it is whole.

Layout: `<cache>/sources/<name>-<version>/` with `tree/` (the sdist's files), `venv/`
(run its Python as `venv/bin/python`, always with `-m`: console scripts keep the staging
path in their shebangs) and `complete` (the sha256 and the requirements' digest).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from sreforge.api.scenario import Scenario
from sreforge.api.source import SourceSpec, normalise, pinned_lines, pinned_names, unpinned
from sreforge.errors import SreforgeError
from sreforge.runtime import ci

FILE = "source.toml"
DOWNLOAD_TIMEOUT_SECONDS = 60
INSTALL_TIMEOUT_SECONDS = 900


class SourceError(SreforgeError, RuntimeError):
    """A source that cannot be used; the message names the package and version (or the
    file and field) and the problem."""


def cache_root() -> Path:
    return Path(os.environ.get("SREFORGE_CACHE", Path.home() / ".cache" / "sreforge"))


def load(directory: Path) -> SourceSpec:
    """The spec in `directory/source.toml`; errors name the file and the field."""
    file = directory / FILE
    try:
        data = tomllib.loads(file.read_text("utf-8"))
    except FileNotFoundError as exc:
        raise SourceError(f"{file}: no such file") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(f"{file}: not valid TOML: {exc}") from exc
    try:
        spec = SourceSpec.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{file}: {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        ]
        raise SourceError("\n".join(lines)) from exc
    requirements = directory / spec.requirements
    if not requirements.is_file():
        raise SourceError(f"{file}: requirements: {requirements} is missing")
    text = requirements.read_text("utf-8")
    bad = unpinned(text)
    if bad:
        raise SourceError(
            f"{requirements}: every requirement must be pinned as name==version, not: "
            + ", ".join(bad)
        )
    pinned = pinned_names(text)
    stray = [name for name in spec.sdists if normalise(name) not in pinned]
    if stray:
        raise SourceError(
            f"{file}: sdists: {', '.join(stray)} is not pinned in {spec.requirements}"
        )
    return spec


def discover(repo_root: Path) -> list[tuple[Path, SourceSpec]]:
    """Every fetched source under `repo_root/substrate`, by directory name."""
    return [(f.parent, load(f.parent)) for f in sorted((repo_root / "substrate").glob(f"*/{FILE}"))]


class Fetched:
    """Where a source lives in the cache."""

    def __init__(self, spec: SourceSpec, cache: Path | None = None) -> None:
        self.spec = spec
        self.home = (cache or cache_root()) / "sources" / f"{spec.name}-{spec.version}"

    @property
    def tree(self) -> Path:
        return self.home / "tree"

    @property
    def python(self) -> Path:
        return self.home / "venv" / "bin" / "python"

    def stamp(self, requirements: str) -> str:
        digest = hashlib.sha256(requirements.encode()).hexdigest()
        built = "".join(f"built-from-sdist {n}\n" for n in sorted(self.spec.sdists))
        return f"sdist {self.spec.sha256}\nrequirements {digest}\n{built}"

    def ready(self, requirements: str) -> bool:
        marker = self.home / "complete"
        return marker.is_file() and marker.read_text() == self.stamp(requirements)


def _download(url: str, dest: Path, label: str) -> None:
    try:
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response,
            dest.open("wb") as out,
        ):
            shutil.copyfileobj(response, out, 1 << 16)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SourceError(f"{label}: cannot fetch {url}: {exc}") from exc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def _unpack(sdist: Path, tree: Path, spec: SourceSpec) -> int:
    """The sdist's files into `tree` (its one top-level folder stripped); the count."""
    top = {f"{spec.name}-{spec.version}", f"{spec.name.replace('-', '_')}-{spec.version}"}
    out = tree.parent / "unpacked"
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = tar.getmembers()
            outside = sorted(
                {m.name for m in members if posixpath.normpath(m.name).split("/")[0] not in top}
            )
            if outside:
                raise SourceError(
                    f"{spec.label}: the sdist has files outside its {sorted(top)[0]}/ folder: "
                    + ", ".join(outside[:5])
                )
            tar.extractall(out, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"{spec.label}: the sdist cannot be unpacked: {exc}") from exc
    (folder,) = [p for p in out.iterdir() if p.name in top]
    folder.rename(tree)
    return sum(1 for m in members if m.isfile())


def install_steps(spec: SourceSpec, venv: Path, requirements: Path, sdist: Path) -> list[list[str]]:
    """The commands that make a source's venv: its pinned requirements from wheels (those
    named in `sdists` from their sdist), then the project itself, for its metadata."""
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    wheels = [
        *pip,
        "--quiet",
        "--no-deps",  # the file pins the whole closure: nothing unpinned slips in
        "--only-binary",
        ":all:",
    ]
    for name in spec.sdists:
        wheels += ["--no-binary", name]  # pip: the named package's own rule wins over :all:
    steps = [
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        [*wheels, "-r", str(requirements)],
        # the project's own metadata (its version, entry points), which it reads at import
        [*pip, "--quiet", "--no-deps", str(sdist)],
    ]
    if not pinned_lines(requirements.read_text("utf-8")):
        del steps[1]  # nothing to install but the project (pip refuses an empty file)
    return steps


def _install(fetched: Fetched, staging: Path, requirements: Path, sdist: Path) -> None:
    venv = staging / "venv"
    steps = install_steps(fetched.spec, venv, requirements, sdist)
    for argv in steps:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"{fetched.spec.label}: `{' '.join(argv[:4])}` timed out") from exc
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise SourceError(
                f"{fetched.spec.label}: `{' '.join(argv[-3:])}` failed "
                f"(exit {done.returncode}):\n{tail}"
            )
    # ...but never its code: the code that runs is the tree under test (a build's copy,
    # patched or not), first on sys.path as the working directory of `python -m`.
    for rec in venv.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        if not rec.parent.name.lower().startswith(fetched.spec.name.replace("-", "_") + "-"):
            continue
        site = rec.parent.parent
        tops = set()
        for line in rec.read_text().splitlines():
            path = site / line.split(",", 1)[0]
            top = path.relative_to(site).parts[0]
            if top.endswith(".dist-info") or top == "..":
                continue
            tops.add(top)
            if path.is_file():
                path.unlink()
        for top in tops:
            if (site / top).is_dir():
                shutil.rmtree(site / top)  # what is left is compiled caches and folders


def fetch(
    directory: Path,
    *,
    cache: Path | None = None,
    say: Callable[[str], None] = print,
) -> Fetched:
    """The source described in `directory/source.toml`, fetched into the cache unless it
    is already there whole. Raises SourceError (nothing half-made is left to be used)."""
    spec = load(directory)
    requirements = directory / spec.requirements
    fetched = Fetched(spec, cache)
    wanted = requirements.read_text("utf-8")
    if fetched.ready(wanted):
        return fetched
    fetched.home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{fetched.home.name}-", dir=fetched.home.parent))
    try:
        sdist = staging / spec.url.rsplit("/", 1)[1]
        say(f"sources: {spec.label}: downloading {spec.url}")
        _download(spec.url, sdist, spec.label)
        got = _sha256(sdist)
        if got != spec.sha256:
            raise SourceError(
                f"{spec.label}: the sdist's sha256 is {got}, but {directory / FILE} pins "
                f"{spec.sha256}: refused, nothing unpacked"
            )
        files = _unpack(sdist, staging / "tree", spec)
        if not (staging / "tree" / spec.tests).is_dir():
            raise SourceError(
                f"{spec.label}: the sdist has no test suite at {spec.tests}/ (source.toml: tests)"
            )
        say(f"sources: {spec.label}: sha256 verified, {files} files unpacked ({spec.license})")
        n = len(pinned_lines(wanted))
        say(f"sources: {spec.label}: installing {n} pinned requirements into its own venv")
        _install(fetched, staging, requirements, sdist)
        sdist.unlink()
        (staging / "complete").write_text(fetched.stamp(wanted))
        if fetched.home.exists():  # an older or unfinished copy: never used, replaced
            shutil.rmtree(fetched.home)
        staging.rename(fetched.home)
        say(f"sources: {spec.label}: ready at {fetched.home}")
        return fetched
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _in_cache(source: Path) -> tuple[SourceSpec, Fetched]:
    """The spec at `source` and where it is fetched; SourceError when it is not."""
    spec = load(source)
    fetched = Fetched(spec)
    if not fetched.ready((source / spec.requirements).read_text("utf-8")):
        raise SourceError(
            f"{spec.label} is not fetched: run `sreforge sources fetch {spec.name}` "
            "(bash scripts/setup.sh does)"
        )
    return spec, fetched


def copy_healthy(source: Path, dest: Path) -> str | None:
    """Copy a service's healthy tree to `dest`: the committed tree at `source`, or, when
    `source` holds a source.toml, the fetched release with the deployment's overlay on
    top. Returns the interpreter `python` means for it (None: the harness's own).
    Raises SourceError when a fetched source is not in the cache."""
    if not (source / FILE).is_file():
        if not source.is_dir():
            raise SourceError(f"service source {source} does not exist")
        ci.copy_tree(source, dest)
        return None
    spec, fetched = _in_cache(source)
    ci.copy_tree(fetched.tree, dest)
    if spec.overlay:
        shutil.copytree(source / spec.overlay, dest, dirs_exist_ok=True)
    return str(fetched.python)


def scenario_trees(
    scenario: Scenario, repo_root: Path, healthy: Path, regressed: Path
) -> str | None:
    """The scenario's service twice: its healthy tree at `healthy` (copy_healthy) and at
    `regressed` the same with the scenario's regression applied. Returns the interpreter
    `python` means for them. Raises SourceError when the source is missing or the
    regression does not apply (the message names the patch)."""
    python = copy_healthy(scenario.source_path(repo_root), healthy)
    ci.copy_tree(healthy, regressed)
    try:
        ci.apply_patch(regressed, scenario.regression_path.read_text("utf-8"))
    except ci.PatchRejected as exc:
        raise SourceError(f"{scenario.regression_path}: {exc}") from exc
    return python


def build_context(source: Path, dest: Path) -> SourceSpec:
    """A Docker build context for a fetched source's image (hack/images/source.Dockerfile)
    at `dest`: `tree/` (the release with the deployment's overlay, as copy_healthy makes
    it), `requirements.txt` (the pinned closure the image installs) and `dist-info/` (the
    project's own metadata from the fetched venv: its entry points, without its code, as
    the local venv has it). Files whose bytes did not change are left alone, so Docker's
    layer cache holds. Raises SourceError when the source is not fetched."""
    spec, fetched = _in_cache(source)
    prefix = spec.name.replace("-", "_").lower() + "-"
    found = [
        p
        for p in fetched.home.glob("venv/lib/python*/site-packages/*.dist-info")
        if p.name.lower().startswith(prefix)
    ]
    if len(found) != 1:
        raise SourceError(f"{spec.label}: its venv holds {len(found)} {prefix}*.dist-info")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".context-", dir=dest.parent))
    try:
        copy_healthy(source, staging / "tree")
        skip = shutil.ignore_patterns("RECORD", "direct_url.json")  # the staging's paths
        shutil.copytree(found[0], staging / "dist-info", ignore=skip)
        shutil.copy2(source / spec.requirements, staging / "requirements.txt")
        (staging / "sdists").write_text("".join(f"{n}\n" for n in spec.sdists))
        _sync_tree(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return spec


def _sync_tree(src: Path, dest: Path) -> None:
    """Make `dest` hold what `src` holds: changed or new files copied, others removed."""
    dest.mkdir(parents=True, exist_ok=True)
    want = {p.relative_to(src) for p in src.rglob("*")}
    for p in sorted(dest.rglob("*"), reverse=True):
        rel = p.relative_to(dest)
        if rel in want and p.is_dir() == (src / rel).is_dir():
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    for rel in sorted(want):
        s, d = src / rel, dest / rel
        if s.is_dir():
            d.mkdir(exist_ok=True)
        elif not d.is_file() or d.read_bytes() != s.read_bytes():
            shutil.copy2(s, d)
