"""Run ``python -m sreforge.load`` as a child process (what the harness does locally)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from sreforge.api.scenario import LoadProfile
from sreforge.children import die_with_parent
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

    ``env`` defaults to this process's environment with ``operator/`` (the directory
    holding the ``sreforge`` package) prepended to PYTHONPATH.
    """

    def __init__(
        self,
        profile: LoadProfile,
        target: str,
        port_file: Path | str,
        *,
        listen: str = "127.0.0.1:0",
        seed: int | None = None,
        stderr: IO[bytes] | int | None = None,
        env: dict[str, str] | None = None,
        ready_timeout: float = 10.0,
    ) -> None:
        self.port_file = Path(port_file)
        self.port_file.unlink(missing_ok=True)
        if env is None:
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            generator_argv(profile, target, listen=listen, port_file=self.port_file, seed=seed),
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
        """Base URL of /metrics, /stats, /target, /healthz."""
        return f"http://{self.host}:{self.port}"

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
