"""StandIn: a kubelet + kube-proxy stand-in for one Node of a real control plane.

There is no container runtime on the test machine. The stand-in registers its own Node
(``standin-0``, no kwok annotation), keeps it Ready (Node status heartbeats and a Lease
in kube-node-lease), runs the containers of every pod the real scheduler binds to it as
local processes (tests/standin/pods.py), proxies Services (tests/standin/proxy.py) and
points a real Prometheus at the pods that ask to be scraped (file_sd, labelled as the
chart's Prometheus labels pods: job, namespace, pod, incident, scenario). Everything else
is the real control plane of tests/kubeenv.py.

    with ControlPlane(bin_dir, tmp / "kube", kwok=False) as cp, StandIn(
        cp, tmp / "node", images={"sreforge/catalog:healthy": Image(tree)}
    ) as node:
        ...  # create Deployments, Jobs, Services through the API
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from sreforge.runtime.kube.config import INCIDENT_LABEL, SCENARIO_LABEL
from sreforge.runtime.prometheus import PrometheusServer

from .api import Api, ApiError, WatchExpired
from .pods import Image, PodRunner
from .proxy import Key, ServiceProxies

log = logging.getLogger("standin")

NODE_NAME = "standin-0"
HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
SCRAPE_JOB = "kubernetes-pods"
WATCH_SECONDS = 30
RETRY_SECONDS = 1.0


class Cluster(Protocol):
    """What the stand-in needs of tests/kubeenv.py's ControlPlane."""

    server: str
    token: str
    ca_file: Path


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class StandIn:
    """The kubelet and kube-proxy of Node ``node_name``, as local processes.

    ``images`` maps exact image references to an :class:`Image` (or a bare directory:
    an image whose files are at ``image_path``). ``rule_files`` are loaded by the
    stand-in's Prometheus (``prometheus=False``: none is started).
    """

    def __init__(
        self,
        cluster: Cluster,
        work_dir: str | Path,
        images: Mapping[str, Image | str | Path],
        *,
        node_name: str = NODE_NAME,
        image_path: str = "/app",
        rule_files: Sequence[Path] = (),
        prometheus: bool = True,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.api = Api(cluster.server, cluster.token, cluster.ca_file)
        self.work_dir = Path(work_dir).resolve()
        self.node_name = node_name
        self.images: dict[str, Image] = {
            ref: img if isinstance(img, Image) else Image(Path(img).resolve(), image_path)
            for ref, img in images.items()
        }
        self.heartbeat_seconds = heartbeat_seconds
        self.prometheus: PrometheusServer | None = None
        if prometheus:
            self.prometheus = PrometheusServer(
                self.work_dir / "prometheus", list(rule_files), [SCRAPE_JOB]
            )
        self.stopping = False
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._runners: dict[str, PodRunner] = {}
        self._services: dict[tuple[str, str], dict[str, Any]] = {}
        self._threads: list[threading.Thread] = []
        self._proxies: ServiceProxies | None = None
        self.heartbeats = 0

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> StandIn:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._register_node()
            self._heartbeat()
            if self.prometheus is not None:
                self.prometheus.start()
            self._proxies = ServiceProxies(self._backends)
            for target, name in (
                (self._heartbeat_loop, "standin-heartbeat"),
                (self._service_loop, "standin-services"),
                (self._pod_loop, "standin-pods"),
            ):
                t = threading.Thread(target=target, name=name, daemon=True)
                t.start()
                self._threads.append(t)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process of every pod, the proxies and Prometheus (by PID)."""
        with self._lock:  # no runner is added after this (see _on_pod)
            self.stopping = True
            runners = list(self._runners.values())
        self._stop.set()
        for r in runners:
            r.vanish()
        for r in runners:
            r.join(timeout=15)
        if self._proxies is not None:
            self._proxies.close()
            self._proxies = None
        if self.prometheus is not None:
            self.prometheus.stop()
        for t in self._threads:
            t.join(timeout=2)  # a watch in flight ends with its timeout; daemon threads

    # ------------------------------------------------------------ views for tests
    @property
    def prometheus_url(self) -> str:
        if self.prometheus is None:
            raise RuntimeError("this stand-in runs no Prometheus")
        return self.prometheus.url

    def runner(self, namespace: str, name: str) -> PodRunner | None:
        """The runner of a live pod (the newest of that name)."""
        with self._lock:
            found = [
                r for r in self._runners.values() if r.namespace == namespace and r.pod_name == name
            ]
        return found[-1] if found else None

    def pids(self, namespace: str, name: str) -> list[int]:
        """PIDs of the processes the stand-in started for a pod (running or not)."""
        r = self.runner(namespace, name)
        return r.pids() if r else []

    def all_pids(self) -> list[int]:
        with self._lock:
            return [p for r in self._runners.values() for p in r.live_pids()]

    def pod_port(self, namespace: str, name: str, container_port: int | str) -> int | None:
        """The local port standing for a pod's containerPort."""
        r = self.runner(namespace, name)
        return r.local_port(container_port) if r else None

    def service_port(self, namespace: str, service: str, port: int) -> int:
        """The local proxy port of a Service port (started if the Service is new)."""
        self._sync_services(namespace)
        assert self._proxies is not None
        found = self._proxies.port((namespace, service, port))
        if found is None:
            raise KeyError(f"no Service {namespace}/{service} with port {port}")
        return found

    # ------------------------------------------------------------ node
    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "sreforge.dev/standin": "true",
                },
            },
            "spec": {},
        }
        try:
            self.api.request("POST", "/api/v1/nodes", node)
        except ApiError as e:
            if e.status != 409:
                raise
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _micro_time(),
            },
        }
        try:
            self.api.request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
            )
        except ApiError as e:
            if e.status != 409:
                raise

    def _heartbeat(self) -> None:
        """Node status Ready and a renewed Lease: the node-lifecycle controller's signals."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi"}

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._node_since,
            }

        if not hasattr(self, "_node_since"):
            self._node_since = now
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "stand-in"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "stand-in"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "stand-in"),
                cond("Ready", "True", "KubeletReady", "kubelet stand-in (tests/standin) is ready"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "standin",
                "kubeProxyVersion": "standin",
                "containerRuntimeVersion": "standin://processes",
                "osImage": "sreforge stand-in",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        self.api.request(
            "PATCH",
            f"/api/v1/nodes/{self.node_name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        self.api.merge_patch(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node_name}",
            {"spec": {"holderIdentity": self.node_name, "renewTime": _micro_time()}},
        )
        self.heartbeats += 1

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self._heartbeat()
            except ApiError as e:
                if e.status == 404:  # someone deleted the Node or Lease: register again
                    with contextlib.suppress(ApiError, OSError):
                        self._register_node()
                log.warning("heartbeat: %s", e)
            except OSError as e:
                log.warning("heartbeat: %s", e)

    # ------------------------------------------------------------ list + watch
    def _list_watch(
        self,
        path: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        **params: str,
    ) -> None:
        """List, then watch from the list's resourceVersion; on any error list again."""
        while not self._stop.is_set():
            try:
                listing = self.api.get(path, **params)
                on_list(listing.get("items") or [])
                rv = listing["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for kind, obj in self.api.watch(path, rv, WATCH_SECONDS, **params):
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if kind != "BOOKMARK" and not self._stop.is_set():
                            on_event(kind, obj)
            except WatchExpired:
                continue
            except Exception as e:  # reconnect on any watch error; converge from a list
                if self._stop.is_set():
                    return
                log.warning("watch %s: %s; listing again", path, e)
                self._stop.wait(RETRY_SECONDS)

    def _pod_loop(self) -> None:
        self._list_watch(
            "/api/v1/pods",
            self._converge_pods,
            self._on_pod_event,
            fieldSelector=f"spec.nodeName={self.node_name}",
        )

    def _converge_pods(self, pods: list[dict[str, Any]]) -> None:
        uids = {p["metadata"]["uid"] for p in pods}
        with self._lock:
            stale = [r for uid, r in self._runners.items() if uid not in uids]
        for r in stale:
            self._forget(r)
        for pod in pods:
            self._on_pod(pod)

    def _on_pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            with self._lock:
                r = self._runners.get(pod["metadata"]["uid"])
            if r is not None:
                self._forget(r)
        else:
            self._on_pod(pod)

    def _forget(self, r: PodRunner) -> None:
        r.vanish()
        with self._lock:
            self._runners.pop(r.uid, None)
        self.changed()

    def _on_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            if self.stopping:
                return
            r = self._runners.get(uid)
            if r is None:
                r = PodRunner(self, pod)
                self._runners[uid] = r
                r.update(pod)
                r.start()
                return
        r.update(pod)

    # ------------------------------------------------------------ services
    def _service_loop(self) -> None:
        self._list_watch("/api/v1/services", self._converge_services, self._on_service_event)

    def _converge_services(self, services: list[dict[str, Any]]) -> None:
        keys = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services}
        with self._lock:
            stale = [k for k in self._services if k not in keys]
        for k in stale:
            self._drop_service(k)
        for s in services:
            self._add_service(s)

    def _on_service_event(self, kind: str, svc: dict[str, Any]) -> None:
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        if kind == "DELETED":
            self._drop_service(key)
        else:
            self._add_service(svc)

    def _add_service(self, svc: dict[str, Any]) -> None:
        spec = svc.get("spec") or {}
        if not spec.get("selector") or spec.get("type", "ClusterIP") == "ExternalName":
            return
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        with self._lock:
            old = self._services.get((ns, name))
            self._services[(ns, name)] = svc
        assert self._proxies is not None
        ports = {int(p["port"]) for p in spec.get("ports") or []}
        for port in ports:
            self._proxies.ensure((ns, name, port))
        if old is not None:
            for p in (old.get("spec") or {}).get("ports") or []:
                if int(p["port"]) not in ports:
                    self._proxies.remove((ns, name, int(p["port"])))

    def _drop_service(self, key: tuple[str, str]) -> None:
        with self._lock:
            svc = self._services.pop(key, None)
        if svc is not None and self._proxies is not None:
            for p in (svc.get("spec") or {}).get("ports") or []:
                self._proxies.remove((key[0], key[1], int(p["port"])))

    def _sync_services(self, namespace: str) -> None:
        """Read the namespace's Services now (a pod starting must not race the watch)."""
        listing = self.api.get(f"/api/v1/namespaces/{namespace}/services")
        for svc in listing.get("items") or []:
            self._add_service(svc)

    def service_addresses(self, namespace: str) -> list[tuple[list[str], int, int]]:
        """``(names, service port, proxy port)`` for rewriting a pod's args and env:
        the DNS names a pod of ``namespace`` may use, and the ClusterIP."""
        self._sync_services(namespace)
        assert self._proxies is not None
        ports = self._proxies.ports()
        out: list[tuple[list[str], int, int]] = []
        with self._lock:
            services = list(self._services.items())
        for (ns, name), svc in services:
            spec = svc.get("spec") or {}
            names = [f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}.svc"]
            if ns == namespace:
                names += [f"{name}.{ns}", name]
            else:
                names.append(f"{name}.{ns}")
            if (ip := spec.get("clusterIP")) and ip != "None":
                names.append(ip)
            for p in spec.get("ports") or []:
                local = ports.get((ns, name, int(p["port"])))
                if local is not None:
                    out.append((names, int(p["port"]), local))
        return out

    def _backends(self, key: Key) -> list[int]:
        """Local ports of the ready pods behind a Service port (the proxy asks)."""
        ns, name, port = key
        with self._lock:
            svc = self._services.get((ns, name))
            runners = list(self._runners.values())
        if svc is None:
            return []
        spec = svc.get("spec") or {}
        target: int | str = port
        for p in spec.get("ports") or []:
            if int(p["port"]) == port:
                target = p.get("targetPort", port)
        selector = spec.get("selector") or {}
        out = []
        for r in runners:
            if r.namespace == ns and r.ready and _selector_matches(selector, r.labels):
                local = r.local_port(target)
                if local is not None:
                    out.append(local)
        return out

    # ------------------------------------------------------------ metrics
    def changed(self) -> None:
        """A pod started, stopped or changed readiness: rewrite Prometheus' targets."""
        if self.prometheus is None or self.stopping:
            return
        with self._lock:
            groups = list(self._scrape_groups())
            self.prometheus.set_target_groups(SCRAPE_JOB, groups)

    def _scrape_groups(self) -> Iterator[dict[str, Any]]:
        for r in self._runners.values():
            ann = r.annotations
            if ann.get("prometheus.io/scrape") != "true" or not r.running or r.terminating:
                continue
            local = r.local_port(ann.get("prometheus.io/port", ""))
            if local is None:
                continue
            labels = {
                # as the chart's Prometheus relabels pods: no `app` label, the job name
                "job": r.labels.get("app", SCRAPE_JOB),
                "namespace": r.namespace,
                "pod": r.pod_name,
                "__metrics_path__": ann.get("prometheus.io/path", "/metrics"),
            }
            if incident := r.labels.get(INCIDENT_LABEL):
                labels["incident"] = incident  # whose pod: the rules keep it on each alert
            if scenario := r.labels.get(SCENARIO_LABEL):
                labels["scenario"] = scenario  # whose rules read it
            yield {"targets": [f"127.0.0.1:{local}"], "labels": labels}


def wait_until(what: str, probe: Any, timeout: float = 120.0, interval: float = 0.25) -> Any:
    """Poll probe() until truthy; raise TimeoutError naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
