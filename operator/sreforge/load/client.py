"""The harness's HTTP/1.1 client: visitors with their own connections, as users have.

A general-purpose client library sends its own fingerprint (its User-Agent, its header
set and order, its pooling), and a patched service could serve the fix to that
fingerprint alone. This client sends exactly the headers of the visitor it speaks for
(sreforge.load.identity), in that visitor's order, and nothing else.

Connections follow visitors: a new visitor opens a connection of its own and keeps it
alive for the requests of its visit (a geometric number, mean ``1 / new_connection_ratio``);
each request either comes from a new visitor (probability ``new_connection_ratio``) or
from an idle returning one. A kept-alive connection carries one visitor's requests only,
one at a time, as a browser's does. A reused connection that the server closed before
answering is retried once on a new one (browsers do the same for idempotent requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import zlib
from dataclasses import dataclass

from yarl import URL

from sreforge.load.identity import Visitor, draw_visitor

#: An idle kept-alive connection older than this is closed instead of reused.
IDLE_SECONDS = 10.0
#: At most this many idle connections are kept (the oldest is closed first).
MAX_IDLE = 64
_MAX_BODY = 16 * 2**20
_MAX_HEADERS = 100
_READ_LIMIT = 2**16


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.x (counted like a failed connection)."""


class _Closed(ProtocolError):
    """The connection closed before the answer began (a reused one may be retried)."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: int = 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class _Session:
    """One visitor and its connection."""

    visitor: Visitor
    origin: str
    remaining: int
    conn: _Conn | None = None
    idle_since: float = 0.0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Origin:
    """Where requests go: scheme, host, port, and the Host header's value."""

    def __init__(self, url: str) -> None:
        u = URL(url)
        if u.scheme not in ("http", "https") or not u.host:
            raise ValueError(f"not an http(s) origin: {url!r}")
        self.url = str(u.origin())
        self.host = u.host
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.tls = u.scheme == "https"
        default = (u.scheme == "https" and self.port == 443) or (
            u.scheme == "http" and self.port == 80
        )
        host = f"[{u.host}]" if ":" in u.host else u.host
        self.authority = host if default else f"{host}:{self.port}"


def _request_head(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    extra: list[tuple[str, str]] = []
    if body is not None:
        extra = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    placed = False
    for name, value in headers:
        lines.append(f"{name}: {value}")
        if extra and not placed and name.lower() == "accept":
            lines += [f"{n}: {v}" for n, v in extra]
            placed = True
    if extra and not placed:
        lines += [f"{n}: {v}" for n, v in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise ProtocolError("the answer ended inside its headers")
        if line in (b"\r\n", b"\n"):
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ProtocolError(f"not a header line: {line[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    raise ProtocolError("too many headers")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    size_total = 0
    while True:
        line = await reader.readline()
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
        if size == 0:
            await _read_headers(reader)  # trailers
            return b"".join(parts)
        size_total += size
        if size_total > _MAX_BODY:
            raise ProtocolError("body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _decode(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ProtocolError(f"bad {encoding} body: {exc}") from exc
    return body  # an encoding this client cannot undo: the body stays as sent


async def _exchange(
    conn: _Conn, method: str, head: bytes, body: bytes | None
) -> tuple[Response, bool]:
    """One request on ``conn``; returns the answer and whether the connection may be reused."""
    conn.writer.write(head + (body or b""))
    await conn.writer.drain()
    conn.requests += 1
    reader = conn.reader
    while True:
        line = await reader.readline()
        if not line:
            raise _Closed("the connection closed before the answer")
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
        version, status = parts[0], int(parts[1])
        headers = await _read_headers(reader)
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and other interim answers
        break
    keep = "close" not in headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        keep = "keep-alive" in headers.get("connection", "").lower()
    if method == "HEAD" or status in (204, 304):
        data = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        data = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise ProtocolError("bad Content-Length") from None
        if length < 0 or length > _MAX_BODY:
            raise ProtocolError(f"Content-Length {length} out of bounds")
        data = await reader.readexactly(length)
    else:
        data = await reader.read(_MAX_BODY)
        keep = False
    return Response(status, _decode(data, headers.get("content-encoding", ""))), keep


class ClientPool:
    """The visitors of one client process and their connections (see the module doc)."""

    def __init__(
        self,
        target: str,
        rng: random.Random,
        *,
        new_connection_ratio: float,
        idle_seconds: float = IDLE_SECONDS,
        max_idle: int = MAX_IDLE,
    ) -> None:
        self.origin = Origin(target)
        self._rng = rng
        self._p_new = new_connection_ratio
        self._idle: list[_Session] = []
        self._idle_seconds = idle_seconds
        self._max_idle = max_idle
        self._tls = ssl.create_default_context() if self.origin.tls else None
        self.connections_opened = 0
        self.requests_sent = 0

    def set_target(self, target: str) -> None:
        """New requests go to ``target``; idle connections to the old one are closed."""
        self.origin = Origin(target)
        self._tls = ssl.create_default_context() if self.origin.tls else None
        for s in self._idle:
            s.close()
        self._idle.clear()

    def _visit_length(self) -> int:
        p = self._p_new
        if p <= 0:
            return 1 << 30
        if p >= 1:
            return 1
        n = 1
        while self._rng.random() >= p:
            n += 1
        return n

    def _checkout(self, now: float) -> _Session:
        origin = self.origin.url
        fresh = [s for s in self._idle if now - s.idle_since <= self._idle_seconds]
        for s in self._idle:
            if s not in fresh:
                s.close()
        self._idle = fresh
        if self._idle and self._rng.random() >= self._p_new:
            session = self._idle.pop(self._rng.randrange(len(self._idle)))
            if session.origin == origin:
                return session
            session.close()
        return _Session(draw_visitor(self._rng), origin, self._visit_length())

    def _checkin(self, session: _Session, now: float, reusable: bool) -> None:
        session.remaining -= 1
        if not reusable or session.remaining <= 0 or session.origin != self.origin.url:
            session.close()
            return
        session.idle_since = now
        self._idle.append(session)
        if len(self._idle) > self._max_idle:
            self._idle.pop(0).close()

    async def _connect(self) -> _Conn:
        o = self.origin
        reader, writer = await asyncio.open_connection(
            o.host, o.port, ssl=self._tls, limit=_READ_LIMIT
        )
        self.connections_opened += 1
        return _Conn(reader, writer)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        seconds: float,
        *,
        authorization: str | None = None,
    ) -> Response:
        """``method path`` as the next visitor (with the API client's ``authorization``,
        if any); raises TimeoutError after ``seconds``, OSError (ProtocolError included)
        when no HTTP answer came."""
        loop = asyncio.get_running_loop()
        session = self._checkout(loop.time())
        reusable = False
        try:
            async with asyncio.timeout(seconds):
                headers = session.visitor.headers(self.origin.authority)
                if authorization is not None:
                    headers = [*headers, ("Authorization", authorization)]
                head = _request_head(method, path, headers, body)
                self.requests_sent += 1
                for attempt in (1, 2):
                    reused = session.conn is not None
                    if session.conn is None:
                        session.conn = await self._connect()
                    try:
                        response, reusable = await _exchange(session.conn, method, head, body)
                        return response
                    except (_Closed, ConnectionResetError, BrokenPipeError):
                        session.close()
                        if not reused or attempt == 2:
                            raise
                raise AssertionError("unreachable")  # pragma: no cover
        finally:
            if reusable:
                self._checkin(session, loop.time(), True)
            else:
                session.remaining = 0
                session.close()

    def close(self) -> None:
        for s in self._idle:
            s.close()
        self._idle.clear()
