"""Run a program where it can read only what it is handed: the agent and every substrate process.

One mechanism serves both. `sreforge run --agent CMD` once started CMD as the harness's
own user in the harness's file system, and the service builds (the patched one above
all), their upstreams and Redis ran as root beside the harness: a patch could read the
scenario's root cause, rewrite Prometheus's rules, signal the load generator or re-point
it. Each of them now runs in a view built from an allow-list instead (a `Spec`):

- its own mount namespace whose root is a fresh tmpfs (`pivot_root`, and the old root
  detached, so there is no path back to the host's tree);
- read-only binds of the operating system (`/usr`, `/etc`, the merged-usr links, and
  `/opt` for an agent) and of the paths the spec lends it (`Mount`), each at the path
  the spec names, read-only unless the spec says otherwise;
- a private `/tmp`, optionally a private `$HOME`, the `/dev` nodes a program needs, and
  its own `/proc` from its own PID namespace, so the harness's processes (and their
  `/proc/PID/root` and `/proc/PID/cwd`) are not there to be seen;
- a network: the host's (an agent investigates over loopback and calls its model), a
  fresh one with only its own loopback (CI, data preparation), or a namespace it joins
  (a substrate process joins its environment's, sreforge.runtime.gateway, where only
  its dependencies listen and from which no harness port is reachable);
- a different, unprivileged uid (nobody) with no supplementary groups, an empty
  capability bounding set and `no_new_privs`, so it cannot unmount the view or leave
  the namespaces, and setuid programs stay unprivileged.

This needs root (namespaces, `pivot_root`, a uid change). Elsewhere `--agent-unsandboxed`
runs an agent unconfined, and record.json says so.

The parent side builds the command line (`command`); the child side is this file's
`main`, started by util-linux's `unshare` inside the new namespaces, which sets up the
view with mount(2) calls and then execs the program. It is run as a file by path with
`python -I -S` and imports only the standard library, so it does not depend on how the
package is installed. No user text passes through a shell.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import platform
import shutil
import socket
import struct
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

NOBODY = 65534
WORKSPACE = "/workspace"
BRIEF = "/handoff/brief.md"
HOME = "/home/agent"

# The host directories a confined program needs, read-only; everything else is absent.
SYSTEM_DIRS = ("usr", "etc")
AGENT_DIRS = (*SYSTEM_DIRS, "opt")  # an agent's tools may live in /opt
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

# Spec.net: the host's network, a fresh namespace with only loopback, or a path to join.
NET_HOST = "host"
NET_LOOPBACK = "loopback"

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MNT_DETACH = 0x2
CLONE_NEWNET = 0x40000000
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
SIGKILL = 9
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


class SandboxError(RuntimeError):
    """The sandbox cannot be made here; the message says why and what to do."""


@dataclass(frozen=True)
class Mount:
    """A host path lent to the view at `target` (the same path unless said otherwise)."""

    source: str
    target: str
    writable: bool = False


@dataclass(frozen=True)
class Spec:
    """Everything the child side needs, passed to it as one JSON argument."""

    root: str  # an empty host directory: the mount point of the view's tmpfs root
    cwd: str  # in the view
    mounts: list[Mount] = field(default_factory=list)
    system: list[str] = field(default_factory=lambda: list(SYSTEM_DIRS))
    home: str | None = None  # a private tmpfs owned by uid, if any
    net: str = NET_HOST  # NET_HOST, NET_LOOPBACK or a network namespace file to join
    uid: int = NOBODY
    gid: int = NOBODY

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("the spec is not a JSON object")
        mounts = [Mount(**m) for m in raw.pop("mounts", [])]
        return cls(**raw, mounts=mounts)


def available() -> str | None:
    """None when a sandbox can be made here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "sandboxing needs root (mount and PID namespaces, a uid change)"
    if shutil.which("unshare") is None:
        return "sandboxing needs util-linux's unshare"
    if platform.machine() not in SYS_PIVOT_ROOT:
        return f"no pivot_root syscall number known for {platform.machine()}"
    return None


def command(spec: Spec, argv: list[str]) -> list[str]:
    """The argv that runs `argv` inside the view `spec` describes.

    `unshare --kill-child` SIGKILLs the program when unshare dies; unshare itself ignores
    SIGTERM, so stop the program by its own pid (`inner_pid`) and start unshare with a
    parent-death signal of SIGKILL.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxError("sandboxing needs util-linux's unshare")
    flags = ["--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]
    if spec.net == NET_LOOPBACK:
        flags.append("--net")
    child = [sys.executable, "-I", "-S", str(Path(__file__).resolve())]
    return [unshare, *flags, *child, spec.to_json(), "--", *argv]


def inner_pid(unshare_pid: int) -> int | None:
    """The pid (in the harness's namespace) of the program `unshare_pid` forked, if any."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text()
    except OSError:
        return None
    first = children.split()
    return int(first[0]) if first else None


class Sandbox:
    """An agent's view: its workspace, its brief, the OS and what it is lent (`shares`)."""

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
            cwd=WORKSPACE,
            mounts=[
                Mount(str(workspace.resolve()), WORKSPACE, writable=True),
                Mount(str(brief.resolve()), BRIEF),
                *(Mount(str(p), str(p)) for p in self.shares),
            ],
            system=list(AGENT_DIRS),
            home=HOME,
            net=NET_HOST,  # the agent investigates the run over loopback, and calls its model
        )

    def __enter__(self) -> Sandbox:
        chown_tree(self.workspace, self.spec.uid, self.spec.gid)
        return self

    def __exit__(self, *_exc: object) -> None:
        chown_tree(self.workspace, os.getuid(), os.getgid())
        self.root.rmdir()  # only ever a mount point inside the agent's namespace

    def argv(self, agent: list[str]) -> list[str]:
        return command(self.spec, agent)

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


def chown_tree(top: Path, uid: int, gid: int) -> None:
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
    target.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", str(target), "tmpfs", MS_NOSUID | MS_NODEV, options)


def _network(net: str) -> None:
    """Join the network namespace `net` names, or bring up a fresh one's loopback."""
    if net == NET_HOST:
        return
    if net != NET_LOOPBACK:
        fd = os.open(net, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(_libc.setns(fd, CLONE_NEWNET), f"join the network namespace {net}")
        finally:
            os.close(fd)
    loopback_up()


def loopback_up() -> None:
    """`ip link set lo up` in the calling thread's network namespace (a new one has it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _build(spec: Spec) -> None:
    _network(spec.net)
    r = Path(spec.root)
    _mount("tmpfs", str(r), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for name in [*spec.system, *SYSTEM_LINKS]:
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
    if spec.home is not None:
        _tmpfs(r / spec.home.lstrip("/"), f"mode=0700,size=256m,uid={spec.uid},gid={spec.gid}")
    for m in spec.mounts:
        source = Path(m.source)
        _bind(source, _placeholder(source, r / m.target.lstrip("/")), writable=m.writable)
    old = r / ".old"
    old.mkdir()
    pivot = SYS_PIVOT_ROOT[platform.machine()]
    _check(_libc.syscall(pivot, str(r).encode(), str(old).encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    Path("/.old").rmdir()
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _drop(spec: Spec) -> None:
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):  # nothing a later exec could gain back
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    os.setgroups([])
    os.setresgid(spec.gid, spec.gid, spec.gid)
    os.setresuid(spec.uid, spec.uid, spec.uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # unshare --kill-child set this, and the uid change cleared it: without it the program
    # would outlive an unshare that was killed
    _check(_libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "parent-death signal")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python sandbox.py SPEC_JSON -- PROGRAM...", file=sys.stderr)
        return 2
    try:
        spec = Spec.from_json(argv[0])
    except (ValueError, TypeError) as e:
        print(f"sreforge sandbox: malformed spec: {e}", file=sys.stderr)
        return 2
    try:
        _build(spec)
        _drop(spec)
        os.chdir(spec.cwd)
    except OSError as e:
        print(f"sreforge sandbox: could not build the view: {e}", file=sys.stderr)
        return 125
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as e:
        print(f"sreforge sandbox: cannot run {argv[2]!r} inside the sandbox: {e}", file=sys.stderr)
        lent = ", ".join(m.target for m in spec.mounts) or "nothing else"
        print(f"  (only the OS and {lent} are visible)", file=sys.stderr)
        return 127
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
