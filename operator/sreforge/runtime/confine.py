"""How a local environment runs its substrate: every process confined, out of the harness's reach.

Each build of the service, each upstream, Redis, the data preparation and the CI gate's
test run start through `Substrate`, in a view made by sreforge.runtime.sandbox (the same
mechanism as the agent's):

- as nobody, no capabilities, `no_new_privs`, in its own mount and PID namespaces;
- it sees the OS (/usr, /etc) and the Python the harness runs it with, read-only (at
  their own paths: a venv names them); its own tree at /srv/app, its working directory,
  read-only (writable for the CI gate, whose build step compiles into it); its own data
  directory at /data (DATA_DIR), writable; a private /tmp and $HOME. Nothing else: not
  the run directory, the scenario, Prometheus's files, another case's trees, the
  harness's processes;
- Redis and the upstreams share a network namespace, and each build of the service has
  one of its own in which exactly its dependencies' ports answer, at the addresses it is
  given (sreforge.runtime.gateway); the harness reaches each of them through the gateway
  at the same port on its own 127.0.0.1, and no harness port is reachable from in there.
  The data preparation and CI run in a fresh namespace with only a loopback;
- its environment holds only what it is given (HOST, PORT, DATA_DIR, its dependencies'
  URLs, its upstream's `env`) and a few basics, never the harness's own variables.

`Substrate(confined=False)` runs the same commands as the harness's user on the host's
loopback, for a machine where confinement cannot be made (not root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sreforge.runtime import sandbox
from sreforge.runtime.gateway import Gateway, GatewayError
from sreforge.runtime.process import Managed, ProcessError, free_port, resolve_command

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOME = "/home/service"
# Where a confined process finds its tree (its working directory) and its data: the same
# for every build, so nothing in its view names the run, the case or the scenario.
TREE = "/srv/app"
DATA = "/data"


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


# Looked up once here: the child between fork and exec must not import or dlopen anything.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_PR_SET_PDEATHSIG = 1


def _die_hard() -> None:
    """`preexec_fn` of unshare: SIGKILL when the harness thread that started it ends.
    unshare ignores SIGTERM, and its --kill-child then SIGKILLs the confined program."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


@dataclass(frozen=True)
class Place:
    """Where a substrate process listens: its port (the harness reaches it at the same port
    on its own 127.0.0.1) and the network namespace it joins (None: unconfined)."""

    port: int
    netns: str | None
    netns_id: int | None = None  # a build's own namespace, which goes when it retires


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
        self._places: dict[int, Place] = {}  # by port
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
    def place(self, reach: Sequence[int] | None = None) -> Place:
        """Where a substrate process will listen, reachable by the harness on its own
        127.0.0.1 at the same port. A dependency (`reach` None) joins the dependencies'
        namespace; a build gets a namespace of its own in which the dependencies' ports
        `reach` (and nothing else) answer."""
        if self.gateway is None:
            return Place(free_port(), None)
        try:
            if reach is None:
                return self._keep(Place(self.gateway.publish(), self.gateway.shared))
            netns, path = self.gateway.netns()
        except GatewayError as exc:
            raise ProcessError(str(exc)) from exc
        try:
            for port in reach:
                self.gateway.expose(port, netns)
            return self._keep(Place(self.gateway.publish(netns), path, netns))
        except GatewayError as exc:
            with contextlib.suppress(GatewayError):
                self.gateway.drop(netns)
            raise ProcessError(str(exc)) from exc

    def _keep(self, place: Place) -> Place:
        self._places[place.port] = place
        return place

    def release(self, port: int) -> None:
        """The harness no longer reaches `port`, and its own namespace goes (a retired
        build's)."""
        place = self._places.pop(port, None)
        if self.gateway is None or place is None:
            return
        with contextlib.suppress(GatewayError):
            self.gateway.close(port)
            if place.netns_id is not None:
                self.gateway.drop(place.netns_id)

    # ----- processes ---------------------------------------------------------------
    def _spec(
        self,
        tree: Path | None,
        data: Path | None,
        net: str,
        *,
        tree_writable: bool,
        python: str | None = None,
    ) -> sandbox.Spec:
        assert self.root is not None
        mounts = [sandbox.Mount(d, d) for d in runtime_dirs()]
        if python is not None:  # a fetched service's own venv, read-only at its own path
            venv = str(Path(python).parent.parent)
            if not any(venv == m.source or venv.startswith(m.source + "/") for m in mounts):
                mounts.append(sandbox.Mount(venv, venv))
        cwd = "/"
        if tree is not None:
            mounts.append(sandbox.Mount(str(tree.resolve()), TREE, writable=tree_writable))
            cwd = TREE
        if data is not None:
            sandbox.chown_tree(data, sandbox.NOBODY, sandbox.NOBODY)
            mounts.append(sandbox.Mount(str(data.resolve()), DATA, writable=True))
        return sandbox.Spec(root=str(self.root), cwd=cwd, mounts=mounts, home=HOME, net=net)

    def data_path(self, data: Path) -> str:
        """How a substrate process names its data directory `data` (DATA_DIR)."""
        return DATA if self.confined else str(data)

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
        place: Place,
        log_path: Path,
        tree: Path | None = None,
        data: Path | None = None,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
    ) -> Managed:
        """Start a long-running substrate process (a build, an upstream, Redis) that
        listens at `place`. `python`: the interpreter `python` means (default: the harness's)."""
        if place.netns is None:
            return Managed(
                name, resolve_command(argv, python), log_path=log_path, cwd=tree, env=env
            )
        spec = self._spec(tree, data, place.netns, tree_writable=False, python=python)
        return Confined(
            name,
            sandbox.command(spec, resolve_command(argv, python)),
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
        tree: Path | None,
        data: Path | None = None,
        tree_writable: bool = False,
        python: str | None = None,
        place: Place | None = None,
        env: Mapping[str, str] | None = None,
    ) -> tuple[list[str], dict[str, str] | None]:
        """The argv and environment of a one-off command (data preparation, the CI gate's
        steps) in `tree`, in a network of its own with only a loopback, or at `place` (a
        build's namespace, where its dependencies answer: a data preparation that writes
        into PostgreSQL). Unconfined: the command as it is, and the harness's environment
        with `env` (None when there is none)."""
        command = resolve_command(argv, python)
        if not self.confined:
            return command, ({**os.environ, **env} if env else None)
        net = place.netns if place is not None and place.netns else sandbox.NET_LOOPBACK
        spec = self._spec(tree, data, net, tree_writable=tree_writable, python=python)
        if tree_writable and tree is not None:
            sandbox.chown_tree(tree, sandbox.NOBODY, sandbox.NOBODY)
        return sandbox.command(spec, command), self._env(env or {})

    def close(self) -> None:
        """Stop the gateway and remove the views' mount point; after every process stopped."""
        if self.gateway is not None:
            self.gateway.stop()
        if self.root is not None:
            # only ever a mount point inside the views, where pivot_root left it behind
            with contextlib.suppress(OSError):
                self.root.rmdir()
