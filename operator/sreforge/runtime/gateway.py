"""The network an environment's substrate lives in, and the one way into it.

Every substrate process of a local environment (each build of the service, its upstreams,
Redis) joins one network namespace of its own. Inside it there is only a loopback: the
processes reach each other (the service its declared dependencies) on 127.0.0.1 as
before, and nothing else. The harness's own listeners (Prometheus and its admin and
lifecycle endpoints, the load generator's port, the harness exporter, the scrape proxy,
any prober) are on the host's loopback, which does not exist in there: a patched build
cannot connect to them, and /proc/net/tcp in there lists only the substrate's sockets.

The gateway process owns that namespace and is the only way in: for each port the
harness *publishes* it listens on the host's 127.0.0.1 at the same port number and
forwards every connection to 127.0.0.1:PORT inside. The harness health-checks, scrapes
and loads a build through it; the build only ever sees connections arriving. Nothing
goes out: the namespace has no route anywhere.

The gateway is started by the harness in the harness's network namespace, keeps a handle
on it, then moves itself into a new one (unshare(2)); a listening socket is made in the
host's namespace by entering it for the socket(2) call alone (setns(2); the process has
one thread), and a socket keeps the namespace it was made in. It takes commands on its
stdin, one a line, and answers each on its stdout:

    publish        ->  PORT      a new listener on the host's 127.0.0.1, forwarded inside
    close PORT     ->  ok        stop forwarding PORT (a retired build's)

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
    """The parent side: starts the gateway, publishes ports, names its namespace."""

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
        self._ask("ready")  # it has its namespace and its loopback is up

    @property
    def netns(self) -> str:
        """The file a process opens to join the substrate's network namespace."""
        return f"/proc/{self.proc.pid}/ns/net"

    def publish(self) -> int:
        """A port that the harness reaches on its 127.0.0.1 and the substrate listens on."""
        return int(self._ask("publish"))

    def close(self, port: int) -> None:
        self._ask(f"close {port}")

    def _ask(self, line: str) -> str:
        with self._lock:
            stdin, stdout = self.proc.stdin, self.proc.stdout
            assert stdin is not None
            assert stdout is not None
            try:
                if line != "ready":
                    stdin.write(line.encode() + b"\n")
                    stdin.flush()
                answer = stdout.readline().decode().strip()
            except OSError as exc:
                answer = f"error {exc}"
        if not answer or answer.startswith("error"):
            raise GatewayError(
                f"the substrate's network gateway (pid {self.proc.pid}) did not "
                f"{line}: {answer or 'it exited'}; log {self.log_path}:\n{_tail(self.log_path)}"
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
    """A connection accepted on the host's side; it is held until the inside answers."""

    def __init__(self, forwarder: _Forwarder, port: int) -> None:
        super().__init__()
        self.forwarder = forwarder
        self.port = port

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self.forwarder.spawn(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        inner = _Pipe()
        try:
            await loop.create_connection(lambda: inner, "127.0.0.1", self.port)
        except OSError:  # nothing listens inside (yet): as if the port were closed
            self.close()
            return
        if self.transport is None or self.transport.is_closing():
            inner.close()
            return
        self.peer, inner.peer = inner, self
        self.transport.resume_reading()


class _Forwarder:
    def __init__(self, host_ns: int, own_ns: int) -> None:
        self.host_ns = host_ns
        self.own_ns = own_ns
        self.servers: dict[int, asyncio.Server] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # the loop holds tasks only weakly

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _host_listener(self) -> socket.socket:
        """A socket bound to the host's 127.0.0.1 on a port the kernel picks."""
        _setns(self.host_ns)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(self.own_ns)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        return sock

    async def publish(self) -> int:
        sock = self._host_listener()
        port = int(sock.getsockname()[1])
        loop = asyncio.get_running_loop()
        self.servers[port] = await loop.create_server(
            lambda: _Client(self, port), sock=sock, backlog=512
        )
        return port

    def close(self, port: int) -> None:
        server = self.servers.pop(port, None)
        if server is not None:
            server.close()


async def _serve(forwarder: _Forwarder) -> None:
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while line := (await commands.readline()).decode().strip():
        word, _, arg = line.partition(" ")
        try:
            if word == "publish":
                answer = str(await forwarder.publish())
            elif word == "close" and arg.isdigit():
                forwarder.close(int(arg))
                answer = "ok"
            else:
                answer = f"error unknown command {line!r}"
        except OSError as exc:
            answer = f"error {exc}"
        out.write(answer + "\n")
        out.flush()


def main() -> int:
    if os.geteuid() != 0:
        print("error the gateway needs root (a network namespace)", flush=True)
        return 1
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # run by path: its sibling
    from sandbox import loopback_up  # type: ignore[import-not-found]  # noqa: PLC0415

    host_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if _libc.unshare(CLONE_NEWNET) != 0:
        print(f"error unshare: {os.strerror(ctypes.get_errno())}", flush=True)
        return 1
    own_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    loopback_up()
    asyncio.run(_serve(_Forwarder(host_ns, own_ns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
