"""The generator's servers: what the network may see, and what only the harness may use.

* The TCP listener (:func:`start_server`) serves what Prometheus and a probe need and
  nothing else: ``GET /metrics`` and a ``GET /healthz`` that answers ``{"ok": true}``.
* The control socket (:func:`start_control`), a Unix-domain socket created with mode 0600
  in a directory of the harness's, serves ``POST /target`` (re-point the load) and
  ``GET /stats`` (the run's counters and its target). Whatever changes or reveals the run
  goes there: a service under test can open any TCP port on the host, but not a socket
  file it cannot see. Without a control socket there is no control surface at all.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sreforge.load.generator import LoadGenerator, TargetError

GENERATOR_KEY: web.AppKey[LoadGenerator] = web.AppKey("generator", LoadGenerator)
#: The control socket's permissions: the harness's user only.
CONTROL_SOCKET_MODE = 0o600
_BACKLOG = 16


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, sort_keys=True), status=status, content_type="application/json"
    )


async def _metrics(request: web.Request) -> web.Response:
    gen = request.app[GENERATOR_KEY]
    body = generate_latest(gen.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(_: web.Request) -> web.Response:
    # says it is up and nothing else: no name, no target, no state of the run
    return _json({"ok": True})


async def _stats(request: web.Request) -> web.Response:
    return _json(request.app[GENERATOR_KEY].stats())


async def _target(request: web.Request) -> web.Response:
    gen = request.app[GENERATOR_KEY]
    try:
        doc = await request.json()
    except (ValueError, UnicodeDecodeError):
        return _json({"error": 'body must be JSON {"url": "http://HOST:PORT"}'}, status=400)
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str):
        return _json({"error": 'body must be JSON {"url": "http://HOST:PORT"}'}, status=400)
    previous = gen.target
    try:
        target = gen.set_target(url)
    except TargetError as exc:
        return _json({"error": str(exc)}, status=400)
    return _json({"target": target, "previous": previous})


def build_metrics_app(gen: LoadGenerator) -> web.Application:
    """The TCP listener's routes: ``GET /metrics`` and ``GET /healthz``, no more."""
    app = web.Application()
    app[GENERATOR_KEY] = gen
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    return app


def build_control_app(gen: LoadGenerator) -> web.Application:
    """The control socket's routes: ``POST /target`` and ``GET /stats``."""
    app = web.Application()
    app[GENERATOR_KEY] = gen
    app.router.add_get("/stats", _stats)
    app.router.add_post("/target", _target)
    return app


def _runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)


async def start_server(
    gen: LoadGenerator, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Serve :func:`build_metrics_app` on host:port (0 = an ephemeral port); returns the
    runner and the bound port. Stop it with ``await runner.cleanup()``.
    """
    runner = _runner(build_metrics_app(gen))
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    if not addresses:
        await runner.cleanup()
        raise RuntimeError(f"metrics server did not bind {host}:{port}")
    return runner, int(addresses[0][1])


def bind_control_socket(path: Path | str) -> socket.socket:
    """A Unix stream socket bound at ``path`` with mode 0600 from the moment it exists.

    ``web.UnixSite`` binds under the process umask, so the file would briefly carry wider
    permissions; binding here under umask 0177 leaves no such window. Nothing already at
    ``path`` is replaced (OSError): the caller picks a fresh path in its own directory.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o777 & ~CONTROL_SOCKET_MODE)
        try:
            sock.bind(os.fspath(path))
        finally:
            os.umask(old)
        Path(path).chmod(CONTROL_SOCKET_MODE)  # whatever the file system made of the umask
    except BaseException:
        sock.close()
        raise
    return sock


async def start_control(gen: LoadGenerator, path: Path | str) -> web.AppRunner:
    """Serve :func:`build_control_app` on a Unix socket at ``path`` (see
    :func:`bind_control_socket`); ``await runner.cleanup()`` stops it and removes the file.
    """
    path = Path(path)
    sock = bind_control_socket(path)
    app = build_control_app(gen)

    async def remove_socket(_: web.Application) -> None:
        path.unlink(missing_ok=True)

    app.on_cleanup.append(remove_socket)
    runner = _runner(app)
    try:
        await runner.setup()
        await web.SockSite(runner, sock, backlog=_BACKLOG).start()
    except BaseException:
        sock.close()
        await runner.cleanup()
        path.unlink(missing_ok=True)
        raise
    return runner
