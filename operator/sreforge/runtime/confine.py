"""How a local environment runs its substrate: every process confined, one network for all.

Each build of the service, each upstream, Redis, the data preparation and the CI gate's
test run start through `Substrate`, in a view made by sreforge.runtime.sandbox (the same
mechanism as the agent's):

- as nobody, no capabilities, `no_new_privs`, in its own mount and PID namespaces;
- it sees the OS (/usr, /etc) and the Python the harness runs it with, read-only; its own
  tree, read-only (writable for the CI gate, whose build step compiles into it); its own
  data directory, writable; a private /tmp and $HOME. Nothing else: not the run
  directory, the scenario, Prometheus's files, another case's trees, the harness's
  processes;
- a service, its upstreams and Redis share the environment's network namespace
  (sreforge.runtime.gateway): they reach each other on 127.0.0.1, the harness reaches
  each of them through the gateway on the same port, and no harness port is reachable
  from in there. The data preparation and CI run in a fresh namespace with only a
  loopback;
- its environment holds only what it is given (HOST, PORT, DATA_DIR, its dependencies'
  URLs, its upstream's `env`) and a few basics, never the harness's own variables.

`Substrate(confined=False)` runs the same commands as the harness's user on the host's
loopback, for a machine where confinement cannot be made (not root).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from sreforge.runtime import sandbox
from sreforge.runtime.gateway import Gateway, GatewayError
from sreforge.runtime.process import Managed, ProcessError, free_port, resolve_command

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOME = "/home/service"


def runtime_dirs() -> list[str]:
    """The directories of the Python the harness runs substrate commands with (`python`
    in a scenario's command means this interpreter): the venv and the installation it
    was made from, unless the OS directories already show them."""
    found: list[str] = []
    exe = Path(sys.executable).resolve()
    for d in (
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        exe.parent.parent,
    ):
        p = str(Path(d).resolve())
        if any(p == f"/{s}" or p.startswith(f"/{s}/") for s in sandbox.SYSTEM_DIRS):
            continue
        if p not in found:
            found.append(p)
    # a directory inside another one found is already shown
    return sorted(p for p in found if not any(p.startswith(q + "/") for q in found))


def _die_hard() -> None:
    """`preexec_fn` of unshare: SIGKILL when the harness thread that started it ends.
    unshare ignores SIGTERM, and its --kill-child then SIGKILLs the confined program."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(1)


def _prctl(option: int, value: int) -> None:
    sandbox._libc.prctl(option, value, 0, 0, 0)


class Confined(Managed):
    """A confined program: `pid` is the program's own (for the harness exporter), and
    `stop` signals it, not the unshare wrapping it."""

    @property
    def pid(self) -> int:
        return sandbox.inner_pid(self.proc.pid) or self.proc.pid

    def stop(self, timeout: float = 5.0) -> None:
        if self.alive():
            inner = sandbox.inner_pid(self.proc.pid)
            if inner is not None:
                # PID 1 of its namespace: SIGTERM reaches it only if it handles SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.kill(inner, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # SIGKILL to PID 1 ends its whole namespace, whatever it forked
                inner = sandbox.inner_pid(self.proc.pid)
                if inner is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(inner, signal.SIGKILL)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout)
        self._log.close()


class Substrate:
    """The confinement every substrate process of one environment runs in."""

    def __init__(self, directory: Path, *, confined: bool = True) -> None:
        self.confined = confined
        self.gateway: Gateway | None = None
        self.root: Path | None = None
        if not confined:
            return
        why = sandbox.available()
        if why is not None:
            raise ProcessError(f"confining the substrate: {why}")
        self.root = Path(tempfile.mkdtemp(prefix="sreforge-view-"))
        try:
            self.gateway = Gateway(directory / "logs" / "gateway.log")
        except (GatewayError, OSError) as exc:
            self.root.rmdir()
            raise ProcessError(str(exc)) from exc

    # ----- network -----------------------------------------------------------------
    def port(self) -> int:
        """A port for a substrate process to listen on, reachable by the harness on its own
        127.0.0.1 at the same number."""
        if self.gateway is None:
            return free_port()
        try:
            return self.gateway.publish()
        except GatewayError as exc:
            raise ProcessError(str(exc)) from exc

    def release(self, port: int) -> None:
        """The harness no longer reaches `port` (a retired build's)."""
        if self.gateway is not None:
            with contextlib.suppress(GatewayError):
                self.gateway.close(port)

    # ----- processes ---------------------------------------------------------------
    def _spec(
        self, tree: Path | None, data: Path | None, net: str, *, tree_writable: bool
    ) -> sandbox.Spec:
        assert self.root is not None
        mounts = [sandbox.Mount(d, d) for d in runtime_dirs()]
        cwd = "/"
        if tree is not None:
            t = str(tree.resolve())
            mounts.append(sandbox.Mount(t, t, writable=tree_writable))
            cwd = t
        if data is not None:
            sandbox.chown_tree(data, sandbox.NOBODY, sandbox.NOBODY)
            d = str(data.resolve())
            mounts.append(sandbox.Mount(d, d, writable=True))
        return sandbox.Spec(root=str(self.root), cwd=cwd, mounts=mounts, home=HOME, net=net)

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        base = {
            "PATH": PATH,
            "HOME": HOME,
            "TMPDIR": "/tmp",
            "USER": "nobody",
            "LOGNAME": "nobody",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return {**base, **env}

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        tree: Path | None = None,
        data: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Managed:
        """Start a long-running substrate process (a build, an upstream, Redis)."""
        if not self.confined:
            return Managed(name, argv, log_path=log_path, cwd=tree, env=env)
        assert self.gateway is not None
        spec = self._spec(tree, data, self.gateway.netns, tree_writable=False)
        return Confined(
            name,
            sandbox.command(spec, resolve_command(argv)),
            log_path=log_path,
            cwd=Path("/"),
            env=self._env(env or {}),
            inherit_env=False,
            preexec_fn=_die_hard,
        )

    def wrap(
        self,
        argv: Sequence[str],
        *,
        tree: Path,
        data: Path | None = None,
        tree_writable: bool = False,
    ) -> tuple[list[str], dict[str, str] | None]:
        """The argv and environment of a one-off command (data preparation, the CI gate's
        steps) in `tree`, in a network of its own with only a loopback. Unconfined: the
        command as it is, and None (the harness's environment)."""
        command = resolve_command(argv)
        if not self.confined:
            return command, None
        spec = self._spec(tree, data, sandbox.NET_LOOPBACK, tree_writable=tree_writable)
        if tree_writable:
            sandbox.chown_tree(tree, sandbox.NOBODY, sandbox.NOBODY)
        return sandbox.command(spec, command), self._env({})

    def close(self) -> None:
        """Stop the gateway and remove the views' mount point; after every process stopped."""
        if self.gateway is not None:
            self.gateway.stop()
        if self.root is not None:
            # only ever a mount point inside the views, where pivot_root left it behind
            with contextlib.suppress(OSError):
                self.root.rmdir()
