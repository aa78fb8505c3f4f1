"""A substrate process reaches its own tree and data, its declared dependencies, and nothing
of the harness.

`sreforge.runtime.confine.Substrate` starts each build of a service, its upstreams and
Redis in a view made by sreforge.runtime.sandbox (the agent's mechanism), on networks the
gateway (sreforge.runtime.gateway) holds. The build here is tests/builds/snoop_build.py,
a real subprocess started exactly as the environment starts a build (a scripted stand-in
for a dishonest patch, not a service): it tries to read the scenario's root cause, the
run directory and its healthy tree; the harness's cwd, root, command line and environ
through /proc; to signal the harness; to connect to a harness TCP port and its Unix
control socket, to the build before it; to write outside its data; to unmount its view
or make a network of its own. Every attempt must fail, while the harness still reaches
the build through its port and the build still reaches its dependency.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.reliability_cases import case

from sreforge.runtime import sandbox
from sreforge.runtime.confine import Substrate, runtime_dirs
from sreforge.runtime.process import Managed
from sreforge.runtime.prometheus import PrometheusServer, prometheus_binary

ROOT = Path(__file__).resolve().parents[2]
SNOOP = ROOT / "tests" / "builds" / "snoop_build.py"
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"

pytestmark = pytest.mark.skipif(
    sandbox.available() is not None, reason=f"no confinement here: {sandbox.available()}"
)


@pytest.fixture
def substrate(tmp_path: Path) -> Iterator[Substrate]:
    sub = Substrate(tmp_path)
    try:
        yield sub
    finally:
        sub.close()


class HarnessListener:
    """A TCP port and a Unix socket of 'the harness' that count who connects."""

    def __init__(self, directory: Path) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen()
        self.tcp.setblocking(False)
        self.port = self.tcp.getsockname()[1]
        self.unix_path = directory / "control.sock"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(self.unix_path))
        self.unix.listen()
        self.unix.setblocking(False)

    def accepted(self) -> int:
        n = 0
        for s in (self.tcp, self.unix):
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                conn.close()
                n += 1
        return n

    def close(self) -> None:
        self.tcp.close()
        self.unix.close()
        shutil.rmtree(self.unix_path.parent)


def _wait_http(url: str, proc: Managed, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.alive(), (proc.log_path.read_text(), url)
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{url} never answered:\n{proc.log_path.read_text()}")


def _reported(log: Path, prefix: str = "sreforge-snoop-build: ") -> dict[str, object]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = [x for x in log.read_text().splitlines() if x.startswith(prefix)]
        if lines:
            found: dict[str, object] = json.loads(lines[0].removeprefix(prefix))
            return found
        time.sleep(0.05)
    pytest.fail(f"no report in {log}:\n{log.read_text()}")


def test_a_build_reaches_its_dependency_and_nothing_of_the_harness(
    tmp_path: Path, substrate: Substrate
) -> None:
    with case("security: local substrate confinement (reads, processes, network, writes)"):
        run = tmp_path / "run"
        healthy = run / "trees" / "healthy"
        shutil.copytree(ROOT / "substrate" / "catalog", healthy)
        tree = run / "trees" / "patched"
        tree.mkdir(parents=True)
        shutil.copy(SNOOP, tree)
        data = run / "data"
        data.mkdir()
        listener = HarnessListener(Path(tempfile.mkdtemp(prefix="sreforge-ctl-test-")))
        procs: list[Managed] = []
        try:
            # a dependency (like Redis) and the build before this one (like the regressed)
            dep_tree = tmp_path / "dep"
            dep_tree.mkdir()
            (dep_tree / "healthz").write_text("ok")
            dep = substrate.place()
            procs.append(
                substrate.spawn(
                    "dep",
                    ["python", "-m", "http.server", "--bind", "127.0.0.1", str(dep.port)],
                    place=dep,
                    log_path=tmp_path / "dep.log",
                    tree=dep_tree,
                )
            )
            _wait_http(f"http://127.0.0.1:{dep.port}/healthz", procs[-1])
            before = substrate.place(reach=[dep.port])
            procs.append(
                substrate.spawn(
                    "before",
                    ["python", "-m", "http.server", "--bind", "127.0.0.1", str(before.port)],
                    place=before,
                    log_path=tmp_path / "before.log",
                    tree=dep_tree,
                )
            )
            _wait_http(f"http://127.0.0.1:{before.port}/healthz", procs[-1])

            secrets = [
                SCENARIO / "root_cause.md",
                SCENARIO / "fixes",
                ROOT / ".git",
                ROOT,
                run,
                healthy,
                healthy / "catalog" / "app.py",
                tmp_path / "dep.log",
                listener.unix_path.parent,
                Path("/opt"),
            ]
            # the home of the harness's user, but for the Python it lends every build
            runtime = runtime_dirs()
            secrets += [
                p
                for p in sorted(Path("/root").iterdir())[:20]
                if not any(d == str(p) or d.startswith(f"{p}/") for d in runtime)
            ]
            secrets = [s for s in secrets if s.exists()]
            plan = {
                "secrets": [str(s) for s in secrets],
                "harness": os.getpid(),
                "harness_port": listener.port,
                "harness_socket": str(listener.unix_path),
                "reach": {"dependency": dep.port, "build before": before.port},
            }
            place = substrate.place(reach=[dep.port])
            env = {
                "PORT": str(place.port),
                "DATA_DIR": substrate.data_path(data),
                "HOST": "127.0.0.1",
            }
            build = substrate.spawn(
                "build",
                ["python", "snoop_build.py", json.dumps(plan)],
                place=place,
                log_path=tmp_path / "build.log",
                tree=tree,
                data=data,
                env=env,
            )
            procs.append(build)
            seen = _reported(tmp_path / "build.log")
            _wait_http(f"http://127.0.0.1:{place.port}/healthz", build)  # through the gateway

            reads = seen["reads"]
            assert isinstance(reads, dict)
            assert len(reads) == len(secrets) >= 9
            for path, got in reads.items():
                # a folder above the Python every build is lent (the checkout holding the
                # venv, as in CI) shows the way to it and nothing else
                toward = {
                    Path(d).relative_to(path).parts[0]
                    for d in runtime
                    if d.startswith(f"{path.rstrip('/')}/")
                }
                allowed = {"FileNotFoundError", "PermissionError"}
                if toward:
                    allowed.add("listed: " + ",".join(sorted(toward)))
                assert got in allowed, (path, got)
            via_proc = seen["via_proc"]
            assert isinstance(via_proc, dict)
            assert set(via_proc.values()) <= {"FileNotFoundError", "PermissionError"}, via_proc
            assert seen["signal_harness"] == "ProcessLookupError"
            assert seen["processes"] == [1]  # itself, PID 1 of its own namespace
            assert seen["listening"] == sorted([dep.port, place.port]) or seen["listening"] == [
                dep.port
            ]  # its own port may not be bound yet when it looks
            assert seen["harness_port"] == "ConnectionRefusedError"
            assert seen["harness_socket"] == "FileNotFoundError"
            assert seen["reach"] == {
                "dependency": "connected",
                "build before": "ConnectionRefusedError",
            }
            assert listener.accepted() == 0
            writes = seen["writes"]
            assert isinstance(writes, dict)
            assert "written" not in writes.values(), writes
            assert (seen["data"], seen["scratch"]) == ("written", "written")
            assert (data / "snoop").read_text() == "snoop\n"
            assert (seen["umount"], seen["unshare_net"]) == ("refused", "refused")
            assert (seen["uid"], seen["groups"], seen["no_new_privs"]) == (65534, [], "1")
            assert int(str(seen["cap_eff"]), 16) == 0
            assert int(str(seen["cap_bnd"]), 16) == 0
            environment = seen["environment"]
            assert isinstance(environment, list)
            assert not [k for k in environment if k.startswith("SREFORGE")], environment
            assert set(environment) <= {
                *("PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "PYTHONDONTWRITEBYTECODE"),
                *("PORT", "DATA_DIR", "HOST", "LC_CTYPE"),
            }, environment
            root_entries = seen["root_entries"]
            assert isinstance(root_entries, list)
            top_of = {d.split("/")[1] for d in runtime_dirs()}  # the harness's Python
            view = {"bin", "data", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc",
                    "sbin", "srv", "tmp", "usr"}  # fmt: skip
            assert set(root_entries) <= view | top_of, root_entries
            # the harness exporter reads the build's own process, not the unshare around it
            assert (
                Path(f"/proc/{build.pid}/cmdline")
                .read_bytes()
                .split(b"\0")[1]
                .endswith(b"snoop_build.py")
            )
        finally:
            for p in procs:
                p.stop(1)
            listener.close()


def test_ci_and_data_preparation_have_no_network_and_write_only_their_tree(
    tmp_path: Path, substrate: Substrate
) -> None:
    listener = HarnessListener(Path(tempfile.mkdtemp(prefix="sreforge-ctl-test-")))
    try:
        tree = tmp_path / "tree"
        tree.mkdir()
        data = tmp_path / "data"
        data.mkdir()
        probe = (
            "import json, os, socket, pathlib\n"
            "s = socket.socket()\n"
            "try:\n"
            f"    s.connect(('127.0.0.1', {listener.port})); out = 'connected'\n"
            "except OSError as e:\n"
            "    out = type(e).__name__\n"
            "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
            "c = socket.create_connection(srv.getsockname()); c.close()\n"
            "pathlib.Path('built').write_text('x')\n"
            f"pathlib.Path('{substrate.data_path(data)}/prepared').write_text('x')\n"
            "print(json.dumps({'harness': out, 'loopback': 'up', 'uid': os.getuid()}))\n"
        )
        argv, env = substrate.wrap(
            ["python", "-c", probe], tree=tree, data=data, tree_writable=True
        )
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "harness": "ConnectionRefusedError",
            "loopback": "up",
            "uid": 65534,
        }
        assert (tree / "built").exists()
        assert (data / "prepared").exists()
        assert listener.accepted() == 0
    finally:
        listener.close()


def test_stopping_a_build_ends_what_it_forked(tmp_path: Path, substrate: Substrate) -> None:
    """A build is PID 1 of its namespace: stopping it ends its daemonized children too."""
    place = substrate.place(reach=[])
    forker = (
        "import os, time, http.server, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        f"http.server.test(http.server.SimpleHTTPRequestHandler, port={place.port},"
        " bind='127.0.0.1')\n"
    )
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "healthz").write_text("ok")
    proc = substrate.spawn(
        "forker", ["python", "-c", forker], place=place, log_path=tmp_path / "f.log", tree=tree
    )
    _wait_http(f"http://127.0.0.1:{place.port}/healthz", proc)
    inner = proc.pid
    ns = _pidns(inner)
    members = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _pidns(int(p.name)) == ns
    ]
    assert len(members) >= 2, members  # the server, the sleeping grandchild (and a zombie)
    proc.stop(1)
    time.sleep(0.2)
    assert [p for p in members if Path(f"/proc/{p}").exists()] == []
    substrate.release(place.port)


def _pidns(pid: int) -> str:
    try:
        return str(Path(f"/proc/{pid}/ns/pid").readlink())
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """Whether `pid` still runs. A killed process whose parent died is re-parented to the
    nearest child subreaper: that is this pytest process once a test ran a LocalRun in it
    (runtime/contention.py), and it stays a zombie there until reaped, so reap it."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_harness_takes_its_confined_builds_with_it(tmp_path: Path) -> None:
    """unshare ignores SIGTERM and the uid change clears a parent-death signal: the view's
    child re-arms it, so a SIGKILLed harness leaves no build running."""
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'operator')!r})\n"
        "from pathlib import Path\n"
        "from sreforge.runtime.confine import Substrate\n"
        f"sub = Substrate(Path({str(tmp_path)!r}))\n"
        "place = sub.place(reach=[])\n"
        "p = sub.spawn('sleeper', ['sleep', '600'], place=place,"
        f" log_path=Path({str(tmp_path / 's.log')!r}))\n"
        "while not Path(f'/proc/{p.pid}/cmdline').read_bytes().startswith(b'sleep'):\n"
        "    time.sleep(0.01)\n"
        "print(p.pid, sub.gateway.proc.pid, sub.root, flush=True)\n"
        "time.sleep(600)\n"
    )
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        first, second, root = harness.stdout.readline().split()
        inner, gateway = int(first), int(second)
        assert Path(f"/proc/{inner}/cmdline").read_bytes().startswith(b"sleep")
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
    deadline = time.monotonic() + 10
    pids = [inner, gateway]
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.05)
    assert not _running(inner)
    assert not _running(gateway)
    Path(root).rmdir()  # the views' mount point: a killed harness cannot remove it


def test_prometheus_admin_and_lifecycle_apis_are_off(tmp_path: Path) -> None:
    """Nothing that changes what is measured answers on Prometheus's port: the run starts it
    without --web.enable-lifecycle or --web.enable-admin-api (and a confined build cannot
    reach the port at all, above)."""
    with case("security: Prometheus admin and lifecycle APIs refused"):
        if shutil.which("prometheus") is None:
            pytest.skip("needs Debian's prometheus: bash scripts/setup.sh")
        rules = tmp_path / "rules.yml"
        rules.write_text("groups: []\n")
        prom = PrometheusServer(tmp_path / "prom", [rules], ["job"])
        prom.start()
        try:
            assert prom.proc is not None
            assert not [a for a in prom.proc.argv if "enable" in a], prom.proc.argv
            assert prom.proc.argv[0] == prometheus_binary()
            answers = {}
            for method, path in (
                ("POST", "/-/reload"),
                ("POST", "/-/quit"),
                ("PUT", "/-/reload"),
                ("POST", "/api/v1/admin/tsdb/delete_series?match[]=up"),
                ("POST", "/api/v1/admin/tsdb/snapshot"),
                ("POST", "/api/v1/admin/tsdb/clean_tombstones"),
                ("POST", "/api/v1/write"),
            ):
                req = urllib.request.Request(f"{prom.url}{path}", method=method, data=b"")
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:
                        answers[f"{method} {path}"] = r.status
                except urllib.error.HTTPError as exc:
                    answers[f"{method} {path}"] = exc.code
            assert all(code >= 400 for code in answers.values()), answers
            assert prom.proc.alive()  # /-/quit did not stop it
        finally:
            prom.stop()


REVERSER = """
import socket, sys, threading
srv = socket.socket()
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(128)
def serve(c):
    data = b""
    while chunk := c.recv(65536):
        data += chunk
    c.sendall(data[::-1])
    c.close()
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
"""


def _reverse_through(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)  # the answer comes only after the request's end
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_the_gateway_forwards_whole_conversations_and_forgets_a_retired_build(
    tmp_path: Path, substrate: Substrate
) -> None:
    place = substrate.place(reach=[])
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "reverser.py").write_text(REVERSER)
    proc = substrate.spawn(
        "reverser",
        ["python", "reverser.py", str(place.port)],
        place=place,
        log_path=tmp_path / "r.log",
        tree=tree,
    )
    try:
        deadline = time.monotonic() + 20
        while True:  # closed on the harness until it listens inside
            with contextlib.suppress(OSError):
                if _reverse_through(place.port, b"ab") == b"ba":
                    break
            assert proc.alive(), (tmp_path / "r.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        big = os.urandom(3 * 1024 * 1024)  # more than any buffer: back-pressure both ways
        assert _reverse_through(place.port, big) == big[::-1]
        payloads = [os.urandom(1000 + i) for i in range(64)]
        results: list[bytes] = []
        threads = [
            threading.Thread(target=lambda p=p: results.append(_reverse_through(place.port, p)))
            for p in payloads
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == sorted(p[::-1] for p in payloads)
    finally:
        proc.stop(1)
    assert substrate.gateway is not None
    assert place.netns is not None
    assert Path(place.netns).exists()
    substrate.release(place.port)
    with socket.socket() as s:  # the harness's side is closed ...
        assert s.connect_ex(("127.0.0.1", place.port)) != 0
    assert not Path(place.netns).exists()  # ... and the build's namespace is gone
