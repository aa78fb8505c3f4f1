"""hack/images.sh builds a service image with no registry and hands images to containerd.

Real parts: Debian's Docker engine, which the script starts (its own containerd, no
bridge, no iptables), the debootstrap base (cached under SREFORGE_IMAGES_DIR: the first
run takes a minute or two, a warm one seconds), and a containerd this test starts on its
own socket for `load`. Needs root, docker.io, containerd, debootstrap; `load` also needs
gcc, umoci and the k8s.io/kubernetes module source of hack/k8s-tools.sh (the pause image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.kubeenv import wait_for

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "images.sh"
PREFIX = os.environ.get("SREFORGE_IMAGE_PREFIX", "sreforge/")
IMAGES_DIR = Path(
    os.environ.get("SREFORGE_IMAGES_DIR", Path.home() / ".cache" / "sreforge" / "images")
)
CATALOG = f"{PREFIX}catalog:healthy"
BUILD_TIMEOUT = 900  # a cold cache: debootstrap, the engine's import, pip from PyPI


def containerd_name(ref: str) -> str:
    """containerd's name of a Docker reference: docker.io/ made explicit."""
    first = ref.split("/", 1)[0]
    return ref if "." in first or ":" in first or first == "localhost" else f"docker.io/{ref}"


def run_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def docker_env() -> Iterator[dict[str, str]]:
    """The script's engine, left running for the module (and stopped after it unless it
    was running before); the environment that points `docker` at it."""
    missing = [t for t in ("dockerd", "containerd", "debootstrap", "docker") if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {' '.join(missing)} (bash scripts/setup.sh installs them)")
    if os.geteuid() != 0:
        pytest.skip("hack/images.sh runs dockerd and debootstrap: needs root")
    was_running = run_script("engine", "status").returncode == 0
    started = run_script("engine", "start")
    assert started.returncode == 0, started.stderr
    host = started.stdout.strip().removeprefix("DOCKER_HOST=")
    assert host.startswith("unix://"), started.stdout
    try:
        yield {**os.environ, "DOCKER_HOST": host}
    finally:
        if not was_running:
            stopped = run_script("engine", "stop")
            assert stopped.returncode == 0, stopped.stderr


def docker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            body: bytes = resp.read()
            return body
    except OSError:
        return None


def test_build_a_service_image_and_run_it_read_only(docker_env: dict[str, str]) -> None:
    res = run_script("build", CATALOG, timeout=BUILD_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{CATALOG}: " in res.stderr  # its progress line: built, or up to date
    inspect = docker(docker_env, "image", "inspect", CATALOG)
    assert inspect.returncode == 0, inspect.stderr
    config = json.loads(inspect.stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["python", "-m", "catalog"]
    port = free_port()
    run = docker(
        docker_env,
        *("run", "-d", "--rm", "--read-only", "--network", "host", "--cap-drop", "ALL"),
        *("-e", f"PORT={port}", "-e", "HOST=127.0.0.1", CATALOG),
    )
    assert run.returncode == 0, run.stderr
    container = run.stdout.strip()
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_for("the catalog's /healthz", lambda: get(f"{base}/healthz"), 60) == b"ok"
        # the first page opens the database: on a busy machine it may take longer than one
        # request's 2 s timeout (seen once under a parallel kube suite)
        product = json.loads(wait_for("product 7", lambda: get(f"{base}/products/7"), 30))
        assert product["id"] == 7
        assert product["top_reviews"], "the image carries the seeded database"
    finally:
        logs = docker(docker_env, "logs", container)
        docker(docker_env, "rm", "-f", container)
    assert "Traceback" not in logs.stdout + logs.stderr


@pytest.fixture
def containerd_sock(tmp_path: Path) -> Iterator[Path]:
    """A containerd of this test's own: its root, state and socket under tmp_path."""
    if not shutil.which("ctr"):
        pytest.skip("ctr is not installed (Debian's containerd package)")
    run = tmp_path / "run"
    run.mkdir()
    sock = run / "containerd.sock"
    conf = tmp_path / "containerd.toml"
    conf.write_text(
        "version = 2\n"
        f'root = "{tmp_path / "root"}"\nstate = "{run / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{tmp_path / "opt"}"\n',
        encoding="utf-8",
    )
    with (tmp_path / "containerd.log").open("wb") as log:
        proc = subprocess.Popen(["containerd", "--config", str(conf)], stdout=log, stderr=log)
    try:
        wait_for("containerd's socket", lambda: sock.is_socket() or proc.poll() is not None, 20)
        assert proc.poll() is None, (tmp_path / "containerd.log").read_text()[-2000:]
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stamps = hashlib.sha256(str(sock).encode()).hexdigest()[:10]
        shutil.rmtree(IMAGES_DIR / "loaded" / stamps, ignore_errors=True)


def test_load_imports_once_into_containerd(
    docker_env: dict[str, str], containerd_sock: Path
) -> None:
    del docker_env  # the engine the image is in
    names = run_script("list").stdout.split()
    pause = next(n for n in names if n.startswith(f"{PREFIX}pause:"))
    tools = Path(
        os.environ.get("SREFORGE_TOOLS_DIR", Path.home() / ".cache" / "sreforge" / "tools")
    )
    if not any((tools / ".gomodcache" / "k8s.io").glob("kubernetes@*/build/pause/linux/pause.c")):
        pytest.skip("no k8s.io/kubernetes module source for pause.c: bash hack/k8s-tools.sh")
    built = run_script("build", CATALOG, timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-3000:]

    first = run_script("load", "--address", str(containerd_sock), CATALOG, pause, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "load: 2 imported, 0 up to date" in first.stderr
    listed = subprocess.run(
        ["ctr", "-a", str(containerd_sock), "-n", "k8s.io", "images", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert containerd_name(CATALOG) in listed
    assert containerd_name(pause) in listed

    again = run_script("load", "--address", str(containerd_sock), CATALOG, pause)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "load: 0 imported, 2 up to date" in again.stderr
