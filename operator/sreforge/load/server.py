"""The generator's own HTTP server: ``/metrics``, ``/stats``, ``POST /target``, ``/healthz``."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sreforge.load.generator import LoadGenerator, TargetError

GENERATOR_KEY: web.AppKey[LoadGenerator] = web.AppKey("generator", LoadGenerator)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, sort_keys=True), status=status, content_type="application/json"
    )


async def _metrics(request: web.Request) -> web.Response:
    gen = request.app[GENERATOR_KEY]
    body = generate_latest(gen.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _stats(request: web.Request) -> web.Response:
    return _json(request.app[GENERATOR_KEY].stats())


async def _healthz(request: web.Request) -> web.Response:
    gen = request.app[GENERATOR_KEY]
    return _json({"ok": True, "running": gen.running, "finished": gen.finished})


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


def build_app(gen: LoadGenerator) -> web.Application:
    app = web.Application()
    app[GENERATOR_KEY] = gen
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/healthz", _healthz)
    app.router.add_post("/target", _target)
    return app


async def start_server(
    gen: LoadGenerator, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Listen on host:port (0 = an ephemeral port); returns the runner and the bound port.

    Stop it with ``await runner.cleanup()``.
    """
    runner = web.AppRunner(
        build_app(gen), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    if not addresses:
        await runner.cleanup()
        raise RuntimeError(f"metrics server did not bind {host}:{port}")
    return runner, int(addresses[0][1])
