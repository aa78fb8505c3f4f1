"""A tiny target service for the generator's tests and benchmark (not a scenario service).

Routes (``{id}`` an integer):

* ``/fast/{id}``: 200 ``{"id": id}`` at once
* ``/slow/{id}``: the same after ``slow_ms`` (300 ms by default)
* ``/sleep/{ms}/{id}``: the same after ``ms`` milliseconds (asyncio.sleep)
* ``/wrong/{id}``: 200 ``{"id": id + 1}``
* ``/error/{id}``: 500
* ``/item/{id}``: 200 ``{"id": id, "name": "item <id>"}``; with ``--lie`` (``lie=True``)
  a made-up ``{"id": id, "name": "anything"}``: right status, right id, wrong body
* ``/_count``: ``{"requests": N}``, the requests served by the routes above
* ``/healthz``: 200

``python -m sreforge.load.echo --listen 127.0.0.1:0 --port-file FILE`` runs it alone;
it exits on SIGTERM/SIGINT, or after ``--max-seconds`` (600 by default) in any case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from aiohttp import web

_COUNT: web.AppKey[list[int]] = web.AppKey("count", list)
_SLOW: web.AppKey[float] = web.AppKey("slow", float)
_LIE: web.AppKey[bool] = web.AppKey("lie", bool)


def _echo(ident: int) -> web.Response:
    return web.Response(body=b'{"id": %d}' % ident, content_type="application/json")


def build_echo_app(slow_ms: float = 300.0, *, lie: bool = False) -> web.Application:
    app = web.Application()
    app[_COUNT] = [0]
    app[_SLOW] = slow_ms / 1000.0
    app[_LIE] = lie

    def ident(request: web.Request) -> int:
        request.app[_COUNT][0] += 1
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise web.HTTPBadRequest(text="id must be an integer") from None

    async def fast(request: web.Request) -> web.Response:
        return _echo(ident(request))

    async def slow(request: web.Request) -> web.Response:
        i = ident(request)
        await asyncio.sleep(request.app[_SLOW])
        return _echo(i)

    async def sleep(request: web.Request) -> web.Response:
        i = ident(request)
        await asyncio.sleep(int(request.match_info["ms"]) / 1000.0)
        return _echo(i)

    async def wrong(request: web.Request) -> web.Response:
        return _echo(ident(request) + 1)

    async def item(request: web.Request) -> web.Response:
        i = ident(request)
        name = "anything" if request.app[_LIE] else f"item {i}"
        return web.json_response({"id": i, "name": name})

    async def error(request: web.Request) -> web.Response:
        ident(request)
        return web.Response(status=500, text="injected failure")

    async def count(request: web.Request) -> web.Response:
        return web.Response(
            text=json.dumps({"requests": request.app[_COUNT][0]}), content_type="application/json"
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    routes = (
        ("/fast", fast),
        ("/slow", slow),
        ("/wrong", wrong),
        ("/error", error),
        ("/item", item),
    )
    for prefix, handler in routes:
        app.router.add_route("*", prefix + "/{id}", handler)
    app.router.add_route("*", "/sleep/{ms:\\d{1,6}}/{id}", sleep)
    app.router.add_get("/_count", count)
    app.router.add_get("/healthz", healthz)
    return app


async def start_echo(
    host: str = "127.0.0.1", port: int = 0, slow_ms: float = 300.0, *, lie: bool = False
) -> tuple[web.AppRunner, int]:
    """Start the echo service in the running loop; returns (runner, bound port)."""
    runner = web.AppRunner(
        build_echo_app(slow_ms, lie=lie),
        access_log=None,
        handle_signals=False,
        shutdown_timeout=0.5,
    )
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner, int(runner.addresses[0][1])


async def _amain(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    runner, bound = await start_echo(host or "127.0.0.1", int(port), args.slow_ms, lie=args.lie)
    if args.port_file is not None:
        tmp = args.port_file.with_name(f".{args.port_file.name}.tmp")
        tmp.write_text(f"{bound}\n", encoding="ascii")
        tmp.replace(args.port_file)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout=args.max_seconds)
    await runner.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sreforge.load.echo")
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--port-file", type=Path)
    p.add_argument("--slow-ms", type=float, default=300.0)
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--lie", action="store_true", help="/item/{id} answers made-up bodies")
    return asyncio.run(_amain(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
