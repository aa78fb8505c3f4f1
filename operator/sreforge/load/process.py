"""Run ``python -m sreforge.load`` as a child process (what the harness does locally)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from sreforge.api.scenario import LoadProfile
from sreforge.children import die_with_parent
from sreforge.load import control
from sreforge.load.command import generator_argv


def read_port_file(
    path: Path | str, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> int:
    """Wait (bounded) for the port file the generator writes once listening; return the port.

    Raises TimeoutError, or RuntimeError if ``proc`` exits first.
    """
    path = Path(path)
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text(encoding="ascii").strip()
            if text.isdigit():
                return int(text)
        except FileNotFoundError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"load generator exited with {proc.returncode} before listening")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no port in {path} after {timeout:.1f}s")
        time.sleep(0.02)


class GeneratorProcess:
    """A started generator child: ``.port``, ``.url``, ``.stop()``; a context manager.

    With ``control_socket`` (a path in a directory of the caller's; a stale socket there is
    removed first) it serves ``POST /target`` and ``GET /stats`` on that Unix socket, used
    by :meth:`set_target` and :meth:`stats`; without it, nothing can re-point it. ``probe``
    starts the profile's prober instead (series ``sreforge_probe_*``). ``env``
    defaults to this process's environment with ``operator/`` (the directory holding the
    ``sreforge`` package) prepended to PYTHONPATH.
    """

    def __init__(
        self,
        profile: LoadProfile,
        target: str,
        port_file: Path | str,
        *,
        listen: str = "127.0.0.1:0",
        control_socket: Path | str | None = None,
        seed: int | None = None,
        ids_seed: int | None = None,
        probe: bool = False,
        stderr: IO[bytes] | int | None = None,
        env: dict[str, str] | None = None,
        ready_timeout: float = 10.0,
    ) -> None:
        self.port_file = Path(port_file)
        self.port_file.unlink(missing_ok=True)
        self.control_socket = None if control_socket is None else Path(control_socket)
        if self.control_socket is not None and self.control_socket.is_socket():
            self.control_socket.unlink()  # an earlier generator's; the generator binds afresh
        if env is None:
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            generator_argv(
                profile,
                target,
                listen=listen,
                port_file=self.port_file,
                control_socket=self.control_socket,
                seed=seed,
                ids_seed=ids_seed,
                probe=probe,
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (only prctl, no locks taken)
        )
        host = listen.rpartition(":")[0].strip("[]")
        self.host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        try:
            self.port = read_port_file(self.port_file, ready_timeout, self.proc)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        """Base URL of the TCP listener: ``/metrics`` and ``/healthz``."""
        return f"http://{self.host}:{self.port}"

    def _socket(self) -> Path:
        if self.control_socket is None:
            raise RuntimeError("this generator was started without a control socket")
        return self.control_socket

    def stats(self) -> dict[str, Any]:
        """``GET /stats`` over the control socket."""
        return control.read_stats(self._socket())

    def set_target(self, url: str) -> str:
        """``POST /target`` over the control socket; returns the normalised target."""
        return control.set_target(self._socket(), url)

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)
        return self.proc.returncode

    def __enter__(self) -> GeneratorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
