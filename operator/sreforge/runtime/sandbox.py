"""Run a local agent where it can read only what it is handed.

`sreforge run --agent CMD` used to start CMD as the harness's own user in the harness's
file system, so an agent could open the scenario's root_cause.md, its fixes and decoys,
the healthy tree in the run directory, or the git history. Here it runs in a view built
from an allow-list instead:

- its own mount namespace whose root is a fresh tmpfs (`pivot_root`, and the old root
  detached, so there is no path back to the host's tree);
- read-only binds of the operating system (`/usr`, `/etc`, `/opt` and the merged-usr
  links) and of any path the user shares explicitly (`--agent-share`, same path inside);
- `/workspace` (the regressed tree, writable), `/handoff/brief.md` (read-only), a private
  `/tmp` and `$HOME` (`/home/agent`), the `/dev` nodes a program needs, and its own
  `/proc` from its own PID namespace, so the harness's processes (and their
  `/proc/PID/root`) are not there to be seen;
- a different, unprivileged uid (nobody) with no supplementary groups and
  `no_new_privs`, so it cannot unmount the view, and setuid programs stay unprivileged.

The network namespace is the host's: the agent investigates over loopback (the run's
Prometheus, the service) and may call its own model's API.

This needs root (mount and PID namespaces, `pivot_root`, a uid change). Elsewhere
`sreforge run --agent-unsandboxed` runs the agent unconfined, and record.json says so.

The parent side (`Sandbox`) builds the command line; the child side is this module's
`main`, started by util-linux's `unshare` inside the new namespaces, which sets up the
view with mount(2) calls and then execs the agent. No user text passes through a shell.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

NOBODY = 65534
WORKSPACE = "/workspace"
BRIEF = "/handoff/brief.md"
HOME = "/home/agent"

# The host directories an agent's programs need, read-only; everything else is absent.
SYSTEM_DIRS = ("usr", "etc", "opt")
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MNT_DETACH = 0x2
PR_SET_NO_NEW_PRIVS = 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


class SandboxError(RuntimeError):
    """The agent's sandbox cannot be made here; the message says why and what to do."""


@dataclass(frozen=True)
class Spec:
    """Everything the child side needs, passed to it as one JSON argument."""

    root: str  # an empty host directory: the mount point of the view's tmpfs root
    workspace: str
    brief: str
    shares: list[str] = field(default_factory=list)
    uid: int = NOBODY
    gid: int = NOBODY


def available() -> str | None:
    """None when a sandbox can be made here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "sandboxing the agent needs root (mount and PID namespaces, a uid change)"
    if shutil.which("unshare") is None:
        return "sandboxing the agent needs util-linux's unshare"
    if platform.machine() not in SYS_PIVOT_ROOT:
        return f"no pivot_root syscall number known for {platform.machine()}"
    return None


class Sandbox:
    """The parent side: prepares the workspace, builds argv and env, tidies up after."""

    def __init__(self, workspace: Path, brief: Path, shares: list[Path] | None = None) -> None:
        why = available()
        if why is not None:
            raise SandboxError(f"{why}; or pass --agent-unsandboxed to run it unconfined")
        self.workspace = workspace
        missing = [str(p) for p in shares or [] if not p.exists()]
        if missing:
            raise SandboxError(f"--agent-share: no such path: {', '.join(missing)}")
        self.shares = [p.resolve() for p in shares or []]
        self.root = Path(tempfile.mkdtemp(prefix="sreforge-agent-root-"))
        self.spec = Spec(
            root=str(self.root),
            workspace=str(workspace.resolve()),
            brief=str(brief.resolve()),
            shares=[str(p) for p in self.shares],
        )

    def __enter__(self) -> Sandbox:
        _chown_tree(self.workspace, self.spec.uid, self.spec.gid)
        return self

    def __exit__(self, *_exc: object) -> None:
        _chown_tree(self.workspace, os.getuid(), os.getgid())
        self.root.rmdir()  # only ever a mount point inside the agent's namespace

    def argv(self, agent: list[str]) -> list[str]:
        unshare = shutil.which("unshare")
        assert unshare is not None
        return [
            unshare, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
            sys.executable, "-m", "sreforge.runtime.sandbox", json.dumps(asdict(self.spec)),
            "--", *agent,
        ]  # fmt: skip

    def env(self, base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
        return {
            **base,
            **extra,
            "HOME": HOME,
            "TMPDIR": "/tmp",
            "USER": "nobody",
            "LOGNAME": "nobody",
            "PWD": WORKSPACE,
            "SREFORGE_WORKSPACE": WORKSPACE,
            "SREFORGE_BRIEF": BRIEF,
            "SREFORGE_SANDBOX": "1",
        }


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    for path in [top, *top.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)


# ---- the child side: runs as root inside the new mount and PID namespaces --------------

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {source} on {target}")


def _bind(source: str | Path, target: Path, *, writable: bool = False) -> None:
    _mount(str(source), str(target), None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if writable else MS_RDONLY)
    _mount(None, str(target), None, flags)


def _placeholder(source: Path, target: Path) -> Path:
    """A mount point shaped like `source` (a directory or an empty file) at `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        target.mkdir(exist_ok=True)
    else:
        target.touch()
    return target


def _tmpfs(target: Path, options: str) -> None:
    target.mkdir(parents=True)
    _mount("tmpfs", str(target), "tmpfs", MS_NOSUID | MS_NODEV, options)


def _build(spec: Spec) -> None:
    r = Path(spec.root)
    _mount("tmpfs", str(r), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for name in SYSTEM_DIRS + SYSTEM_LINKS:
        host = Path("/", name)
        if host.is_symlink():
            (r / name).symlink_to(host.readlink())
        elif host.is_dir():
            _bind(host, _placeholder(host, r / name))
    dev = r / "dev"
    dev.mkdir()
    for name in DEVICES:
        node = Path("/dev", name)
        if node.exists():
            _mount(str(node), str(_placeholder(node, dev / name)), None, MS_BIND)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        (dev / name).symlink_to(f"/proc/self/fd/{fd}")
    (dev / "fd").symlink_to("/proc/self/fd")
    _tmpfs(dev / "shm", "mode=1777,size=64m")
    (r / "proc").mkdir()
    _mount("proc", str(r / "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _tmpfs(r / "tmp", "mode=1777,size=1g")
    _tmpfs(r / HOME.lstrip("/"), f"mode=0700,size=256m,uid={spec.uid},gid={spec.gid}")
    workspace = Path(spec.workspace)
    _bind(workspace, _placeholder(workspace, r / WORKSPACE.lstrip("/")), writable=True)
    brief = Path(spec.brief)
    _bind(brief, _placeholder(brief, r / BRIEF.lstrip("/")))
    for share in map(Path, spec.shares):
        _bind(share, _placeholder(share, r / share.relative_to("/")))
    old = r / ".old"
    old.mkdir()
    pivot = SYS_PIVOT_ROOT[platform.machine()]
    _check(_libc.syscall(pivot, str(r).encode(), str(old).encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    Path("/.old").rmdir()
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _drop(spec: Spec) -> None:
    os.setgroups([])
    os.setresgid(spec.gid, spec.gid, spec.gid)
    os.setresuid(spec.uid, spec.uid, spec.uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m sreforge.runtime.sandbox SPEC_JSON -- AGENT...", file=sys.stderr)
        return 2
    spec = Spec(**json.loads(argv[0]))
    try:
        _build(spec)
        _drop(spec)
        os.chdir(WORKSPACE)
    except OSError as e:
        print(f"sreforge sandbox: could not build the agent's view: {e}", file=sys.stderr)
        return 125
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as e:
        print(f"sreforge sandbox: cannot run {argv[2]!r} inside the sandbox: {e}", file=sys.stderr)
        print(
            "  (only the OS, /workspace, /handoff and --agent-share paths are visible)",
            file=sys.stderr,
        )
        return 127
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
