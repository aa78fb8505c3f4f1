"""A real Kubernetes control plane for tests, run as local processes.

``ControlPlane`` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (which fakes the kubelet of one Node object) on
127.0.0.1 with free ports, all state and logs in one work directory. The
binaries come from ``hack/k8s-tools.sh`` (see ``find_tools_bin``).

    with ControlPlane(bin_dir, tmp_path) as cp:
        subprocess.run([bin_dir / "kubectl", "--kubeconfig", cp.kubeconfig, "get", "nodes"])

Authentication is a static token (``cp.token``) in group system:masters;
authorization is ``Node,RBAC``, so RBAC rules of other identities are real.
The serving certificate is the self-signed one kube-apiserver makes in its
``--cert-dir``; the kubeconfig trusts the CA of that bundle (``cp.ca_file``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_COMMAND = "bash hack/k8s-tools.sh"


def kube_scenarios() -> list[str]:
    """The bundled scenarios that run on Kubernetes (`runtimes` in their scenario.toml)."""
    from sreforge.scenarios import load_scenario  # noqa: PLC0415 (control-plane users need not)

    return sorted(
        p.parent.name
        for p in (REPO_ROOT / "scenarios").glob("*/scenario.toml")
        if "kube" in load_scenario(p.parent).runtimes
    )


REQUIRED_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)
# kwok's default Stage config (node initialize/heartbeat, pod ready/complete/
# delete), installed next to the binaries by hack/k8s-tools.sh.
KWOK_STAGES = "kwok-stages.yaml"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """The control plane failed to start (the message ends with a log tail)."""


def missing_binaries(bin_dir: Path) -> list[str]:
    """The files of REQUIRED_BINARIES and KWOK_STAGES that bin_dir lacks."""
    missing = [b for b in REQUIRED_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if not (bin_dir / KWOK_STAGES).is_file():
        missing.append(KWOK_STAGES)
    return missing


def find_tools_bin(repo_root: Path = REPO_ROOT) -> Path | None:
    """Locate a complete bin dir built by hack/k8s-tools.sh, or None.

    Looks at $SREFORGE_K8S_BIN, then <repo>/tools/bin, then asks the script
    (``k8s-tools.sh bin-dir``, which builds nothing) for the cache of the
    pinned version set, so a fresh clone finds binaries built earlier.
    """
    candidates: list[Path] = []
    if env := os.environ.get("SREFORGE_K8S_BIN"):
        candidates.append(Path(env))
    candidates.append(repo_root / "tools" / "bin")
    for c in candidates:
        if c.is_dir() and not missing_binaries(c):
            return c
    script = repo_root / "hack" / "k8s-tools.sh"
    if script.is_file():
        res = subprocess.run(
            ["bash", str(script), "bin-dir"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if res.returncode == 0 and res.stdout.strip():
            path = Path(res.stdout.strip())
            if path.is_dir() and not missing_binaries(path):
                return path
    return None


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (all held open until chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(data.splitlines()[-lines:])


def _write_service_account_keys(key: Path, pub: Path) -> None:
    """An RSA key pair for signing service-account tokens (PEM files)."""
    try:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415
    except ImportError:
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
            check=True,
            capture_output=True,
        )
        return
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    key.chmod(0o600)


def _write_ca_of_bundle(bundle: Path, out: Path) -> None:
    """Write the CA part of the apiserver's self-signed bundle (leaf, then CA).

    kube-apiserver writes its serving certificate followed by the CA that
    signed it; clients and the controller-manager's --root-ca-file (published
    as kube-root-ca.crt and a ClusterTrustBundle) need the CA alone.
    """
    blocks = re.findall(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", bundle.read_text(), re.S
    )
    if not blocks:
        raise ControlPlaneError(f"no certificate in {bundle}")
    out.write_text("\n".join(blocks[1:] or blocks) + "\n")


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok, on 127.0.0.1.

    Attributes once started: ``kubeconfig`` (Path of an admin kubeconfig),
    ``server`` (https URL), ``token`` (admin bearer token), ``ca_file`` (the CA
    of the apiserver's self-signed serving certificate),
    ``node_name`` (the fake Node kwok manages; ``pod_cidr`` the range its pods' IPs
    come from, kwok's 10.0.0.0/24 unless set), ``timings`` (seconds from
    start() to etcd healthy, apiserver /readyz ok, all components healthy and
    the Node Ready).
    """

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

    def __init__(
        self,
        bin_dir: str | os.PathLike[str],
        work_dir: str | os.PathLike[str],
        *,
        node_name: str = "kwok-node-0",
        kwok: bool = True,
        pod_cidr: str | None = None,
        start_timeout: float = 180.0,
        stop_timeout: float = 15.0,
        bind_address: str = "127.0.0.1",
        identities: dict[str, tuple[str, str]] | None = None,
        apiserver_args: tuple[str, ...] = (),
    ) -> None:
        """``bind_address``: where the apiserver listens and what it advertises (a real node's
        pods reach it there: tests/localcluster.py binds it on the pod bridge's gateway).
        ``identities``: more static-token users, ``{token: (user, "group1,group2")}`` (the
        kubelet, kube-proxy, CoreDNS of a real node). ``apiserver_args``: appended flags."""
        self.bind_address = bind_address
        self.identities = dict(identities or {})
        self.apiserver_args = apiserver_args
        self.bin_dir = Path(bin_dir)
        self.work_dir = Path(work_dir)
        self.node_name = node_name
        self.kwok = kwok
        self.pod_cidr = pod_cidr
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.token = secrets.token_hex(24)
        self.log_dir = self.work_dir / "logs"
        self.cert_dir = self.work_dir / "apiserver-certs"
        self.serving_cert = self.cert_dir / "apiserver.crt"
        self.ca_file = self.work_dir / "ca.crt"
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.server = ""
        self.timings: dict[str, float] = {}
        self.started_at = 0.0  # time.monotonic() when start() began
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._ports: dict[str, int] = {}
        self._ssl: ssl.SSLContext | None = None
        self._deadline = 0.0

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start every component and wait until the fake Node is Ready.

        With ``kwok=False`` neither kwok nor its Node is started: the caller brings
        the node (tests/standin runs pods for real as a kubelet stand-in).
        """
        if self._procs:
            raise ControlPlaneError("already started")
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)} "
                f"(build them with: {BUILD_COMMAND})"
            )
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        t0 = self.started_at = time.monotonic()
        self._deadline = t0 + self.start_timeout
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        names = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
        self._ports = dict(zip(names, _free_ports(len(names)), strict=True))
        self.server = f"https://{self.bind_address}:{self._ports['apiserver']}"

        self._start_etcd()
        self._wait_http("etcd", f"http://127.0.0.1:{self._ports['etcd']}/health", b'"true"')
        self.timings["etcd_healthy"] = time.monotonic() - t0

        self._start_apiserver()
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # only until the CA is known; all on 127.0.0.1
        readyz = f"{self.server}/readyz"
        self._wait_http("kube-apiserver", readyz, b"ok", auth=True, context=insecure)
        self.timings["apiserver_readyz"] = time.monotonic() - t0
        # it serves only once its certificate is written: from now on verify TLS
        _write_ca_of_bundle(self.serving_cert, self.ca_file)
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        self._wait_http("kube-apiserver", readyz, b"ok", auth=True)
        self._write_kubeconfig(self.kubeconfig)

        self._start_controller_manager()
        self._start_scheduler()
        if self.kwok:
            self._start_kwok()
        # the controller-manager and scheduler serve healthz with their own
        # self-signed certificates
        cm_url = f"https://127.0.0.1:{self._ports['controller-manager']}/healthz"
        sched_url = f"https://127.0.0.1:{self._ports['scheduler']}/healthz"
        self._wait_http("kube-controller-manager", cm_url, b"ok", context=insecure)
        self._wait_http("kube-scheduler", sched_url, b"ok", context=insecure)
        if not self.kwok:
            self.timings["components_healthy"] = time.monotonic() - t0
            return
        self._wait_http("kwok", f"http://127.0.0.1:{self._ports['kwok']}/healthz", b"ok")
        self.timings["components_healthy"] = time.monotonic() - t0

        self._create_node()
        self._wait_node_ready()
        self.timings["node_ready"] = time.monotonic() - t0

    def stop(self) -> None:
        """SIGTERM the processes this object started, SIGKILL those still up."""
        procs = [(n, p) for n, p in reversed(self._procs.items()) if p.poll() is None]
        for _, p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for _, p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        for f in self._logs.values():
            f.close()
        self._procs.clear()
        self._logs.clear()
        atexit.unregister(self.stop)

    def stop_component(self, component: str) -> None:
        """Stop one running component (SIGTERM, SIGKILL after stop_timeout)."""
        proc = self._procs.get(component)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def install_crds(self, crds_dir: Path = REPO_ROOT / "crds") -> None:
        """Apply the CRDs of ``crds_dir``, wait until each is Established and the sreforge.dev
        group is discoverable (discovery lags Established by a moment)."""
        self.kubectl("apply", "--server-side", "--field-manager=sreforge-test", "-f", str(crds_dir))
        names = sorted(f"crd/{p.name.removesuffix('.yaml')}" for p in crds_dir.glob("*.yaml"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        wait_for(
            "the sreforge.dev API to be discoverable",
            lambda: self.kubectl("get", "incidents", "-A", check=False).returncode == 0,
        )

    def restart(self, component: str, down_seconds: float = 2.0, timeout: float = 120.0) -> None:
        """Stop one component (SIGTERM, SIGKILL after stop_timeout), keep it down for
        ``down_seconds``, start it again with the same arguments and port and wait until it
        is healthy. Its state survives: etcd keeps its data dir, the apiserver its keys."""
        if component not in ("etcd", "kube-apiserver"):
            raise ControlPlaneError(f"restart of {component} is not supported")
        proc = self._procs[component]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self._logs.pop(component).close()
        time.sleep(down_seconds)
        args = proc.args
        assert isinstance(args, list)
        self._spawn(component, [str(a) for a in args])
        self._deadline = time.monotonic() + timeout
        if component == "etcd":
            self._wait_http("etcd", f"http://127.0.0.1:{self._ports['etcd']}/health", b'"true"')
        else:
            self._wait_http("kube-apiserver", f"{self.server}/readyz", b"ok", auth=True)

    # ------------------------------------------------------------ introspection
    def log_path(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self._procs.items() if p.poll() is None}

    def rss_bytes(self) -> dict[str, int]:
        """Resident set size of each running component, from /proc."""
        out: dict[str, int] = {}
        for name, pid in self.pids().items():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) * 1024
        return out

    def kubectl(
        self, *args: str, check: bool = True, input_text: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane."""
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input_text,
            timeout=timeout,
            check=check,
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to the apiserver as the admin; returns the decoded body."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, context=self._ssl, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    # ------------------------------------------------------------ components
    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = self.log_path(name).open("ab")
        self._logs[name] = log
        log.write(f"### {' '.join(args)}\n".encode())
        log.flush()
        self._procs[name] = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not them
        )

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self._ports['etcd']}"
        peer = f"http://127.0.0.1:{self._ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=sreforge",
                f"--data-dir={self.work_dir / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=sreforge={peer}",
                "--unsafe-no-fsync=true",  # test data; speeds up every write
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        tokens = self.work_dir / "tokens.csv"
        lines = [f'{self.token},sreforge-admin,sreforge-admin,"system:masters"']
        for tok, (user, groups) in self.identities.items():
            lines.append(f'{tok},{user},{user},"{groups}"')
        tokens.write_text("\n".join(lines) + "\n")
        tokens.chmod(0o600)
        sa_key, sa_pub = self.work_dir / "sa.key", self.work_dir / "sa.pub"
        _write_service_account_keys(sa_key, sa_pub)
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self._ports['etcd']}",
                f"--bind-address={self.bind_address}",
                f"--advertise-address={self.bind_address}",
                f"--secure-port={self._ports['apiserver']}",
                f"--cert-dir={self.cert_dir}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                # on 127.0.0.1 the "kubernetes" Service would get invalid endpoints
                *(["--endpoint-reconciler-type=none"] if self.bind_address == "127.0.0.1" else []),
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *self.apiserver_args,
            ],
        )

    def _component_kubeconfig(self, name: str) -> Path:
        path = self.work_dir / f"{name}.kubeconfig"
        self._write_kubeconfig(path)
        return path

    def _start_controller_manager(self) -> None:
        kc = self._component_kubeconfig("kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._ports['controller-manager']}",
                f"--cert-dir={self.work_dir / 'controller-manager-certs'}",
                f"--service-account-private-key-file={self.work_dir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        kc = self._component_kubeconfig("kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._ports['scheduler']}",
                f"--cert-dir={self.work_dir / 'scheduler-certs'}",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_kwok(self) -> None:
        kc = self._component_kubeconfig("kwok")
        home = self.work_dir / "kwok-home"  # keeps ~/.kwok/kwok.yaml out of it
        home.mkdir(exist_ok=True)
        self._spawn(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={kc}",
                f"--config={self.bin_dir / KWOK_STAGES}",
                # only its own fake Node: a Node someone else runs (the pod stand-in
                # of tests/standin) is left to them
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{self._ports['kwok']}",
                *([f"--cidr={self.pod_cidr}"] if self.pod_cidr else []),
            ],
            env={**os.environ, "HOME": str(home)},
        )

    def _write_kubeconfig(self, path: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "sreforge",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "sreforge-admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "sreforge",
                    "context": {
                        "cluster": "sreforge",
                        "user": "sreforge-admin",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": "sreforge",
        }
        path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        path.chmod(0o600)

    def _create_node(self) -> None:
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {
                "allocatable": resources,
                "capacity": resources,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                },
            },
        }
        self.request("POST", "/api/v1/nodes", node)

    # ------------------------------------------------------------ waiting
    def _fail(self, component: str, what: str) -> ControlPlaneError:
        log = self.log_path(component)
        return ControlPlaneError(f"{component}: {what}\n--- last lines of {log} ---\n{_tail(log)}")

    def _check_alive(self, waiting_for: str) -> None:
        for name, proc in self._procs.items():
            rc = proc.poll()
            if rc is not None:
                raise self._fail(name, f"exited with code {rc} while waiting for {waiting_for}")

    def _until(self, component: str, what: str, probe: Any, interval: float = 0.2) -> None:
        last = ""
        while True:
            self._check_alive(what)
            try:
                result = probe()
            except (OSError, urllib.error.URLError, ValueError) as e:
                result, last = False, str(e)
            if result:
                return
            if time.monotonic() > self._deadline:
                raise self._fail(component, f"timed out waiting for {what} (last: {last})")
            time.sleep(interval)

    def _wait_http(
        self,
        component: str,
        url: str,
        expect: bytes,
        *,
        auth: bool = False,
        context: ssl.SSLContext | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        ctx = context if context is not None else self._ssl

        def probe() -> bool:
            req = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    return resp.status == 200 and expect in resp.read()
            except urllib.error.HTTPError:
                return False

        self._until(component, url, probe)

    def _wait_node_ready(self) -> None:
        def probe() -> bool:
            node = self.request("GET", f"/api/v1/nodes/{self.node_name}")
            conditions = node.get("status", {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        self._until("kwok", f"node {self.node_name} to be Ready", probe, interval=0.5)


def wait_for(what: str, probe: Any, timeout: float = 90.0, interval: float = 0.25) -> Any:
    """Poll ``probe()`` until it returns something truthy; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
