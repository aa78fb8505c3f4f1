"""The harness exporter: what the harness itself observes about the service's process.

Served to the run's Prometheus as ``job="harness"``. It reads the kernel's view of the
process, not anything the service reports, so a service cannot lie its way past an alert
built on it:

``sreforge_target_memory_rss_bytes{service="<name>"}``
    resident set size of the service's current process (VmRSS in /proc/<pid>/status).
    It follows the process swap: after a redeploy it reports the new build's process. While
    no live process is known the series is absent (never a made-up zero).

On Kubernetes the same series name is a recording rule of the chart's Prometheus over the
kubelet's cAdvisor ``container_memory_working_set_bytes`` of the target's pod
(sreforge.runtime.kube.cadvisor), so a scenario's rules read the same name in either
runtime, and on a shared Prometheus each Incident's own (the rules aggregate
``by (namespace, incident)``). Locally there is one Prometheus per run and the series has
neither label.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HARNESS_JOB = "harness"
RSS_METRIC = "sreforge_target_memory_rss_bytes"


def rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """VmRSS of `pid` in bytes, or None if the process is gone (or a zombie: no VmRSS)."""
    try:
        text = (proc / str(pid) / "status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
    return None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class HarnessExporter:
    """A Prometheus text endpoint on 127.0.0.1 serving the harness's own process metrics."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._lock = threading.Lock()
        self._pids: dict[str, int] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:  # quiet: no access log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sreforge-harness-exporter", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def follow(self, service: str, pid: int) -> None:
        """From now on report `service` as the process `pid` (the build that takes the load)."""
        with self._lock:
            self._pids[service] = pid

    def render(self) -> str:
        with self._lock:
            pids = dict(self._pids)
        lines = [
            f"# HELP {RSS_METRIC} Resident memory of the service's process, read by the harness.",
            f"# TYPE {RSS_METRIC} gauge",
        ]
        for service, pid in sorted(pids.items()):
            rss = rss_bytes(pid, self._proc)
            if rss is not None:
                lines.append(f'{RSS_METRIC}{{service="{_escape(service)}"}} {rss}')
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self._server.shutdown()
        self._server.server_close()


class ScrapeProxy:
    """A service's stable scrape address, as a Kubernetes Service is for its pods.

    Prometheus scrapes this one address for the whole run; a swap points it at the new
    build's port (`point`). Changing Prometheus' file discovery instead would cost each swap
    the discovery manager's throttle (5 s, and the scrape manager's reload tick after it).
    A scrape the backend does not answer within `timeout` (under Prometheus' 900 ms scrape
    timeout) is a 503, so `up` is 0 while no build answers: missing telemetry stays missing,
    never a clear.
    """

    def __init__(self, name: str, timeout: float = 0.8) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._backend: int | None = None
        self._served: dict[int, int] = {}  # backend port -> scrapes answered from it
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body, ctype = proxy._forward(self.path, timeout)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # Prometheus gave up first (its scrape timeout): a failed scrape
                    self.close_connection = True

            def log_message(self, *_args: object) -> None:  # quiet: no access log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"sreforge-scrape-{name}", daemon=True
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        self._thread.start()

    def point(self, port: int) -> None:
        """Forward scrapes to 127.0.0.1:`port` from now on."""
        with self._lock:
            self._backend = port
            self._served[port] = 0

    def served(self, port: int) -> int:
        """How many scrapes the backend on `port` answered through this proxy."""
        with self._lock:
            return self._served.get(port, 0)

    def _forward(self, path: str, timeout: float) -> tuple[int, bytes, str]:
        with self._lock:
            port = self._backend
        if port is None:
            return 503, b"no backend\n", "text/plain"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
                body = r.read()
                ctype = r.headers.get("Content-Type", "text/plain")
                status = r.status
        except urllib.error.HTTPError as exc:
            return exc.code, b"", "text/plain"
        except (OSError, ValueError):
            return 503, b"backend did not answer\n", "text/plain"
        with self._lock:
            if status == 200 and port in self._served:
                self._served[port] += 1
        return status, body, ctype

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
