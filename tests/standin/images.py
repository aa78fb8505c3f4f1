"""Local trees standing for the images the tests use (what a Dockerfile would build).

``catalog_tree`` does what substrate/catalog/Dockerfile does: copy the service, apply
an optional SREFORGE_PATCH with ``git apply -p1`` and seed ``data/catalog.db``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .pods import Image

REPO_ROOT = Path(__file__).resolve().parents[2]
CATALOG_SOURCE = REPO_ROOT / "substrate" / "catalog"


def catalog_tree(dest: Path, patch: Path | None = None) -> Path:
    """A copy of substrate/catalog at dest, patched with ``patch`` if given, seeded."""
    shutil.copytree(
        CATALOG_SOURCE,
        dest,
        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "data"),
    )
    if patch is not None:
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-p1", str(patch)],
            cwd=dest,
            check=True,
            capture_output=True,
        )
    (dest / "data").mkdir()
    subprocess.run(
        [sys.executable, "-m", "catalog.seed", str(dest / "data" / "catalog.db")],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    return dest


def catalog_image(tree: Path) -> Image:
    """The catalog image (substrate/catalog/Dockerfile) with its files in ``tree``."""
    return Image(
        root=tree,
        path="/app",
        args=["python", "-m", "catalog"],
        env={
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOST": "0.0.0.0",
            "PORT": "8080",
            "DATA_DIR": "/app/data",
        },
    )


def operator_image(root: Path = REPO_ROOT) -> Image:
    """The operator image (root Dockerfile): /opt/sreforge holds the scenarios, so the
    repository root stands for it; ``python -m sreforge...`` is this interpreter's."""
    return Image(
        root=root,
        path="/opt/sreforge",
        command=[
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
            "--liveness=http://0.0.0.0:8080/healthz",
            "-m",
            "sreforge.handlers",
        ],
        env={"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"},
    )


def redis_image(root: Path) -> Image:
    """The redis image (hack/images/redis.Dockerfile): Debian's redis-server, no
    persistence, on the port the stand-in gives its containerPort (PORT, HOST)."""
    root.mkdir(parents=True, exist_ok=True)
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    script = f'exec {server} --port "$PORT" --bind "$HOST" --save "" --appendonly no'
    return Image(root=root, path="/tmp", command=["sh", "-c", script])
