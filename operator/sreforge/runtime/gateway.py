"""The networks an environment's substrate lives in, and the one way in and between them.

A local environment's dependencies (Redis, the upstreams) share one network namespace,
and each build of the service gets a namespace of its own. Each has only a loopback.
The harness's own listeners (Prometheus and its admin and lifecycle endpoints, the load
generator's port, the harness exporter, the scrape proxy, any prober) are on the host's
loopback, which does not exist in there: a patched build cannot connect to them, and
/proc/net/tcp in there lists only its own sockets and its dependencies' ports.

The gateway process holds these namespaces and is the only way in or across:

- for each port the harness *publishes*, it listens on the host's 127.0.0.1 and forwards
  every connection to 127.0.0.1 at the same port inside a namespace: the harness
  health-checks, scrapes and loads a build (and Redis, an upstream) through it;
- for each dependency port it *exposes* into a build's namespace, it listens on that
  port of the build's loopback and forwards to the dependencies' namespace: the build
  reaches exactly its declared dependencies, at the addresses it is given, and not the
  builds before or after it.

Nothing goes out: no namespace has a route anywhere.

The gateway is started by the harness in the harness's network namespace, keeps a handle
on it, then moves itself into a new one (unshare(2)): the dependencies' namespace. A
build's namespace is made the same way and the gateway returns to its own; a namespace
lives as long as the gateway holds its file descriptor, and a process joins it by
opening /proc/GATEWAY/fd/N. A socket is made in a namespace by entering it for the
socket(2) call alone (setns(2); the process has one thread) and keeps that namespace.
The gateway takes commands on its stdin, one a line, and answers each on its stdout:

    netns              ->  N       a new namespace (its loopback up): /proc/PID/fd/N
    publish [N]        ->  PORT    a host listener forwarded to PORT in N (or the shared one)
    expose PORT N      ->  ok      PORT of the shared namespace reachable inside N
    close PORT         ->  ok      stop forwarding the host's PORT
    drop N             ->  ok      stop everything into N, and let N go

It ends when its stdin closes. Like sreforge.runtime.sandbox, this file runs by path with
`python -I -S` and imports only the standard library.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1


class GatewayError(RuntimeError):
    """The gateway would not start or answer; the message holds its log's tail."""


class Gateway:
    """The parent side: starts the gateway, asks it for namespaces and ports."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (only prctl, no locks taken)
        )
        self._ask(None)  # "ready": it has its namespace and its loopback is up

    @property
    def shared(self) -> str:
        """The file a process opens to join the dependencies' network namespace."""
        return f"/proc/{self.proc.pid}/ns/net"

    def netns(self) -> tuple[int, str]:
        """A new network namespace with only a loopback: its id and the file to join it by."""
        n = int(self._ask("netns"))
        return n, f"/proc/{self.proc.pid}/fd/{n}"

    def publish(self, netns: int | None = None) -> int:
        """A port the harness reaches on its own 127.0.0.1, forwarded to the same port in
        `netns` (the dependencies' namespace when None)."""
        return int(self._ask("publish" if netns is None else f"publish {netns}"))

    def expose(self, port: int, netns: int) -> None:
        """The dependencies' `port` reachable at 127.0.0.1:`port` inside `netns`."""
        self._ask(f"expose {port} {netns}")

    def close(self, port: int) -> None:
        self._ask(f"close {port}")

    def drop(self, netns: int) -> None:
        self._ask(f"drop {netns}")

    def _ask(self, line: str | None) -> str:
        with self._lock:
            stdin, stdout = self.proc.stdin, self.proc.stdout
            assert stdin is not None
            assert stdout is not None
            try:
                if line is not None:
                    stdin.write(line.encode() + b"\n")
                    stdin.flush()
                answer = stdout.readline().decode().strip()
            except OSError as exc:
                answer = f"error {exc}"
        if not answer or answer.startswith("error"):
            raise GatewayError(
                f"the substrate's network gateway (pid {self.proc.pid}) did not "
                f"{line or 'start'}: {answer or 'it exited'}; log {self.log_path}:\n"
                + _tail(self.log_path)
            )
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._log.close()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


# ---- the child side -------------------------------------------------------------------


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class _Pipe(asyncio.Protocol):
    """One side of a forwarded connection: what it receives is written to its peer, with
    the peer's back-pressure, a half-close passed on, and a close closing both."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None or peer.eof:
            self.close()
            return False
        if peer.transport.can_write_eof():
            peer.transport.write_eof()
        return True  # half-closed: the other direction may still carry the answer

    def connection_lost(self, _exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def close(self) -> None:
        for side in (self, self.peer):
            if side is not None and side.transport is not None:
                side.transport.close()


class _Client(_Pipe):
    """A connection accepted by a listener; held until the other side answers."""

    def __init__(self, gateway: _Forwarder, port: int, into: int) -> None:
        super().__init__()
        self.gateway = gateway
        self.port = port
        self.into = into

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self.gateway.spawn(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        inner = _Pipe()
        sock = self.gateway.socket_in(self.into)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", self.port))
            if sock.getsockname() == sock.getpeername():  # a TCP self-connect: nobody there
                raise ConnectionRefusedError
            await loop.create_connection(lambda: inner, sock=sock)
        except OSError:  # nothing listens there (yet): as if the port were closed
            sock.close()
            self.close()
            return
        if self.transport is None or self.transport.is_closing():
            inner.close()
            return
        self.peer, inner.peer = inner, self
        self.transport.resume_reading()


class _Forwarder:
    def __init__(self, host: int, shared: int) -> None:
        self.host = host  # the harness's namespace
        self.shared = shared  # the dependencies' namespace, where this process lives
        self.namespaces: set[int] = set()  # the builds' namespaces, by file descriptor
        # (namespace a listener is in, its port) -> (the listener, the namespace it feeds)
        self.servers: dict[tuple[int, int], tuple[asyncio.Server, int]] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # the loop holds tasks only weakly

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def socket_in(self, netns: int) -> socket.socket:
        """A TCP socket in the namespace `netns`."""
        if netns == self.shared:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _setns(netns)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(self.shared)

    def netns(self, loopback_up: Any) -> int:
        if _libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare: {os.strerror(err)}")
        try:
            fd = os.open("/proc/self/ns/net", os.O_RDONLY)
            loopback_up()
        finally:
            _setns(self.shared)
        self.namespaces.add(fd)
        return fd

    def _known(self, netns: int) -> int:
        if netns != self.shared and netns not in self.namespaces:
            raise OSError(f"no namespace {netns}")
        return netns

    async def listen(self, where: int, port: int, into: int) -> int:
        """A listener in `where` on 127.0.0.1:`port` (0: any) feeding the same port in `into`."""
        sock = self.socket_in(where)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.setblocking(False)
            port = int(sock.getsockname()[1])
            server = await asyncio.get_running_loop().create_server(
                lambda: _Client(self, port, into), sock=sock, backlog=512
            )
        except OSError:
            sock.close()
            raise
        self.servers[(where, port)] = (server, into)
        return port

    def close(self, where: int, port: int) -> None:
        entry = self.servers.pop((where, port), None)
        if entry is not None:
            entry[0].close()

    def drop(self, netns: int) -> None:
        for (where, port), (_, into) in list(self.servers.items()):
            if netns in (where, into):
                self.close(where, port)
        self.namespaces.discard(netns)
        os.close(netns)

    async def command(self, line: str, loopback_up: Any) -> str:
        word, *args = line.split()
        if not all(a.isdigit() for a in args):
            raise OSError(f"not a number in {line!r}")
        n = [int(a) for a in args]
        if word == "netns" and not n:
            return str(self.netns(loopback_up))
        if word == "publish" and len(n) <= 1:
            return str(await self.listen(self.host, 0, self._known(n[0]) if n else self.shared))
        if word == "expose" and len(n) == 2:
            await self.listen(self._known(n[1]), n[0], self.shared)
            return "ok"
        if word == "close" and len(n) == 1:
            self.close(self.host, n[0])
            return "ok"
        if word == "drop" and len(n) == 1 and n[0] in self.namespaces:
            self.drop(n[0])
            return "ok"
        raise OSError(f"unknown command {line!r}")


async def _serve(gateway: _Forwarder, loopback_up: Any) -> None:
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while line := (await commands.readline()).decode().strip():
        try:
            answer = await gateway.command(line, loopback_up)
        except OSError as exc:
            answer = f"error {exc}"
        out.write(answer + "\n")
        out.flush()


def main() -> int:
    if os.geteuid() != 0:
        print("error the gateway needs root (network namespaces)", flush=True)
        return 1
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # run by path: its sibling
    from sandbox import loopback_up  # type: ignore[import-not-found]  # noqa: PLC0415

    host = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if _libc.unshare(CLONE_NEWNET) != 0:
        print(f"error unshare: {os.strerror(ctypes.get_errno())}", flush=True)
        return 1
    shared = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    loopback_up()
    asyncio.run(_serve(_Forwarder(host, shared), loopback_up))
    return 0


if __name__ == "__main__":
    sys.exit(main())
