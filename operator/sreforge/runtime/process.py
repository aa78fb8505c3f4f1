"""Processes the local runtime starts and stops: only its own, always by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sreforge.children import die_with_parent
from sreforge.errors import SreforgeError


class ProcessError(SreforgeError, RuntimeError):
    """A process that would not start or become ready; the message holds its log tail."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks; a tiny race is handled by retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_command(argv: Sequence[str], python: str | None = None) -> list[str]:
    """`python` in a scenario command means this interpreter, so the venv is used (or
    `python`: a fetched service's own venv, sreforge.runtime.sources)."""
    exe = python or sys.executable
    return [exe if a in ("python", "python3") else a for a in argv]


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Managed:
    """One child process with its log file; stopped by PID with SIGTERM, then SIGKILL."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        preexec_fn: Callable[[], None] = die_with_parent,
    ) -> None:
        self.name = name
        self.argv = resolve_command(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        full_env = {**(os.environ if inherit_env else {}), **(env or {})}
        self.proc = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,  # noqa: PLW1509 (only prctl, no locks taken)
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fail(self, why: str) -> ProcessError:
        return ProcessError(
            f"{self.name} (pid {self.pid}) {why}; log {self.log_path}:\n{tail(self.log_path)}"
        )

    def wait_http(self, url: str, timeout: float, *, expect: int = 200) -> None:
        """Wait until GET url answers `expect`, or raise with the log tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self.fail(f"exited with code {self.proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == expect:
                        return
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            time.sleep(0.1)
        raise self.fail(f"did not answer {url} within {timeout:.0f}s")

    def wait_file(self, path: Path, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self.fail(f"exited with code {self.proc.returncode} before it was ready")
            if path.exists():
                return path.read_text(encoding="utf-8").strip()
            time.sleep(0.05)
        raise self.fail(f"did not write {path} within {timeout:.0f}s")

    def stop(self, timeout: float = 5.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()
