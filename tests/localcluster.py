"""A real single-node Kubernetes cluster on this machine: real pods on a real kubelet.

``LocalCluster`` starts, all as local processes that it stops by PID:

- the control plane of ``tests/kubeenv.py`` (etcd, kube-apiserver, controller-manager,
  scheduler), its apiserver bound on the pod bridge's gateway address so that pods reach it
  through the ``kubernetes`` Service;
- Debian's containerd (1.6) with its CRI plugin, on ``/run/containerd/containerd.sock``
  (kubelet's cAdvisor finds container labels only there), runc, and the CNI bridge plugin
  from ``/usr/lib/cni``;
- kubelet and kube-proxy (iptables mode) built by ``hack/k8s-tools.sh`` from the same
  ``k8s.io/kubernetes`` version as the control plane;
- CoreDNS (built from its Go module) as a host process serving ``cluster.local`` on the
  bridge address, behind the Service ``kube-system/kube-dns`` (10.96.0.10).

The pod network is the bridge ``sfbr0`` (10.244.0.0/24, gateway 10.244.0.1) that this module
creates and deletes. It is never routed off the machine: forwarding between the bridge and
any other interface is dropped, and nothing is masqueraded. Every sysctl it, kubelet or the
CNI plugin change is saved before and restored after, and so are the iptables rulesets.

Images are never pulled: ``hack/images.sh`` builds them and imports them into this
containerd, whose image store (its ``root``) is kept in a cache directory across runs.

    with LocalCluster(bin_dir, work_dir) as cluster:
        cluster.kubectl("get", "nodes")

From a shell: ``hack/local-cluster.sh up|down|status`` (it runs ``python -m
tests.localcluster``; ``up`` leaves the processes running and writes their PIDs to the work
directory, ``down`` stops them by those PIDs and undoes the host changes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tests.kubeenv import REPO_ROOT, ControlPlane, ControlPlaneError, find_tools_bin, wait_for

BRIDGE = "sfbr0"
GATEWAY = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
DNS_IP = "10.96.0.10"
NODE_NAME = "sreforge-node"
CONTAINERD_SOCK = Path("/run/containerd/containerd.sock")
CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "docker.io/sreforge/pause:3.10"
CACHE = Path(os.environ.get("SREFORGE_CACHE", Path.home() / ".cache" / "sreforge"))
# containerd's image store survives a cluster: images are imported once (hack/images.sh)
CONTAINERD_ROOT = CACHE / "containerd"
# Settings the bridge plugin, kubelet or kube-proxy change (K8S-TEST-ENV.md) and the one this
# module sets; saved before anything starts, written back after everything stopped.
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.ipv4.conf.all.route_localnet",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
# the iptables front ends whose rulesets are saved and restored
IPTABLES = (
    ("iptables-nft-save", "iptables-nft-restore"),
    ("ip6tables-nft-save", "ip6tables-nft-restore"),
    ("iptables-legacy-save", "iptables-legacy-restore"),
    ("ip6tables-legacy-save", "ip6tables-legacy-restore"),
)
BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns")
HOST_COMMANDS = ("containerd", "runc", "ctr", "ip", "iptables", "nft", "openssl")


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=check)


def missing_prerequisites(bin_dir: Path | None) -> list[str]:
    """What this machine lacks for a real node (binaries, Debian commands, root, CNI)."""
    missing: list[str] = []
    if bin_dir is None:
        missing.append("control-plane binaries (bash hack/k8s-tools.sh)")
    else:
        missing += [
            f"{b} (bash hack/k8s-tools.sh)"
            for b in NODE_BINARIES
            if not os.access(bin_dir / b, os.X_OK)
        ]
    missing += [
        f"{c} (bash scripts/setup.sh --cluster)" for c in HOST_COMMANDS if not shutil.which(c)
    ]
    if not (CNI_BIN / "bridge").is_file():
        missing.append(f"{CNI_BIN}/bridge (containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


class HostState:
    """The host settings a cluster changes, saved to a file so that `down` (maybe another
    process) writes them back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def save(self) -> None:
        if self.path.exists():  # a cluster that was never brought down: keep the first save
            return
        sysctls = {}
        for key in SYSCTLS:
            with contextlib.suppress(OSError):
                sysctls[key] = _sysctl_path(key).read_text().strip()
        rules = {}
        for save, _ in IPTABLES:
            if shutil.which(save):
                res = _run(save, check=False)
                if res.returncode == 0:
                    rules[save] = res.stdout
        state = {
            "sysctls": sysctls,
            "iptables": rules,
            "nft_tables": _nft_tables(),
            "run_containerd": CONTAINERD_SOCK.parent.exists(),
        }
        self.path.write_text(json.dumps(state, indent=1))

    def restore(self) -> list[str]:
        """Write every saved value back; returns what could not be restored."""
        if not self.path.exists():
            return []
        saved = json.loads(self.path.read_text())
        problems = []
        # nftables tables made since (iptables-nft makes one per table it is asked to use)
        before = {tuple(t) for t in saved.get("nft_tables", [])}
        for family, table in _nft_tables():
            if (family, table) not in before:
                res = _run("nft", "delete", "table", family, table, check=False)
                if res.returncode != 0:
                    problems.append(f"nft delete table {family} {table}: {res.stderr.strip()}")
        for save, restore in IPTABLES:
            if save not in saved["iptables"] or not shutil.which(restore):
                continue
            text = saved["iptables"][save]
            # iptables-restore replaces each table it is given, and only those: a table that
            # was empty before is given as an empty one (flushed, user chains deleted)
            now = _run(save, check=False).stdout
            for table in set(_tables_of(now)) - set(_tables_of(text)):
                chains = "".join(f":{c} ACCEPT [0:0]\n" for c in BUILTIN_CHAINS.get(table, ()))
                text += f"*{table}\n{chains}COMMIT\n"
            if not text.strip():
                continue
            res = subprocess.run([restore], input=text, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                problems.append(f"{restore}: {res.stderr.strip()}")
        if not saved.get("run_containerd", True):
            # containerd's socket directory and its shims' state, made by this cluster
            shutil.rmtree(CONTAINERD_SOCK.parent, ignore_errors=True)
        for key, value in saved["sysctls"].items():
            try:
                path = _sysctl_path(key)
                if path.read_text().strip() != value:
                    path.write_text(value + "\n")
            except OSError as e:
                problems.append(f"{key}={value}: {e}")
        self.path.unlink()
        return problems


def _nft_tables() -> list[tuple[str, str]]:
    """(family, name) of every nftables table (``nft list tables``)."""
    if not shutil.which("nft"):
        return []
    res = _run("nft", "list", "tables", check=False)
    return [
        (w[1], w[2])
        for w in (line.split() for line in res.stdout.splitlines())
        if len(w) == 3 and w[0] == "table"
    ]


def _tables_of(saved: str) -> list[str]:
    return [line[1:].strip() for line in saved.splitlines() if line.startswith("*")]


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a live process (field 22 of /proc/PID/stat), which tells a
    PID from a later process that reuses it; None when no such process lives (a zombie,
    which waits only to be reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


class BridgeClaim:
    """The machine-wide record of the one local cluster that owns the pod bridge.

    There is one bridge, so there is at most one cluster. Its owner (the process that
    started it) writes this record before it makes the bridge and adds the PID of each
    process it starts; it removes the record when it stops. A run that was killed before it
    could stop leaves the bridge, its mounts and maybe some processes; the next start finds
    the record and reclaims what it names, instead of refusing every later run. A cluster
    whose owner lives, or one that ``hack/local-cluster.sh up`` left running on purpose, is
    never touched: the start is refused and says which and how to stop it.
    """

    def __init__(self, bridge: str = BRIDGE, path: Path = Path("/run/sreforge/local-cluster.json")):
        self.bridge = bridge
        self.path = path

    def bridge_exists(self) -> bool:
        return Path(f"/sys/class/net/{self.bridge}").exists()

    def read(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)

    def claim(self, work_dir: Path) -> None:
        me = os.getpid()
        self._write(
            {
                "owner": [me, _start_time(me)],
                "work_dir": str(work_dir),
                "persistent": False,
                "pids": {},
            }
        )

    def record_pids(self, pids: dict[str, int]) -> None:
        data = self.read()
        if data is None:
            return
        data["pids"] = {name: [pid, _start_time(pid)] for name, pid in pids.items()}
        self._write(data)

    def mark_persistent(self) -> None:
        """The cluster outlives its owner on purpose (``hack/local-cluster.sh up``)."""
        data = self.read()
        if data is not None:
            data["persistent"] = True
            self._write(data)

    def release(self) -> None:
        self.path.unlink(missing_ok=True)

    @staticmethod
    def _alive(entry: list[Any]) -> bool:
        pid, started = entry
        return started is not None and _start_time(int(pid)) == started

    def stale(self) -> dict[str, Any] | None:
        """None when the bridge is free; the record of a dead run's leftovers when they may
        be reclaimed; raises ControlPlaneError naming the live cluster otherwise."""
        data = self.read()
        if data is None:
            if not self.bridge_exists():
                return None
            raise ControlPlaneError(
                f"bridge {self.bridge} exists and no cluster record is at {self.path}: it was "
                "not made by this version of tests/localcluster.py; delete it by hand "
                f"(ip link del {self.bridge}) if nothing uses it"
            )
        work_dir = data.get("work_dir", "?")
        if self._alive(data["owner"]):
            raise ControlPlaneError(
                f"bridge {self.bridge} is owned by a local cluster that runs: process "
                f"{data['owner'][0]} started it in {work_dir}"
            )
        live = sorted(name for name, entry in data["pids"].items() if self._alive(entry))
        if data.get("persistent") and live:
            raise ControlPlaneError(
                f"a local cluster started by hack/local-cluster.sh up runs in {work_dir} "
                f"({', '.join(live)}); hack/local-cluster.sh down --dir {work_dir} stops it"
            )
        return data

    def stop_leftovers(self, data: dict[str, Any]) -> list[str]:
        """Stop, by the PIDs the record names, the processes of a dead run that still live
        (a PID reused by another process is left alone); returns their names."""
        stopped = []
        for name, entry in data["pids"].items():
            if self._alive(entry):
                _kill(int(entry[0]))
                stopped.append(name)
        return stopped


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2))  # JSON is valid YAML


class LocalCluster:
    """A control plane and one real node (containerd, kubelet, kube-proxy, CoreDNS)."""

    def __init__(
        self,
        bin_dir: Path,
        work_dir: Path,
        *,
        start_timeout: float = 180.0,
        log: IO[str] | None = None,
        load_images: bool = True,
        claim: BridgeClaim | None = None,
    ) -> None:
        """``load_images``: import the images of ``hack/images.sh`` into containerd once it
        is up (``hack/images.sh load``), before the kubelet starts."""
        self.load_images = load_images
        self.bin_dir = Path(bin_dir)
        self.work_dir = Path(work_dir).resolve()
        self.start_timeout = start_timeout
        self.log = log or sys.stderr
        self.tokens = {
            name: os.urandom(16).hex() for name in ("kubelet", "kube-proxy", "coredns", "operator")
        }
        self.cp = ControlPlane(
            self.bin_dir,
            self.work_dir / "control-plane",
            kwok=False,
            bind_address=GATEWAY,
            start_timeout=start_timeout,
            identities={
                self.tokens["kubelet"]: (f"system:node:{NODE_NAME}", "system:nodes"),
                self.tokens["kube-proxy"]: ("system:kube-proxy", "system:node-proxier"),
                self.tokens["coredns"]: ("system:coredns", "sreforge:coredns"),
            },
            apiserver_args=(
                f"--kubelet-client-certificate={self.work_dir / 'pki' / 'apiserver-kubelet.crt'}",
                f"--kubelet-client-key={self.work_dir / 'pki' / 'apiserver-kubelet.key'}",
                # the node's name resolves nowhere on this machine: exec, logs and the node
                # proxy (cAdvisor) reach the kubelet at its InternalIP, the bridge address
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ),
        )
        self.host = HostState(self.work_dir / "host-state.json")
        self.claim = claim or BridgeClaim()
        self._t0 = time.monotonic()  # say()'s clock; start() restarts it
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self.timings: dict[str, float] = {}
        self.kubeconfig = self.cp.kubeconfig

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def say(self, msg: str) -> None:
        print(f"[local-cluster {time.monotonic() - self._t0:5.1f}s] {msg}", file=self.log)

    def start(self) -> LocalCluster:
        self._t0 = time.monotonic()
        missing = missing_prerequisites(self.bin_dir)
        if missing:
            raise ControlPlaneError("cannot start a real node; missing: " + ", ".join(missing))
        self.reclaim()
        for d in ("pki", "logs", "cni/net.d", "cni/ipam", "kubelet", "containerd-state"):
            (self.work_dir / d).mkdir(parents=True, exist_ok=True)
        self.host.save()
        self.claim.claim(self.work_dir)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def reclaim(self) -> str | None:
        """Undo what a killed run left (its record names it): stop its processes that still
        live, unmount, delete its bridge and write its host settings back. Returns what was
        done, None when there was nothing; raises ControlPlaneError when a live cluster owns
        the bridge."""
        stale = self.claim.stale()
        if stale is None:
            return None
        stopped = self.claim.stop_leftovers(stale)
        pods = _kill_orphan_pods()
        if pods:
            stopped.append(f"{pods} pod process(es) and their shims")
        dead = LocalCluster(self.bin_dir, Path(stale["work_dir"]), log=self.log, claim=self.claim)
        dead._cleanup_host()
        self.claim.release()
        done = (
            f"reclaimed the local cluster that process {stale['owner'][0]} left in "
            f"{stale['work_dir']} (stopped: {', '.join(stopped) or 'nothing was running'})"
        )
        self.say(done)
        return done

    def _start(self) -> None:
        self._make_bridge()
        self._make_pki()
        self.say("control plane")
        self.cp.start()
        self.claim.record_pids(self.pids())
        self.timings["control_plane"] = time.monotonic() - self._t0
        self._start_containerd()
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_coredns()
        self._wait_node_ready()
        self.timings["node_ready"] = time.monotonic() - self._t0
        self.say(f"node {NODE_NAME} Ready")

    def stop(self) -> None:
        """Stop the pods, then every process by PID, then undo the host changes."""
        if self.cp.pids():
            self._drain_pods()
        for name in ("coredns", "kube-proxy", "kubelet"):
            self._stop_proc(name)
        self._remove_leftover_containers()
        self._stop_proc("containerd")
        self.cp.stop()
        self._cleanup_host()
        self.claim.release()
        for f in self._logs.values():
            f.close()
        self._logs.clear()

    # ------------------------------------------------------------ host network
    def _make_bridge(self) -> None:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        # bridged pod-to-Service traffic must pass kube-proxy's iptables rules
        _sysctl_path("net.bridge.bridge-nf-call-iptables").write_text("1\n")
        _sysctl_path("net.ipv4.ip_forward").write_text("1\n")
        # never routed off the machine: nothing is forwarded between the bridge and another
        # link (mangle's FORWARD runs before filter's, where kube-proxy's ACCEPTs are)
        for rule in (
            ["-s", POD_CIDR, "!", "-o", BRIDGE, "-j", "DROP"],
            ["-d", POD_CIDR, "!", "-i", BRIDGE, "-j", "DROP"],
            ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
        ):
            _run("iptables", "-t", "mangle", "-I", "FORWARD", "1", *rule)

    def _cleanup_host(self) -> None:
        if self.claim.bridge_exists():
            _run("ip", "link", "del", self.claim.bridge, check=False)
        kubelet_dir = self.work_dir / "kubelet"
        # kubelet bind-mounts its root dir onto itself; pods' volumes are mounted below it
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(kubelet_dir))
            or line.split()[1].startswith(str(self.work_dir / "containerd-state"))
        ]
        for m in sorted(mounts, key=len, reverse=True):
            _run("umount", "-l", m, check=False)
        # the pods' network namespaces; one with a process in it is a live pod's, not ours
        for netns in Path("/run/netns").glob("cni-*") if Path("/run/netns").is_dir() else []:
            if not _run("ip", "netns", "pids", netns.name, check=False).stdout.strip():
                _run("ip", "netns", "delete", netns.name, check=False)
        _remove_cgroups("kubepods")
        problems = self.host.restore()
        for p in problems:
            self.say(f"could not restore {p}")

    # ------------------------------------------------------------ certificates
    def _make_pki(self) -> None:
        """A CA that the kubelet trusts for client certificates, and the apiserver's client
        certificate for the kubelet API (logs, exec)."""
        pki = self.work_dir / "pki"
        if (pki / "apiserver-kubelet.crt").exists():
            return
        _run(
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=sreforge-kubelet-client-ca",
            "-keyout",
            str(pki / "ca.key"),
            "-out",
            str(pki / "ca.crt"),
        )
        _run(
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "-keyout",
            str(pki / "apiserver-kubelet.key"),
            "-out",
            str(pki / "apiserver-kubelet.csr"),
        )
        _run(
            "openssl",
            "x509",
            "-req",
            "-in",
            str(pki / "apiserver-kubelet.csr"),
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            str(pki / "apiserver-kubelet.crt"),
        )

    def _kubeconfig_for(self, name: str) -> Path:
        path = self.work_dir / f"{name}.kubeconfig"
        _write_json(
            path,
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": self.cp.server,
                            "certificate-authority": str(self.cp.ca_file),
                        },
                    }
                ],
                "users": [{"name": name, "user": {"token": self.tokens[name]}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": name}}],
                "current-context": "local",
            },
        )
        path.chmod(0o600)
        return path

    # ------------------------------------------------------------ processes
    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.work_dir / "logs" / f"{name}.log").open("ab")
        self._logs[name] = log
        log.write(f"### {' '.join(args)}\n".encode())
        log.flush()
        self.procs[name] = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            start_new_session=True,
        )
        (self.work_dir / f"{name}.pid").write_text(str(self.procs[name].pid))
        self.claim.record_pids(self.pids())

    def _stop_proc(self, name: str, timeout: float = 15) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def _alive(self, what: str) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = _tail(self.work_dir / "logs" / f"{name}.log")
                raise ControlPlaneError(
                    f"{name} exited ({proc.returncode}) while waiting for {what}\n{tail}"
                )

    def _wait(self, what: str, probe: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._alive(what)
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.25)

    # ------------------------------------------------------------ containerd
    def _start_containerd(self) -> None:
        if CONTAINERD_SOCK.exists():
            res = _run("ctr", "-a", str(CONTAINERD_SOCK), "version", check=False, timeout=5)
            if res.returncode == 0:
                raise ControlPlaneError(
                    f"a containerd already serves {CONTAINERD_SOCK}; this cluster runs its own"
                )
            CONTAINERD_SOCK.unlink()
        CONTAINERD_ROOT.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "containerd.toml"
        cfg.write_text(
            f"""version = 2
root = "{CONTAINERD_ROOT}"
state = "{self.work_dir / "containerd-state"}"
[grpc]
  address = "{CONTAINERD_SOCK}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # root lacks CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj (K8S-TEST-ENV.md)
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.work_dir / "cni" / "net.d"}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""
        )
        _write_json(
            self.work_dir / "cni" / "net.d" / "10-sreforge.conflist",
            {
                "cniVersion": "0.4.0",
                "name": "sreforge",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": False,  # never masqueraded off the machine
                        "hairpinMode": True,  # a pod reaching itself through its Service
                        "ipam": {
                            "type": "host-local",
                            "ranges": [
                                [
                                    {
                                        "subnet": POD_CIDR,
                                        "rangeStart": "10.244.0.10",
                                        "gateway": GATEWAY,
                                    }
                                ]
                            ],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(self.work_dir / "cni" / "ipam"),
                        },
                    }
                ],
            },
        )
        self.say("containerd")
        self._spawn("containerd", ["containerd", "--config", str(cfg)])
        self._wait(
            "containerd",
            lambda: _run("ctr", "-a", str(CONTAINERD_SOCK), "version", timeout=5).returncode == 0,
        )
        script = REPO_ROOT / "hack" / "images.sh"
        if self.load_images and script.is_file():
            # imports what hack/images.sh built and this image store lacks (fast when warm)
            self.say("images (hack/images.sh load)")
            subprocess.run(
                ["bash", str(script), "load", "--address", str(CONTAINERD_SOCK)],
                check=True,
                timeout=900,
            )
        res = _run("ctr", "-a", str(CONTAINERD_SOCK), "-n", "k8s.io", "images", "ls", "-q")
        if PAUSE_IMAGE not in res.stdout.split():
            raise ControlPlaneError(
                f"containerd has no {PAUSE_IMAGE}: build and import the images first "
                "(bash hack/images.sh all)"
            )

    # ------------------------------------------------------------ kubelet
    def _start_kubelet(self) -> None:
        resolv = self.work_dir / "resolv.conf"
        resolv.write_text(f"nameserver {GATEWAY}\n")
        cfg = self.work_dir / "kubelet.yaml"
        _write_json(
            cfg,
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": GATEWAY,
                "port": 10250,
                "readOnlyPort": 0,
                "healthzBindAddress": "127.0.0.1",
                "healthzPort": 10248,
                "authentication": {
                    "anonymous": {"enabled": False},
                    "webhook": {"enabled": True},
                    "x509": {"clientCAFile": str(self.work_dir / "pki" / "ca.crt")},
                },
                "authorization": {"mode": "Webhook"},
                # cgroup v1 is all this machine has (K8S-TEST-ENV.md)
                "failCgroupV1": False,
                "cgroupDriver": "cgroupfs",
                "failSwapOn": False,
                "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCK}",
                "clusterDNS": [DNS_IP],
                "clusterDomain": "cluster.local",
                "resolvConf": str(resolv),
                "serializeImagePulls": False,
                "evictionHard": {
                    "memory.available": "200Mi",
                    "nodefs.available": "2%",
                    "imagefs.available": "2%",
                },
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "maxPods": 60,
                "syncFrequency": "5s",
                "fileCheckFrequency": "5s",
                "nodeStatusReportFrequency": "10s",
                "nodeStatusUpdateFrequency": "5s",
                "staticPodPath": "",
            },
        )
        self.say("kubelet")
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={cfg}",
                f"--kubeconfig={self._kubeconfig_for('kubelet')}",
                f"--root-dir={self.work_dir / 'kubelet'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                "--v=1",
            ],
        )

    def _wait_node_ready(self) -> None:
        def ready() -> bool:
            node = self.cp.request("GET", f"/api/v1/nodes/{NODE_NAME}")
            conds = node.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        self._wait(f"node {NODE_NAME} Ready", ready, timeout=self.start_timeout)

    # ------------------------------------------------------------ kube-proxy
    def _start_kube_proxy(self) -> None:
        cfg = self.work_dir / "kube-proxy.yaml"
        _write_json(
            cfg,
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "mode": "iptables",
                "clientConnection": {"kubeconfig": str(self._kubeconfig_for("kube-proxy"))},
                "hostnameOverride": NODE_NAME,
                "clusterCIDR": POD_CIDR,
                "bindAddress": GATEWAY,
                "healthzBindAddress": "127.0.0.1:10256",
                "metricsBindAddress": "127.0.0.1:10249",
                "nodePortAddresses": [f"{GATEWAY}/32"],
                # 0: leave the host's conntrack sysctls as they are
                "conntrack": {
                    "maxPerCore": 0,
                    "min": 0,
                    "tcpEstablishedTimeout": "0s",
                    "tcpCloseWaitTimeout": "0s",
                },
            },
        )
        self.say("kube-proxy")
        self._spawn("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={cfg}", "--v=1"])

    # ------------------------------------------------------------ CoreDNS
    def _start_coredns(self) -> None:
        self.cp.kubectl("apply", "-f", "-", input_text=json.dumps(_coredns_objects()))
        corefile = self.work_dir / "Corefile"
        corefile.write_text(
            f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self._kubeconfig_for("coredns")} local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""
        )
        self.say("CoreDNS")
        self._spawn("coredns", [str(self.bin_dir / "coredns"), "-conf", str(corefile)])

    # ------------------------------------------------------------ stopping
    def _drain_pods(self) -> None:
        """Delete every pod through the API (the kubelet tears each down: CNI, cgroups,
        mounts) before the node's processes stop; the controller-manager goes first so that
        nothing recreates them."""
        kubelet = self.procs.get("kubelet")
        if kubelet is None or kubelet.poll() is not None:
            return
        self.cp.stop_component("kube-controller-manager")
        self.cp.kubectl("delete", "pods", "--all", "-A", "--wait=false", check=False)
        with contextlib.suppress(TimeoutError):
            wait_for(
                "the kubelet to stop every pod",
                lambda: not _ctr_list("containers"),
                timeout=60,
                interval=0.5,
            )

    def _remove_leftover_containers(self) -> None:
        if not CONTAINERD_SOCK.exists():
            return
        for task in _ctr_list("tasks"):
            _run(
                "ctr",
                "-a",
                str(CONTAINERD_SOCK),
                "-n",
                "k8s.io",
                "tasks",
                "kill",
                "-s",
                "SIGKILL",
                task,
                check=False,
            )
        for c in _ctr_list("containers"):
            _run(
                "ctr",
                "-a",
                str(CONTAINERD_SOCK),
                "-n",
                "k8s.io",
                "tasks",
                "delete",
                "-f",
                c,
                check=False,
            )
            _run(
                "ctr",
                "-a",
                str(CONTAINERD_SOCK),
                "-n",
                "k8s.io",
                "containers",
                "delete",
                c,
                check=False,
            )

    # ------------------------------------------------------------ helpers
    def kubectl(
        self, *args: str, check: bool = True, input_text: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.cp.kubectl(*args, check=check, input_text=input_text, timeout=timeout)

    def pids(self) -> dict[str, int]:
        own = {n: p.pid for n, p in self.procs.items() if p.poll() is None}
        return {**self.cp.pids(), **own}


def _ctr_list(what: str) -> list[str]:
    if not CONTAINERD_SOCK.exists():
        return []
    res = _run(
        "ctr", "-a", str(CONTAINERD_SOCK), "-n", "k8s.io", what, "ls", "-q", check=False, timeout=10
    )
    return res.stdout.split() if res.returncode == 0 else []


def _kill_orphan_pods() -> int:
    """The pods of a killed run outlive its containerd: each container's runc shim is
    reparented to init and keeps it running. Kill every process in the kubelet's pod
    cgroups (``kubepods`` in the v1 pids hierarchy), then the k8s.io shims of this
    cluster's containerd socket, by PID; returns how many pod processes there were."""
    top = Path("/sys/fs/cgroup/pids/kubepods")
    pids: set[int] = set()
    for procs in top.rglob("cgroup.procs") if top.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(line) for line in procs.read_text().split()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        shim = argv and argv[0].endswith(b"containerd-shim-runc-v2")
        if shim and b"k8s.io" in argv and str(CONTAINERD_SOCK).encode() in argv:
            _kill(int(entry.name))
    return len(pids)


def _remove_cgroups(name: str) -> None:
    """rmdir the (empty) cgroup trees kubelet made, deepest first, in every v1 hierarchy."""
    root = Path("/sys/fs/cgroup")
    for hierarchy in root.iterdir() if root.is_dir() else []:
        top = hierarchy / name
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
        for d in [*reversed(dirs), top]:
            with contextlib.suppress(OSError):
                d.rmdir()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _coredns_objects() -> dict[str, Any]:
    """RBAC for CoreDNS's kubernetes plugin and the kube-dns Service in front of the host
    process (a selector-less Service with an EndpointSlice on the bridge gateway)."""
    ports = [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "sreforge:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "pods", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "sreforge:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "sreforge:coredns",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": "sreforge:coredns",
                    }
                ],
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                "spec": {"clusterIP": DNS_IP, "ports": ports},
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kube-dns-host",
                    "namespace": "kube-system",
                    "labels": {"kubernetes.io/service-name": "kube-dns"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
                "ports": ports,
            },
        ],
    }


# ---------------------------------------------------------------- command line
def _state_file(work: Path) -> Path:
    return work / "cluster.json"


def _cmd_up(work: Path) -> int:
    bin_dir = find_tools_bin()
    cluster = LocalCluster(bin_dir or Path("/nonexistent"), work)
    cluster.start()
    state = {
        "pids": cluster.pids(),
        "kubeconfig": str(cluster.kubeconfig),
        "server": cluster.cp.server,
        "tokens": cluster.tokens,
    }
    _state_file(work).write_text(json.dumps(state, indent=1))
    cluster.claim.mark_persistent()
    # leave the processes running: forget them so that nothing stops them at exit
    import atexit  # noqa: PLC0415

    atexit.unregister(cluster.cp.stop)
    print(f"cluster up in {time.monotonic() - cluster._t0:.1f}s")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def _cmd_down(work: Path) -> int:
    state_path = _state_file(work)
    if not state_path.exists():
        if not (work / "host-state.json").exists():
            print(f"no cluster state in {work}", file=sys.stderr)
            return 0
        # a cluster whose processes are gone (its run was killed): undo its host changes
        cluster = LocalCluster(find_tools_bin() or Path("/nonexistent"), work)
        cluster._cleanup_host()
        if (cluster.claim.read() or {}).get("work_dir") == str(work):
            cluster.claim.release()
    else:
        state = json.loads(state_path.read_text())
        bin_dir = find_tools_bin() or Path("/nonexistent")
        kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", state["kubeconfig"]]
        pids: dict[str, int] = state["pids"]
        if "kube-controller-manager" in pids:
            _kill(pids.pop("kube-controller-manager"))
        subprocess.run(
            [*kubectl, "delete", "pods", "--all", "-A", "--wait=false"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        with contextlib.suppress(TimeoutError):
            wait_for("pods to stop", lambda: not _ctr_list("containers"), timeout=60)
        for name in ("coredns", "kube-proxy", "kubelet"):
            if name in pids:
                _kill(pids.pop(name))
        cluster = LocalCluster(bin_dir, work)
        cluster._remove_leftover_containers()
        for name in ("containerd", "kube-scheduler", "kube-apiserver", "etcd"):
            if name in pids:
                _kill(pids.pop(name))
        cluster._cleanup_host()
        cluster.claim.release()
        state_path.unlink()
    print("cluster down")
    return 0


def _kill(pid: int, timeout: float = 15) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _start_time(pid) is None:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hack/local-cluster.sh", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["up", "down", "status"])
    ap.add_argument("--dir", type=Path, default=CACHE / "cluster", help="work directory")
    args = ap.parse_args(argv)
    work: Path = args.dir.resolve()
    if args.command == "up":
        work.mkdir(parents=True, exist_ok=True)
        return _cmd_up(work)
    if args.command == "down":
        return _cmd_down(work)
    if _state_file(work).exists():
        print(_state_file(work).read_text())
        return 0
    print("no cluster")
    return 1


if __name__ == "__main__":
    sys.exit(main())
