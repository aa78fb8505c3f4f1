"""The kube-proxy part of the stand-in: one local TCP proxy per Service port.

Each proxy listens on 127.0.0.1 (a free port) and forwards every new connection to one
of the ready backends the stand-in reports for that Service at that moment (round
robin), so a rollout moves new connections to the new pods; an open connection stays
with its pod until either side closes it, as with kube-proxy. With no ready backend the
connection is closed at once (kube-proxy rejects it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

BUFFER = 65536
#: (namespace, service name, service port)
Key = tuple[str, str, int]


@dataclass
class _Proxy:
    key: Key
    server: asyncio.Server
    port: int
    rr: itertools.count[int] = field(default_factory=itertools.count)
    open: set[asyncio.StreamWriter] = field(default_factory=set)


class ServiceProxies:
    """All Service proxies, served by one asyncio loop in a thread of its own.

    ``backends(key)`` returns the local ports of the ready endpoints of a Service port;
    it is called on every new connection (from the loop thread).
    """

    def __init__(self, backends: Callable[[Key], list[int]]) -> None:
        self._backends = backends
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="standin-proxy", daemon=True
        )
        self._thread.start()
        self._proxies: dict[Key, _Proxy] = {}
        self._lock = threading.Lock()

    def ensure(self, key: Key) -> int:
        """The local port of the proxy of a Service port (started if new)."""
        with self._lock:
            if key in self._proxies:
                return self._proxies[key].port
            fut = asyncio.run_coroutine_threadsafe(self._start(key), self._loop)
            proxy = fut.result(timeout=10)
            self._proxies[key] = proxy
            return proxy.port

    def port(self, key: Key) -> int | None:
        with self._lock:
            proxy = self._proxies.get(key)
            return proxy.port if proxy else None

    def ports(self) -> dict[Key, int]:
        with self._lock:
            return {k: p.port for k, p in self._proxies.items()}

    def remove(self, key: Key) -> None:
        with self._lock:
            proxy = self._proxies.pop(key, None)
        if proxy is not None:
            asyncio.run_coroutine_threadsafe(self._close(proxy), self._loop).result(timeout=10)

    def close(self) -> None:
        for key in list(self.ports()):
            with contextlib.suppress(Exception):
                self.remove(key)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _cancel_all(self) -> None:
        """End the connections still open (their tasks), so none outlives the loop."""
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _close(self, proxy: _Proxy) -> None:
        proxy.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proxy.server.wait_closed(), timeout=2)

    async def _start(self, key: Key) -> _Proxy:
        holder: list[_Proxy] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._forward(holder[0], reader, writer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        holder.append(_Proxy(key, server, port))
        return holder[0]

    async def _forward(
        self, proxy: _Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        backends = self._backends(proxy.key)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        if backends:
            start = next(proxy.rr)
            for i in range(len(backends)):
                port = backends[(start + i) % len(backends)]
                with contextlib.suppress(OSError):
                    upstream = await asyncio.open_connection("127.0.0.1", port)
                    break
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        proxy.open.update((writer, up_writer))
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                proxy.open.discard(w)
                w.close()

    def drop_connections(self, key: Key) -> int:
        """Close every open connection of a proxy (a network fault, for tests)."""
        with self._lock:
            proxy = self._proxies.get(key)
        if proxy is None:
            return 0

        async def drop() -> int:
            writers = list(proxy.open)
            for w in writers:
                w.transport.abort()
            return len(writers)

        return asyncio.run_coroutine_threadsafe(drop(), self._loop).result(timeout=10)


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(BUFFER):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (OSError, RuntimeError):
        # the other side went away: close both directions
        dst.close()
