"""The harness exporter reads the kernel's view of a real process and follows a swap."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sreforge.runtime.harness import RSS_METRIC, HarnessExporter, rss_bytes

# A child that allocates ~64 MiB and waits to be killed.
BIG = (
    "import sys, time; b = bytearray(64 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    "print('ready', flush=True); time.sleep(60)"
)
SMALL = "import time; print('ready', flush=True); time.sleep(60)"


def child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def exporter() -> Iterator[HarnessExporter]:
    exp = HarnessExporter()
    exp.start()
    yield exp
    exp.stop()


def scrape(exp: HarnessExporter) -> str:
    with urllib.request.urlopen(f"http://{exp.address}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        body: bytes = resp.read()
        return body.decode()


def value(text: str, service: str) -> int | None:
    prefix = f'{RSS_METRIC}{{service="{service}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return int(lines[0].removeprefix(prefix)) if lines else None


def test_rss_follows_the_swap_and_vanishes_with_the_process(exporter: HarnessExporter) -> None:
    big, small = child(BIG), child(SMALL)
    try:
        assert value(scrape(exporter), "pricing") is None  # nothing followed yet: no series
        exporter.follow("pricing", big.pid)
        big_rss = value(scrape(exporter), "pricing")
        assert big_rss is not None
        assert big_rss > 64 * 2**20
        exporter.follow("pricing", small.pid)  # the redeploy: the new build's process
        small_rss = value(scrape(exporter), "pricing")
        assert small_rss is not None
        assert small_rss < big_rss - 32 * 2**20
        small.kill()
        small.wait()
        text = scrape(exporter)
        assert value(text, "pricing") is None  # a dead process is absent, never a zero
        assert f"# TYPE {RSS_METRIC} gauge" in text
    finally:
        for p in (big, small):
            p.kill()
            p.wait()


def test_rss_parses_proc_status(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "status").write_text("Name:\tpython\nVmPeak:\t 9 kB\nVmRSS:\t  1500 kB\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "status").write_text("Name:\tzombie\nState:\tZ (zombie)\n")
    assert rss_bytes(7, tmp_path) == 1500 * 1024
    assert rss_bytes(8, tmp_path) is None  # a zombie has no VmRSS
    assert rss_bytes(9, tmp_path) is None


def test_other_paths_are_404(exporter: HarnessExporter) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{exporter.address}/other", timeout=5)
    assert err.value.code == 404


class _Build:
    """A stand-in build: a real HTTP server on loopback answering /metrics with its name."""

    def __init__(self, name: str) -> None:
        import http.server  # noqa: PLC0415
        import threading  # noqa: PLC0415

        body = f'build_info{{build="{name}"}} 1\n'.encode()

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _get(address: str, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_scrape_proxy_follows_the_swap_and_fails_closed() -> None:
    from sreforge.runtime.harness import ScrapeProxy  # noqa: PLC0415

    proxy = ScrapeProxy("catalog")
    proxy.start()
    old, new = _Build("old"), _Build("new")
    try:
        assert _get(proxy.address)[0] == 503  # no build yet: up would be 0, never a clear
        proxy.point(old.port)
        assert _get(proxy.address) == (200, 'build_info{build="old"} 1\n')
        proxy.point(new.port)  # the swap: the same address now answers from the new build
        assert _get(proxy.address) == (200, 'build_info{build="new"} 1\n')
        assert proxy.served(new.port) == 1
        assert _get(proxy.address, "/nope")[0] == 404  # the backend's own status
        new.stop()
        assert _get(proxy.address)[0] == 503  # the build is gone: a failed scrape
        assert proxy.served(new.port) == 1
    finally:
        old.stop()
        proxy.stop()
