"""The harness exporter: what the harness itself observes about the service's process.

Served to the run's Prometheus as ``job="harness"``. It reads the kernel's view of the
process, not anything the service reports, so a service cannot lie its way past an alert
built on it:

``sreforge_target_memory_rss_bytes{service="<name>"}``
    resident set size of the service's current process (VmRSS in /proc/<pid>/status).
    It follows the process swap: after a redeploy it reports the new build's process. While
    no live process is known the series is absent (never a made-up zero).

On Kubernetes the same series name is a recording rule over cAdvisor's
``container_memory_working_set_bytes`` of the target Deployment's container, for example::

    - record: sreforge_target_memory_rss_bytes
      expr: max by (service) (label_replace(container_memory_working_set_bytes{
              namespace="<ns>", container="<name>"}, "service", "$1", "container", "(.*)"))

so a scenario's rules read the same name in either runtime.
"""

from __future__ import annotations

import threading
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
