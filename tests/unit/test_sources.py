"""Fetching a third-party service under test: pinned by version and sha256, unpacked whole
or not at all. The sdists here are made by the test and served by a real HTTP server on
127.0.0.1 (the registry is the one network boundary; the real Kinto is fetched by
scripts/setup.sh and checked in tests/integration/test_kinto_source.py)."""

from __future__ import annotations

import hashlib
import http.server
import io
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sreforge import cli
from sreforge.api.source import SourceSpec
from sreforge.runtime import sources

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "toyshop"
version = "1.2.0"
"""


def _sdist(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


GOOD = {
    "toyshop-1.2.0/pyproject.toml": PYPROJECT.encode(),
    "toyshop-1.2.0/toyshop/__init__.py": b"from importlib.metadata import version\n"
    b"__version__ = version('toyshop')\n",
    "toyshop-1.2.0/tests/test_it.py": b"def test_it():\n    assert True\n",
}


class _Registry:
    """A real HTTP server on 127.0.0.1 serving sdists by path, counting requests."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests = 0
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests += 1
                body = registry.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write(body or b"not found")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def registry() -> Iterator[_Registry]:
    reg = _Registry()
    thread = threading.Thread(target=reg.server.serve_forever, daemon=True)
    thread.start()
    yield reg
    reg.server.shutdown()
    reg.server.server_close()


def _source(tmp: Path, registry: _Registry, sdist: bytes, *, sha: str | None = None) -> Path:
    registry.files["/p/toyshop-1.2.0.tar.gz"] = sdist
    directory = tmp / "substrate" / "toyshop"
    directory.mkdir(parents=True)
    (directory / "source.toml").write_text(
        'name = "toyshop"\nversion = "1.2.0"\nlicense = "MIT"\n'
        # https only in real specs; the test's registry is plain http on loopback
        f'url = "https://example.invalid/p/toyshop-1.2.0.tar.gz"\n'
        f'sha256 = "{sha or hashlib.sha256(sdist).hexdigest()}"\n'
    )
    (directory / "requirements.txt").write_text("# nothing beyond the standard library\n")
    return directory


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch, registry: _Registry) -> None:
    """The spec's https URL is served by the test's registry (same path)."""
    real = sources._download

    def download(url: str, dest: Path, label: str) -> None:
        real(url.replace("https://example.invalid", registry.base), dest, label)

    monkeypatch.setattr(sources, "_download", download)


def _left(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "sources").iterdir()) if cache.exists() else []


@pytest.mark.usefixtures("loopback")
def test_a_pinned_sdist_is_fetched_whole_once_and_runs_from_its_tree(
    tmp_path: Path, registry: _Registry
) -> None:
    directory = _source(tmp_path, registry, _sdist(GOOD))
    said: list[str] = []
    fetched = sources.fetch(directory, cache=tmp_path / "cache", say=said.append)
    assert (fetched.tree / "tests" / "test_it.py").is_file()
    assert (fetched.home / "complete").is_file()
    assert _left(tmp_path / "cache") == ["toyshop-1.2.0"]  # no staging left behind
    assert any("sha256 verified, 3 files unpacked (MIT)" in line for line in said)
    # the venv has the project's metadata and not its code: the tree is what runs
    site = next(fetched.home.glob("venv/lib/python*/site-packages"))
    assert not (site / "toyshop").exists()
    version = subprocess.run(
        [str(fetched.python), "-c", "import toyshop; print(toyshop.__version__, toyshop.__file__)"],
        cwd=fetched.tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert version == ["1.2.0", str(fetched.tree / "toyshop" / "__init__.py")]
    before = registry.requests
    assert sources.fetch(directory, cache=tmp_path / "cache", say=said.append).home == fetched.home
    assert registry.requests == before  # already whole: not fetched again


@pytest.mark.usefixtures("loopback")
def test_a_checksum_mismatch_is_refused_and_nothing_is_unpacked(
    tmp_path: Path, registry: _Registry
) -> None:
    directory = _source(tmp_path, registry, _sdist(GOOD), sha="0" * 64)
    with pytest.raises(sources.SourceError) as err:
        sources.fetch(directory, cache=tmp_path / "cache", say=lambda _: None)
    text = str(err.value)
    assert text.startswith("toyshop 1.2.0: the sdist's sha256 is ")
    assert "refused, nothing unpacked" in text
    assert _left(tmp_path / "cache") == []


@pytest.mark.usefixtures("loopback")
@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({**GOOD, "toyshop-1.2.0/../evil.py": b"x"}, "outside its toyshop-1.2.0/ folder"),
        ({**GOOD, "elsewhere/x.py": b"x"}, "outside its toyshop-1.2.0/ folder: elsewhere/x.py"),
        (
            {k: v for k, v in GOOD.items() if "/tests/" not in k},
            "has no test suite at tests/",
        ),
    ],
    ids=["dot-dot", "second-folder", "no-tests"],
)
def test_a_bad_sdist_is_refused_with_the_package_and_version(
    tmp_path: Path, registry: _Registry, members: dict[str, bytes], message: str
) -> None:
    directory = _source(tmp_path, registry, _sdist(members))
    with pytest.raises(sources.SourceError, match=r"^toyshop 1\.2\.0: ") as err:
        sources.fetch(directory, cache=tmp_path / "cache", say=lambda _: None)
    assert message in str(err.value)
    assert _left(tmp_path / "cache") == []


def test_an_unreachable_sdist_names_the_package_version_and_url(tmp_path: Path) -> None:
    directory = tmp_path / "substrate" / "toyshop"
    directory.mkdir(parents=True)
    (directory / "requirements.txt").write_text("")
    (directory / "source.toml").write_text(
        'name = "toyshop"\nversion = "1.2.0"\nlicense = "MIT"\n'
        'url = "https://127.0.0.1:9/p/toyshop-1.2.0.tar.gz"\n'  # the discard port: closed
        f'sha256 = "{"a" * 64}"\n'
    )
    with pytest.raises(sources.SourceError, match=r"^toyshop 1.2.0: cannot fetch https://127"):
        sources.fetch(directory, cache=tmp_path / "cache", say=lambda _: None)
    assert _left(tmp_path / "cache") == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("sha256 = ", "sha256 = 'abc' #"), "sha256: String should match pattern"),
        (("toyshop-1.2.0.tar.gz", "toyshop-1.3.0.tar.gz"), "url: Value error, url must end with"),
        (('license = "MIT"\n', ""), "license: Field required"),
    ],
)
def test_a_bad_source_toml_names_the_file_and_field(
    tmp_path: Path, registry: _Registry, edit: tuple[str, str], message: str
) -> None:
    directory = _source(tmp_path, registry, _sdist(GOOD))
    toml = directory / "source.toml"
    toml.write_text(toml.read_text().replace(*edit, 1))
    with pytest.raises(sources.SourceError, match=r"source\.toml: ") as err:
        sources.load(directory)
    assert message in str(err.value)


def test_an_unpinned_requirement_is_refused_before_anything_is_fetched(
    tmp_path: Path, registry: _Registry
) -> None:
    directory = _source(tmp_path, registry, _sdist(GOOD))
    (directory / "requirements.txt").write_text("waitress==3.0.2\npyramid>=2\nbcrypt\n")
    with pytest.raises(
        sources.SourceError, match=r"must be pinned as name==version, not: pyramid>=2, bcrypt"
    ):
        sources.fetch(directory, cache=tmp_path / "cache", say=lambda _: None)
    assert registry.requests == 0


def _with_sdists(tmp: Path, registry: _Registry, requirements: str, sdists: str) -> Path:
    """A source whose requirements are `requirements`, with `sdists = [...]` appended."""
    directory = _source(tmp, registry, _sdist(GOOD))
    (directory / "requirements.txt").write_text(requirements)
    toml = directory / "source.toml"
    toml.write_text(toml.read_text() + f"sdists = {sdists}\n")
    return directory


def test_a_requirement_without_a_wheel_is_built_from_its_sdist_only_when_named(
    tmp_path: Path, registry: _Registry
) -> None:
    directory = _with_sdists(
        tmp_path, registry, "debts==0.5\nFlask_Mail==0.10.0\n", '["debts", "flask-mail"]'
    )
    spec = sources.load(directory)
    plain = spec.model_copy(update={"sdists": []})

    def requirements_step(s: SourceSpec) -> list[str]:
        steps = sources.install_steps(
            s, tmp_path / "venv", directory / "requirements.txt", tmp_path / "toyshop.tar.gz"
        )
        assert "--no-binary" not in steps[-1]  # the project itself: no exception applies
        return next(step for step in steps if "-r" in step)

    wheels = requirements_step(spec)
    # every other requirement stays wheel-only; the named ones are the exceptions
    assert wheels[wheels.index("--only-binary") + 1] == ":all:"
    named = [wheels[i + 1] for i, a in enumerate(wheels) if a == "--no-binary"]
    assert named == ["debts", "flask-mail"]
    assert "--no-binary" not in requirements_step(plain)
    # a copy fetched before the exception was declared is not taken for this one
    wanted = (directory / "requirements.txt").read_text()
    assert sources.Fetched(spec).stamp(wanted) != sources.Fetched(plain).stamp(wanted)


def test_an_sdist_exception_that_is_not_a_pin_is_refused(
    tmp_path: Path, registry: _Registry
) -> None:
    directory = _with_sdists(tmp_path, registry, "debts==0.5\n", '["debts", "qrcode"]')
    with pytest.raises(
        sources.SourceError, match=r"source\.toml: sdists: qrcode is not pinned in requirements"
    ):
        sources.load(directory)


def test_the_cli_lists_the_repositorys_sources_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["sources", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("ihatemoney   7.2.1      BSD-3-Clause")
    assert lines[1].startswith("kinto        26.5.0     Apache-2.0")
    assert cli.main(["sources", "fetch", "nope"]) == cli.EXIT_ERROR
    assert "no source named nope (known: ihatemoney, kinto)" in capsys.readouterr().err
