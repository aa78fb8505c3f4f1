"""The load generator against real aiohttp target servers on 127.0.0.1.

Targets are `python -m sreforge.load.echo` processes (fast, slow 300 ms, wrong id, 500).
The generator runs as `python -m sreforge.load` (subprocess tests) or in-process in an
event loop of the test. Every run is bounded by its profile's duration and a timeout.
Its control surface (POST /target, GET /stats) is on a Unix socket only; the tests under
"confinement" show that its TCP port serves nothing that changes or reveals the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sreforge.api.scenario import LoadProfile
from sreforge.load import (
    ControlError,
    GeneratorProcess,
    LoadGenerator,
    build_metrics_app,
    control_request,
    generator_argv,
    read_port_file,
    read_stats,
    start_control,
    start_server,
)
from sreforge.load.metrics import DURATION_BUCKETS, OUTCOMES

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(OPERATOR_DIR), os.environ.get("PYTHONPATH")])),
}

SERIES = {
    "sreforge_load_requests_total",
    "sreforge_load_request_duration_seconds",
    "sreforge_load_scheduled_iterations_total",
    "sreforge_load_dropped_iterations_total",
    "sreforge_load_in_flight",
    "sreforge_load_target_rate",
    "sreforge_load_scheduling_lag_seconds",
}
HISTOGRAMS = {"sreforge_load_request_duration_seconds", "sreforge_load_scheduling_lag_seconds"}
SAMPLE_NAMES = (SERIES - HISTOGRAMS) | {
    h + sfx for h in HISTOGRAMS for sfx in ("_bucket", "_count", "_sum")
}


# ---- helpers ---------------------------------------------------------------------------


class Echo:
    def __init__(self, tmp: Path, name: str, *, lie: bool = False) -> None:
        port_file = tmp / f"{name}.port"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sreforge.load.echo",
                "--port-file",
                str(port_file),
                "--max-seconds",
                "180",
                *(["--lie"] if lie else []),
            ],
            env=ENV,
            stdin=subprocess.DEVNULL,
        )
        self.port = read_port_file(port_file, 15.0, self.proc)  # type: ignore[arg-type]
        self.url = f"http://127.0.0.1:{self.port}"

    def count(self) -> int:
        return int(get_json(f"{self.url}/_count")["requests"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def echoes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Echo, Echo]]:
    tmp = tmp_path_factory.mktemp("echo")
    a = Echo(tmp, "a")
    try:
        b = Echo(tmp, "b")
    except BaseException:
        a.stop()
        raise
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def echo(echoes: tuple[Echo, Echo]) -> Echo:
    return echoes[0]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """Where an in-process generator is served: its TCP listener and its control socket."""

    url: str
    control: Path


Action = Callable[[LoadGenerator, Served], Awaitable[Any]]


def drive(
    profile: LoadProfile, target: str, action: Action | None = None
) -> tuple[LoadGenerator, dict[str, Any], Any]:
    """Run a generator in-process with its servers; `action(gen, served)` runs alongside.
    Returns (generator, summary, what the action returned)."""

    async def main(control: Path) -> tuple[LoadGenerator, dict[str, Any], Any]:
        gen = LoadGenerator(profile, target, seed=7)
        runner, port = await start_server(gen)
        control_runner = await start_control(gen, control)
        try:
            task = asyncio.create_task(gen.run())
            extra = None
            try:
                if action is not None:
                    extra = await asyncio.wait_for(
                        action(gen, Served(f"http://127.0.0.1:{port}", control)),
                        profile.duration_seconds + 5,
                    )
            finally:
                summary = await asyncio.wait_for(
                    task, profile.duration_seconds + profile.timeout_ms / 1000 + 5
                )
            return gen, summary, extra
        finally:
            await control_runner.cleanup()
            await runner.cleanup()

    with tempfile.TemporaryDirectory(prefix="sreforge-load-") as d:
        result = asyncio.run(main(Path(d) / "control.sock"))
        assert not (Path(d) / "control.sock").exists(), "the control socket outlived its server"
        return result


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict[str, Any], name: str, **labels: str) -> float:
    for f in fams.values():
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name}{labels}")


# ---- subprocess ------------------------------------------------------------------------


def test_subprocess_rate_within_10_percent(echo: Echo, tmp_path: Path) -> None:
    profile = LoadProfile(
        rate=100, duration_seconds=30, path="/fast/{id}", id_range=(1, 10_000), expect_json_id=True
    )
    port_file = tmp_path / "load.port"
    control = tmp_path / "control.sock"
    proc = subprocess.Popen(
        generator_argv(profile, echo.url, port_file=port_file, control_socket=control, seed=1),
        env=ENV,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        port = read_port_file(port_file, 15.0, proc)  # type: ignore[arg-type]
        assert not list(tmp_path.glob(".*tmp")), "the port file's temporary was left behind"
        time.sleep(4.0)
        stats = read_stats(control)
        assert stats["elapsed_seconds"] >= 3.5
        assert stats["achieved_rate_total"] == pytest.approx(100, rel=0.10)
        assert stats["achieved_rate_10s"] == pytest.approx(100, rel=0.10)
        assert stats["scheduled"] / stats["elapsed_seconds"] == pytest.approx(100, rel=0.10)
        assert stats["dropped"] == 0
        assert stats["outcomes"]["success"] == stats["completed"] > 300
        assert stats["completed"] == sum(stats["outcomes"].values())
        assert stats["lag_p50_10s"] is not None
        assert stats["lag_p99_10s"] >= stats["lag_p50_10s"] >= 0
        assert stats["target"] == echo.url
        assert get_json(f"http://127.0.0.1:{port}/healthz") == {"ok": True}

        proc.send_signal(signal.SIGTERM)
        t = time.monotonic()
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - t < 2.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    err = proc.stderr.read().decode() if proc.stderr else ""
    lines = [ln for ln in err.splitlines() if ln.startswith("sreforge-load: ")]
    assert lines[0].startswith("sreforge-load: start ")
    assert not control.exists(), "the control socket outlived the generator"
    summary = json.loads(lines[-1].removeprefix("sreforge-load: summary "))
    assert summary["outcomes"]["success"] > 300


def test_subprocess_sigterm_with_requests_in_flight_exits_0_within_2s(
    echo: Echo, tmp_path: Path
) -> None:
    # 300 ms responses with a 2 s timeout: SIGTERM must not wait out the timeout.
    profile = LoadProfile(
        rate=50, duration_seconds=60, path="/slow/{id}", timeout_ms=2000, id_range=(1, 9)
    )
    with GeneratorProcess(
        profile, echo.url, tmp_path / "p", control_socket=tmp_path / "c", stderr=subprocess.DEVNULL
    ) as gp:
        time.sleep(1.0)
        assert gp.stats()["in_flight"] > 0
        t = time.monotonic()
        gp.proc.send_signal(signal.SIGTERM)
        assert gp.proc.wait(timeout=5) == 0
        assert time.monotonic() - t < 2.0


def test_subprocess_ends_by_itself_after_duration(echo: Echo, tmp_path: Path) -> None:
    profile = LoadProfile(rate=40, duration_seconds=2, path="/fast/{id}")
    proc = subprocess.run(
        generator_argv(profile, echo.url, port_file=tmp_path / "p"),
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=15,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(
        proc.stderr.strip().splitlines()[-1].removeprefix("sreforge-load: summary ")
    )
    assert summary["scheduled"] == 80  # exactly rate * duration on the absolute schedule
    assert summary["started"] == summary["completed"] == summary["outcomes"]["success"] == 80
    assert summary["elapsed_seconds"] == pytest.approx(2.0, abs=0.1)


def test_subprocess_rejects_a_bad_profile(tmp_path: Path) -> None:
    argv = generator_argv(LoadProfile(rate=1), "http://127.0.0.1:1", port_file=tmp_path / "p")
    argv[argv.index("--profile-json") + 1] = '{"rate": 0}'  # what no LoadProfile can hold
    proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=15, check=False)
    assert proc.returncode == 2
    assert "rate" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_post_target_on_the_control_socket_switches_traffic_to_a_second_server(
    echoes: tuple[Echo, Echo], tmp_path: Path
) -> None:
    a, b = echoes
    profile = LoadProfile(
        rate=60, duration_seconds=4, path="/fast/{id}", id_range=(1, 50), expect_json_id=True
    )
    a0, b0 = a.count(), b.count()
    sock = tmp_path / "control.sock"
    with GeneratorProcess(
        profile, a.url, tmp_path / "p", control_socket=sock, stderr=subprocess.DEVNULL
    ) as gp:
        time.sleep(1.2)
        assert b.count() == b0
        code, body = control_request(sock, "POST", "/target", {"url": "http://127.0.0.1:notaport"})
        assert code == 400
        assert "error" in body
        code, body = control_request(sock, "POST", "/target", ["not", "an", "object"])
        assert code == 400
        with pytest.raises(ControlError, match="400"):
            gp.set_target("ftp://127.0.0.1:21")
        code, body = control_request(sock, "POST", "/target", {"url": b.url + "/"})
        assert (code, body) == (200, {"target": b.url, "previous": a.url})
        time.sleep(0.5)  # in-flight requests to A complete (~ms each)
        a_after = a.count()
        time.sleep(1.0)
        assert a.count() == a_after, "requests still go to the old target"
        assert b.count() - b0 >= 40
        stats = gp.stats()
        assert stats["target"] == b.url
        assert stats["target_switches"] == 1
        assert gp.proc.wait(timeout=10) == 0
    # every request went to one of the two, all validated
    assert (a.count() - a0) + (b.count() - b0) == 240
    assert a.count() - a0 >= 40


# ---- confinement: nothing on the network changes or reveals the run -------------------


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One raw request to 127.0.0.1:port (no redirects followed, nothing rewritten)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def listening(pid: int) -> tuple[set[int], set[str]]:
    """The TCP ports and Unix socket paths `pid` listens on, found as a process on the
    host finds them: its socket inodes in /proc/<pid>/fd, matched in /proc/net."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = str(fd.readlink())
            if link.startswith("socket:["):
                inodes.add(link.removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and f[9] in inodes:  # 0A: TCP_LISTEN
                    ports.add(int(f[1].rsplit(":", 1)[1], 16))
    paths = set()
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        f = line.split()  # Num RefCount Protocol Flags Type St Inode [Path]
        if int(f[3], 16) & 0x10000 and f[6] in inodes:  # __SO_ACCEPTCON: listening
            paths.add(f[7] if len(f) > 7 else "")
    return ports, paths


def test_the_tcp_listener_routes_only_metrics_and_healthz() -> None:
    """Whatever is added to the generator later, its TCP app has these routes and no other."""
    gen = LoadGenerator(LoadProfile(rate=1), "http://127.0.0.1:1")
    routes = {(r.method, r.resource.canonical) for r in build_metrics_app(gen).router.routes()}
    assert routes == {
        ("GET", "/metrics"), ("HEAD", "/metrics"), ("GET", "/healthz"), ("HEAD", "/healthz"),
    }  # fmt: skip


def test_control_is_on_a_0600_unix_socket_and_not_on_the_tcp_port(
    echo: Echo, tmp_path: Path
) -> None:
    profile = LoadProfile(rate=20, duration_seconds=4, path="/fast/{id}")
    sock = tmp_path / "control.sock"
    with GeneratorProcess(
        profile, echo.url, tmp_path / "p", control_socket=sock, stderr=subprocess.DEVNULL
    ) as gp:
        mode = sock.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        assert listening(gp.pid) == ({gp.port}, {str(sock)})
        body = json.dumps({"url": "http://127.0.0.1:1"}).encode()
        json_type = {"Content-Type": "application/json"}
        assert http_request(gp.port, "POST", "/target", body, json_type)[0] == 404
        assert http_request(gp.port, "GET", "/stats")[0] == 404
        assert http_request(gp.port, "POST", "/metrics", body, json_type)[0] == 405
        status, answer = http_request(gp.port, "GET", "/healthz")
        assert (status, json.loads(answer)) == (200, {"ok": True})  # nothing that identifies
        assert http_request(gp.port, "GET", "/metrics")[0] == 200
        assert gp.stats()["target"] == echo.url
        assert gp.set_target(echo.url + "/") == echo.url
        assert control_request(sock, "GET", "/metrics")[0] == 404  # each side its own routes
        assert gp.proc.wait(timeout=10) == 0
    assert not sock.exists(), "the generator leaves no socket behind"


def test_without_a_control_socket_nothing_re_points_the_load(
    echoes: tuple[Echo, Echo], tmp_path: Path
) -> None:
    """The Kubernetes load Job's case: no --control-socket, no control surface at all."""
    a, b = echoes
    profile = LoadProfile(rate=40, duration_seconds=3, path="/fast/{id}")
    b0 = b.count()
    err = tmp_path / "err"
    with (
        err.open("wb") as stderr,
        GeneratorProcess(profile, a.url, tmp_path / "p", stderr=stderr) as gp,
    ):
        assert gp.control_socket is None
        assert listening(gp.pid) == ({gp.port}, set())  # one TCP port, no Unix socket
        body = json.dumps({"url": b.url}).encode()
        for method in ("POST", "PUT", "PATCH"):
            status, _ = http_request(
                gp.port, method, "/target", body, {"Content-Type": "application/json"}
            )
            assert status == 404
        with pytest.raises(RuntimeError, match="without a control socket"):
            gp.set_target(b.url)
        assert gp.proc.wait(timeout=10) == 0
    summary = json.loads(err.read_text().splitlines()[-1].removeprefix("sreforge-load: summary "))
    assert summary["target"] == a.url
    assert summary["outcomes"]["success"] == summary["scheduled"] == 120
    assert b.count() == b0


# What a patched service that found the generator's port would try.
ATTACK_PATHS = (
    "/target", "/target/", "/TARGET", "//target", "/target?url={url}", "/api/target",
    "/v1/target", "/control/target", "/admin/target", "/stats", "/stats/", "/debug",
    "/debug/vars", "/admin", "/config", "/rate", "/stop", "/quit", "/shutdown", "/healthz",
    "/metrics", "/",
)  # fmt: skip
ATTACK_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def test_a_client_that_finds_the_tcp_port_cannot_redirect_or_read_the_load(
    echoes: tuple[Echo, Echo], tmp_path: Path
) -> None:
    """The reviewers' exploit class, generally: a process that finds the generator's port
    (as theirs did in /proc/net/tcp) and tries every control request it can think of gets
    /metrics and {"ok": true}, and the load stays on its target. The same request on the
    control socket does re-point it: the attempts are real ones, refused by where they go."""
    a, b = echoes
    profile = LoadProfile(rate=40, duration_seconds=8, path="/fast/{id}")
    sock = tmp_path / "control.sock"
    b0 = b.count()
    with GeneratorProcess(
        profile, a.url, tmp_path / "p", control_socket=sock, stderr=subprocess.DEVNULL
    ) as gp:
        ports, _ = listening(gp.pid)
        assert ports == {gp.port}
        redirect = {"url": b.url, "target": b.url}
        bodies: list[tuple[bytes | None, dict[str, str]]] = [
            (None, {}),
            (json.dumps(redirect).encode(), {"Content-Type": "application/json"}),
            (urllib.parse.urlencode(redirect).encode(), {
                "Content-Type": "application/x-www-form-urlencoded"
            }),
            (None, {"X-HTTP-Method-Override": "POST"}),
        ]  # fmt: skip
        answered: set[tuple[str, str]] = set()
        for port in ports:
            for template in ATTACK_PATHS:
                path = template.format(url=urllib.parse.quote(b.url, safe=""))
                for method in ATTACK_METHODS:
                    for body, headers in bodies:
                        status, answer = http_request(port, method, path, body, headers)
                        if status < 400:
                            answered.add((method, path))
                            assert a.url.encode() not in answer  # nor where it goes
        assert answered == {
            ("GET", "/metrics"), ("HEAD", "/metrics"), ("GET", "/healthz"), ("HEAD", "/healthz"),
        }  # fmt: skip
        time.sleep(0.5)
        stats = gp.stats()  # read back where only the harness can
        assert stats["target"] == a.url
        assert stats["target_switches"] == 0
        assert b.count() == b0, "load reached the attacker's listener"
        status, answer = control_request(sock, "POST", "/target", redirect)
        assert (status, answer) == (200, {"target": b.url, "previous": a.url})
        time.sleep(0.5)
        assert b.count() > b0


def test_another_user_cannot_use_the_control_socket(echo: Echo) -> None:
    """Mode 0600 means it: a process of another user that sees the socket (its directory
    here is open to all, on purpose) cannot connect to it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user")
    profile = LoadProfile(rate=5, duration_seconds=5, path="/fast/{id}")
    with tempfile.TemporaryDirectory(prefix="sreforge-load-") as d:
        Path(d).chmod(0o755)  # anyone may enter: only the socket's mode keeps them out
        sock = Path(d) / "control.sock"
        with GeneratorProcess(
            profile, echo.url, Path(d) / "p", control_socket=sock, stderr=subprocess.DEVNULL
        ) as gp:
            pid = os.fork()
            if pid == 0:  # the child: become nobody, then try the socket
                code = 3
                try:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                        s.connect(str(sock))
                    code = 0
                except PermissionError:
                    code = 1
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 1, "another user connected"
            assert gp.stats()["target"] == echo.url  # the harness's own user still can


# ---- in-process ------------------------------------------------------------------------


def test_slow_target_does_not_slow_the_schedule_iterations_are_dropped(echo: Echo) -> None:
    """Open model: 100/s against 300 ms responses with max_in_flight 5 (capacity ~16/s)."""
    profile = LoadProfile(
        rate=100, duration_seconds=3, max_in_flight=5, path="/slow/{id}", timeout_ms=2000
    )

    async def watch(gen: LoadGenerator, _: Served) -> int:
        peak = 0
        while gen.running and not gen.finished and gen.elapsed() < 2.9:
            peak = max(peak, gen.in_flight)
            await asyncio.sleep(0.01)
        return peak

    gen, summary, peak = drive(profile, echo.url, watch)
    assert peak == 5  # never more than max_in_flight in flight
    assert summary["scheduled"] == 300  # the schedule kept its rate: rate * duration
    assert summary["elapsed_seconds"] == pytest.approx(3.0, abs=0.1)
    assert summary["scheduled"] / summary["elapsed_seconds"] == pytest.approx(100, rel=0.10)
    assert summary["dropped"] >= 200  # ~250 expected
    assert summary["dropped_late"] == 0
    assert summary["started"] + summary["dropped"] == summary["scheduled"]
    assert summary["achieved_rate"] == pytest.approx(
        (summary["scheduled"] - summary["dropped"]) / summary["elapsed_seconds"], rel=1e-3
    )
    assert summary["outcomes"]["success"] == summary["completed"] == summary["started"]
    fams = families(_metrics_text(gen))
    assert sample(fams, "sreforge_load_scheduled_iterations_total") == 300
    assert sample(fams, "sreforge_load_dropped_iterations_total") == summary["dropped"]
    assert sample(fams, "sreforge_load_scheduling_lag_seconds_count") == summary["started"]
    assert sample(fams, "sreforge_load_in_flight") == 0


def _metrics_text(gen: LoadGenerator) -> str:
    return generate_latest(gen.metrics.registry).decode()


@pytest.mark.parametrize(
    ("path", "kwargs", "outcome"),
    [
        ("/fast/{id}", {"expect_json_id": True}, "success"),
        ("/wrong/{id}", {"expect_json_id": True}, "invalid"),
        ("/wrong/{id}", {"expect_json_id": False}, "success"),
        ("/error/{id}", {}, "http_error"),
        ("/error/{id}", {"expect_status": 500}, "success"),
        ("/fast/{id}", {"expect_status": 201}, "http_error"),
        ("/slow/{id}", {"timeout_ms": 100}, "timeout"),
        ("CLOSED", {}, "connect_error"),
    ],
)
def test_outcomes_are_classified(
    echo: Echo, path: str, kwargs: dict[str, Any], outcome: str
) -> None:
    target = echo.url
    if path == "CLOSED":
        target, path = f"http://127.0.0.1:{closed_port()}", "/fast/{id}"
    profile = LoadProfile(rate=25, duration_seconds=1, path=path, id_range=(1, 1000), **kwargs)
    gen, summary, _ = drive(profile, target)
    assert summary["scheduled"] == summary["started"] == summary["completed"] == 25
    assert summary["outcomes"] == {o: (25 if o == outcome else 0) for o in OUTCOMES}
    fams = families(_metrics_text(gen))
    for o in OUTCOMES:
        assert sample(fams, "sreforge_load_requests_total", outcome=o) == (
            25 if o == outcome else 0
        )
    assert sample(fams, "sreforge_load_request_duration_seconds_count") == 25
    if outcome == "timeout":  # a timeout records its elapsed time
        assert sample(fams, "sreforge_load_request_duration_seconds_sum") / 25 >= 0.09


def test_metrics_endpoint_exposes_the_exact_series(echo: Echo) -> None:
    profile = LoadProfile(rate=20, duration_seconds=2, path="/fast/{id}", max_in_flight=7)

    async def scrape(_: LoadGenerator, served: Served) -> tuple[str, str, Any]:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{served.url}/metrics") as r0:
                first = await r0.text()  # right at the start: every series exists already
            await asyncio.sleep(1.0)
            async with s.get(f"{served.url}/metrics") as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                text = await r.text()
            async with s.get(f"{served.url}/stats") as r1:
                assert r1.status == 404  # not over TCP
        unix = aiohttp.UnixConnector(path=str(served.control))
        async with (
            aiohttp.ClientSession(connector=unix) as c,
            c.get("http://generator/stats") as r2,
        ):
            stats = await r2.json()
        return first, text, stats

    _, _, (first, text, stats) = drive(profile, echo.url, scrape)
    for body in (first, text):
        fams = families(body)
        names = {s.name for f in fams.values() for s in f.samples}
        assert names >= SAMPLE_NAMES
        assert {
            s.labels["outcome"]
            for s in fams["sreforge_load_requests"].samples
            if s.name.endswith("_total")
        } == set(OUTCOMES)
        assert fams["sreforge_load_requests"].type == "counter"
        assert fams["sreforge_load_scheduled_iterations"].type == "counter"
        assert fams["sreforge_load_dropped_iterations"].type == "counter"
        assert fams["sreforge_load_in_flight"].type == "gauge"
        assert fams["sreforge_load_target_rate"].type == "gauge"
        assert fams["sreforge_load_request_duration_seconds"].type == "histogram"
        assert fams["sreforge_load_scheduling_lag_seconds"].type == "histogram"
        assert sample(fams, "sreforge_load_target_rate") == 20
    fams = families(text)
    buckets = [
        float(s.labels["le"])
        for s in fams["sreforge_load_request_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert tuple(buckets) == DURATION_BUCKETS
    lag_buckets = [
        float(s.labels["le"])
        for s in fams["sreforge_load_scheduling_lag_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert lag_buckets[0] == 0.0005
    assert lag_buckets[-1] == 1.0
    assert sample(fams, "sreforge_load_requests_total", outcome="success") >= 15
    assert set(stats) >= {
        "scheduled", "started", "completed", "dropped", "outcomes", "in_flight",
        "elapsed_seconds", "target", "achieved_rate_10s", "achieved_rate_total",
        "lag_p50_10s", "lag_p99_10s",
    }  # fmt: skip


def test_event_loop_lag_starts_late_and_bounds_catch_up(echo: Echo) -> None:
    """The loop is blocked 1.6 s at t=0.5: iterations due in [0.5, ~1.1) are more than
    1 s late and dropped; those due in [~1.1, 2.1) start late with their lag measured."""
    profile = LoadProfile(rate=100, duration_seconds=3, path="/fast/{id}")

    async def block(_: LoadGenerator, __: Served) -> None:
        await asyncio.sleep(0.5)
        time.sleep(1.6)  # noqa: ASYNC251 (a stalled event loop, on purpose)

    gen, summary, _ = drive(profile, echo.url, block)
    assert summary["scheduled"] == 300
    assert summary["started"] + summary["dropped"] == 300
    assert summary["dropped"] == summary["dropped_late"]
    assert 40 <= summary["dropped_late"] <= 80  # ~60 expected
    assert summary["started"] == summary["outcomes"]["success"]
    assert 0.8 <= summary["lag_max"] <= 1.0
    fams = families(_metrics_text(gen))
    late = sample(fams, "sreforge_load_scheduling_lag_seconds_count") - sample(
        fams, "sreforge_load_scheduling_lag_seconds_bucket", le="0.5"
    )
    assert late >= 30  # ~50 started between 0.5 s and 1 s late


def test_stop_ends_the_run_promptly_and_counts_interrupted(echo: Echo) -> None:
    profile = LoadProfile(rate=50, duration_seconds=60, path="/sleep/5000/{id}", timeout_ms=10_000)

    async def stop_soon(gen: LoadGenerator, _: Served) -> float:
        await asyncio.sleep(0.5)
        gen.stop()
        return time.monotonic()

    t_before = time.monotonic()
    gen, summary, t_stop = drive(profile, echo.url, stop_soon)
    assert time.monotonic() - t_stop < 1.5  # grace 0.5 s, then in-flight requests are cancelled
    assert time.monotonic() - t_before < 3.0
    assert summary["completed"] == 0
    assert summary["interrupted"] == summary["started"] >= 20
    assert gen.in_flight == 0
    assert gen.finished


# ---- known answers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def liar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Echo]:
    """A target whose /item/{id} has the right status and id and a made-up body."""
    e = Echo(tmp_path_factory.mktemp("liar"), "liar", lie=True)
    try:
        yield e
    finally:
        e.stop()


def _switch_to(other: Echo, after: float) -> Action:
    async def switch(gen: LoadGenerator, _: Served) -> float:
        # elapsed() is 0 until the schedule starts, i.e. while answers are learned
        while gen.elapsed() <= 0 or gen.elapsed() < after:  # noqa: ASYNC110 (polls a clock)
            await asyncio.sleep(0.02)
        gen.set_target(other.url)
        return gen.elapsed()

    return switch


@pytest.mark.parametrize("known_answers", [0, 40])
def test_known_answers_catch_a_service_that_makes_bodies_up(
    echo: Echo, liar: Echo, known_answers: int
) -> None:
    """Learned from the truthful target; then the target becomes one that answers with
    the right status and id and a made-up body (a service faking it under load). Without
    known answers every such response counts as a success: the gap they close."""
    profile = LoadProfile(
        rate=100,
        duration_seconds=3,
        path="/item/{id}",
        id_range=(1, 40),
        expect_json_id=True,
        known_answers=known_answers,
    )
    before = liar.count()
    gen, summary, switched_at = drive(profile, echo.url, _switch_to(liar, 1.0))
    served_by_liar = liar.count() - before
    assert served_by_liar >= 150  # ~200: two of the three seconds went to the liar
    outcomes = summary["outcomes"]
    assert outcomes["http_error"] == outcomes["timeout"] == outcomes["connect_error"] == 0
    known = gen.known["/item/{id}"]
    assert summary["known_answers"] == len(known) == known_answers
    if known_answers == 0:
        assert outcomes["success"] == summary["completed"]
        assert outcomes["invalid"] == 0
    else:
        assert sorted(known) == list(range(1, 41))  # the whole range
        assert known[7] == {"id": 7, "name": "item 7"}
        assert outcomes["invalid"] == served_by_liar  # every made-up answer, no more
        assert outcomes["success"] == summary["completed"] - served_by_liar
    assert switched_at == pytest.approx(1.0, abs=0.2)


def test_known_answers_are_the_popular_ids_of_a_larger_range(echo: Echo, liar: Echo) -> None:
    profile = LoadProfile(
        rate=100, duration_seconds=3, path="/item/{id}", id_range=(1, 1000), known_answers=100
    )
    # without expect_json_id the known answers are still checked (the body, not just an id)
    gen, summary, _ = drive(profile, echo.url, _switch_to(liar, 0.1))
    [route] = gen.mix
    assert gen.known_ids(route) == gen.popularity[route.label].top(100)
    assert summary["known_answers"] == 100
    assert summary["outcomes"]["http_error"] == 0
    share = summary["outcomes"]["invalid"] / summary["completed"]
    # the 100 most popular of 1,000 ids take ~69% of a Zipf(1) law's requests
    assert 0.5 < share < 0.85, summary["outcomes"]
    assert summary["outcomes"]["invalid"] + summary["outcomes"]["success"] == summary["completed"]


def test_unlearnable_answers_leave_the_load_running(echo: Echo) -> None:
    """A target that answers nothing right while learning: nothing is known, learning
    ends (retries bounded), and the load runs as scheduled, judged by status and id."""
    profile = LoadProfile(
        rate=50, duration_seconds=2, path="/error/{id}", id_range=(1, 16), known_answers=16
    )
    gen, summary, _ = drive(profile, echo.url)
    assert gen.known == {"/error/{id}": {}}
    assert summary["known_answers"] == 0
    assert 0.4 < summary["learn_seconds"] < 10  # 16 ids x 3 attempts, 8 at a time
    assert summary["scheduled"] == 100
    assert summary["outcomes"]["http_error"] == summary["completed"]
    fams = families(_metrics_text(gen))
    assert sample(fams, "sreforge_load_known_answers") == 0
