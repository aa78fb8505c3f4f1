"""One scenario graded on the real node (the operator, real pods) and locally (`sreforge
run`), side by side: creation -> alert firing, Submission -> verdict less its inherent
waits, the grader's CPU and memory per active Incident, and the time a scenario's
regressed image takes to rebuild when only its patch changed.

Node: the single-node cluster of tests/localcluster.py (containerd, kubelet, kube-proxy,
CoreDNS; the images of hack/images.sh), the chart installed as the node tests install it,
the scenario's healthy service deployed as a user would (runtime/kube/validate.py), then
its Incident and, once the alert fires, the reference fix as a Submission. The operator is
the `kopf run` process in its pod, found on this host by its cgroup and sampled from /proc
(utime+stime, RSS) while idle and while the Incident is active.
Local: `sreforge run SCENARIO --fix FIX` with the same sustained window and soak; the
driver process is sampled the same way (its own CPU and RSS; the service builds, the load
generator and Prometheus are its children and not counted, as the node's pods are not).
Rebuild: the regressed image built again (Docker, BuildKit, the cached layers of
hack/images.sh's engine) from a patch that differs from the scenario's regression by one
added file.
Writes the `## Real node and local` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the node tests' cluster and chart install, reused
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmd import publish  # noqa: E402
from procstat import cpu_seconds, rss_mib  # noqa: E402
from tests.integration.node.test_real_node import SYSTEM_NS, helm_install  # noqa: E402
from tests.kubeenv import find_tools_bin, wait_for  # noqa: E402
from tests.localcluster import LocalCluster, missing_prerequisites  # noqa: E402

from sreforge.runtime.kube import validate  # noqa: E402
from sreforge.runtime.kube.config import OperatorConfig  # noqa: E402
from sreforge.scenarios import load_scenario  # noqa: E402

HEADING = "## Real node and local"
# a Docker CLI that builds with BuildKit without the buildx plugin (hack/images.sh's choice)
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")


@dataclass
class Sampler:
    """A process's CPU seconds and RSS, every `interval` seconds, in a thread."""

    pid: int
    interval: float = 1.0
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, cpu, rss
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), cpu_seconds(self.pid), rss_mib(self.pid)))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def between(self, t0: float, t1: float) -> tuple[float, float]:
        """(CPU share of one core, peak RSS MiB) over [t0, t1]."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return 0.0, 0.0
        cpu = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        return cpu, max(s[2] for s in inside)


def operator_pid() -> int:
    """The operator's `kopf run` process in its pod (a kubepods cgroup) on this host."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cgroup = (proc / "cgroup").read_text()
        except OSError:
            continue
        if b"kopf" in b" ".join(argv[:2]) and b"run" in argv and "kubepods" in cgroup:
            return int(proc.name)
    raise RuntimeError("no `kopf run` process in a kubepods cgroup on this host")


def kube_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    res = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {}


# ------------------------------------------------------------------------------ node
def on_node(scenario_dir: Path, fix: Path, sustain: int, soak: int, idle: int) -> dict[str, Any]:
    bin_dir = find_tools_bin()
    missing = missing_prerequisites(bin_dir)
    if missing or bin_dir is None:
        raise SystemExit("no real node here; missing: " + ", ".join(missing))
    scenario = load_scenario(scenario_dir)
    subprocess.run(["bash", str(ROOT / "hack" / "images.sh"), "build"], check=True, timeout=1800)
    with (
        tempfile.TemporaryDirectory(prefix="sreforge-bench-node-") as tmp,
        LocalCluster(bin_dir, Path(tmp) / "cluster") as cluster,
    ):
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        helm_install(cluster, Path(tmp))
        ns = "bench-node"
        cluster.kubectl("create", "namespace", ns)
        objs = validate.healthy_target(scenario, ns, OperatorConfig())
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input_text=json.dumps({"kind": "List", "apiVersion": "v1", "items": objs}),
        )
        for obj in objs:
            if obj["kind"] == "Deployment":
                name = obj["metadata"]["name"]
                cluster.kubectl("rollout", "status", "-n", ns, f"deploy/{name}", "--timeout=180s")
        sampler = Sampler(operator_pid()).start()
        print(f"node: operator idle for {idle} s", flush=True)
        t_idle = time.monotonic()
        time.sleep(idle)
        body = validate.incident_body(
            scenario, ns, f"http://prometheus.{SYSTEM_NS}.svc:9090", sustain
        )
        body["spec"]["verify"]["soakSeconds"] = [soak, soak]
        t_created, created = time.monotonic(), time.time()
        cluster.kubectl("create", "-f", "-", input_text=json.dumps(body))

        def fired() -> bool:
            st = kube_json(cluster, "incident", "-n", ns, validate.INCIDENT).get("status") or {}
            if st.get("phase") in ("Failed", "Succeeded"):
                raise RuntimeError(f"Incident ended {st.get('phase')}: {st}")
            return st.get("phase") == "AwaitingSubmission"

        wait_for(
            "the alert to fire", fired, scenario.verify.fire_timeout_seconds + 300, interval=1.0
        )
        t_fired = time.monotonic()
        print(f"node: alert firing {t_fired - t_created:.1f} s after creation", flush=True)
        sub = validate.submission_body(ns, "fix", fix.read_text(encoding="utf-8"))
        submitted = time.time()
        cluster.kubectl("create", "-f", "-", input_text=json.dumps(sub))

        def verdict() -> dict[str, Any] | None:
            st = kube_json(cluster, "submission", "-n", ns, "fix").get("status") or {}
            return st if st.get("passed") is not None else None

        status = wait_for("the verdict", verdict, 1200, interval=1.0)
        t_verdict, verdict_at = time.monotonic(), time.time()
        took = verdict_at - submitted
        print(f"node: verdict {status.get('reason')} after {took:.1f} s", flush=True)
        time.sleep(2)
        sampler.stop()
        inc = kube_json(cluster, "incident", "-n", ns, validate.INCIDENT)
        state = (((inc.get("status") or {}).get("loop") or {}).get("state")) or {}
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    instants = {
        "created": created,
        "injected": state.get("injected_at"),
        "fired": state.get("fired_at"),
        "submitted": submitted,
        "verdict": verdict_at,
    }
    ci = (state.get("ci_finished_at") or 0) - (state.get("submitted_at") or 0)
    quiet, active = sampler.between(t_idle, t_created), sampler.between(t_created, t_verdict)
    return figures(
        status.get("reason"),
        instants,
        ci=ci if ci > 0 else None,
        time_to_clear=(state.get("verdict") or {}).get("time_to_clear_seconds"),
        window=sustain + float(((status.get("soak") or {}).get("seconds")) or 0.0),
        cpu=(quiet[0], active[0]),
        rss=(quiet[1], active[1]),
    )


def figures(
    reason: str | None,
    t: dict[str, float | None],
    *,
    ci: float | None,
    time_to_clear: float | None,
    window: float,
    cpu: tuple[float | None, float],
    rss: tuple[float | None, float],
) -> dict[str, Any]:
    """One column of the table: `t` the instants (epoch seconds) of creation (local: the
    run's start), injection, firing, submission and verdict; `cpu` and `rss` (idle, active),
    idle None where there is no idle grader to take away."""

    def span(a: str, b: str) -> float | None:
        start, end = t.get(a), t.get(b)
        return None if start is None or end is None else end - start

    to_verdict = span("submitted", "verdict")
    inherent = (ci or 0.0) + (time_to_clear or 0.0) + window
    return {
        "reason": reason,
        "to_fired": span("created", "fired"),
        "injected_to_fired": span("injected", "fired"),
        "to_verdict": to_verdict,
        "ci": ci,
        "time_to_clear": time_to_clear,
        "window_soak": window,
        "beyond": None if to_verdict is None else to_verdict - inherent,
        "cpu_idle_pct": None if cpu[0] is None else cpu[0] * 100,
        "cpu_per_pct": (cpu[1] - (cpu[0] or 0.0)) * 100,
        "rss_idle": rss[0],
        "rss_active": rss[1],
        "rss_per": None if rss[0] is None else rss[1] - rss[0],
    }


# ----------------------------------------------------------------------------- local
def local(scenario_dir: Path, fix: Path, sustain: int, soak: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sreforge-bench-local-") as tmp:
        argv = [
            sys.executable, "-m", "sreforge.cli", "run", str(scenario_dir),
            "--fix", str(fix), "--sustain-seconds", str(sustain),
            "--soak-seconds", f"{soak}:{soak}", "--runs-dir", tmp,
        ]  # fmt: skip
        t0, created = time.monotonic(), time.time()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sampler = Sampler(proc.pid).start()
        proc.wait(timeout=1800)
        t1 = time.monotonic()
        sampler.stop()
        record = json.loads(max(Path(tmp).glob("*/record.json"), key=os.path.getmtime).read_text())
    stamps = record["timestamps"]
    # created: `sreforge run` started (its setup, the healthy build seen quiet, is in it,
    # as the healthy Deployment's start is not on the node)
    names = {"injected": "injected", "fired": "fired", "submitted": "submitted"}
    instants: dict[str, float | None] = {
        k: datetime.fromisoformat(stamps[v]).timestamp() if stamps.get(v) else None
        for k, v in (*names.items(), ("verdict", "recorded"))
    }
    instants["created"] = created
    return figures(
        record["reason"],
        instants,
        ci=(record.get("ci") or {}).get("durationSeconds"),
        time_to_clear=record.get("timeToClearSeconds"),
        window=sustain + float((record.get("soak") or {}).get("seconds") or 0.0),
        cpu=(None, sampler.between(t0, t1)[0]),
        rss=(None, sampler.between(t0, t1)[1]),
    )


# ---------------------------------------------------------------------------- rebuild
def rebuild(scenario_dir: Path) -> float:
    """Seconds to build the scenario's regressed image from a patch one file away from
    its regression (cached layers below the patched source)."""
    scenario = load_scenario(scenario_dir)
    source = scenario.service.source
    images = ["bash", str(ROOT / "hack" / "images.sh")]
    up = subprocess.run([*images, "engine", "status"], check=False, capture_output=True, text=True)
    started = up.returncode != 0  # not running: this benchmark starts it, then stops it
    host = subprocess.run([*images, "engine", "start"], capture_output=True, text=True, check=True)
    docker_host = next(
        w.split("=", 1)[1] for w in host.stdout.split() if w.startswith("DOCKER_HOST=")
    )
    marker = scenario_dir / f".bench-rebuild-{os.getpid()}.patch"
    stamp = f"{time.time():.6f}"
    marker.write_text(
        scenario.regression_path.read_text("utf-8")
        + "diff --git a/bench-marker.txt b/bench-marker.txt\nnew file mode 100644\n"
        + f"--- /dev/null\n+++ b/bench-marker.txt\n@@ -0,0 +1 @@\n+{stamp}\n"
    )
    tag = f"sreforge/{scenario.service.name}:bench-rebuild"
    try:
        t0 = time.monotonic()
        subprocess.run(
            [
                DOCKER,
                "build",
                "--network",
                "host",
                "-q",
                "-f",
                str(ROOT / source / "Dockerfile"),
                "--build-arg",
                "BASE_IMAGE=sreforge/base:bookworm",
                "--build-arg",
                f"SREFORGE_PATCH={marker.relative_to(ROOT)}",
                "-t",
                tag,
                str(ROOT),
            ],
            check=True,
            env={**os.environ, "DOCKER_HOST": docker_host, "DOCKER_BUILDKIT": "1"},
            timeout=900,
        )
        return time.monotonic() - t0
    finally:
        marker.unlink(missing_ok=True)
        env = {**os.environ, "DOCKER_HOST": docker_host}
        subprocess.run(
            [DOCKER, "image", "rm", "-f", tag], check=False, env=env, capture_output=True
        )
        if started:
            subprocess.run([*images, "engine", "stop"], check=False, capture_output=True)


def fmt(x: Any, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="latency-cache-stampede")
    ap.add_argument("--fix", default="restore-simplecache.patch")
    ap.add_argument("--sustain", type=int, default=30)
    ap.add_argument("--soak", type=int, default=60, help="the soak, fixed for both (s)")
    ap.add_argument("--idle", type=int, default=30, help="operator idle sample (s)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    scenario_dir = ROOT / "scenarios" / args.scenario
    fix = scenario_dir / "fixes" / args.fix
    rows = {"local": local(scenario_dir, fix, args.sustain, args.soak)}
    print(json.dumps(rows["local"], indent=1), flush=True)
    rows["node"] = on_node(scenario_dir, fix, args.sustain, args.soak, args.idle)
    print(json.dumps(rows["node"], indent=1), flush=True)
    built = rebuild(scenario_dir)
    cmd = (
        f"python benchmarks/bench_node.py --scenario {args.scenario} --fix {args.fix} "
        f"--sustain {args.sustain} --soak {args.soak}"
    )
    out = [
        f"`{cmd}`: {args.scenario} with fixes/{args.fix}, graded once on the real node "
        "(the chart's operator, real pods; tests/localcluster.py) and once locally "
        f"(`sreforge run`), the sustained window {args.sustain} s and the soak fixed at "
        f"{args.soak} s on both. *creation -> firing*: on the node from the Incident's "
        "creation (the healthy Deployment already running) to the alert firing as the "
        "operator recorded it; locally from `sreforge run`'s start (its setup starts the "
        "healthy build and waits until it is seen quiet). *Submission -> verdict*: on the "
        "node from `kubectl create` to the verdict in its status (polled every second); "
        "locally to the record. *beyond the inherent waits*: that less CI (on the node "
        "its Job, pod start included), time to clear, the window and the soak. CPU and "
        "memory: the operator's `kopf run` process (idle before the Incident, then over "
        "creation -> verdict; per Incident = active less idle) and the local driver process "
        "(its own, over the run). Rebuild: the regressed image from a patch one file away "
        f"from its regression, cached layers. {os.cpu_count()} CPUs, 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| measure | real node | local |",
        "|---|---:|---:|",
    ]
    lines = [
        ("verdict", "reason", ""),
        ("creation -> alert firing (s)", "to_fired", ".1f"),
        ("of it, injection -> firing (s)", "injected_to_fired", ".1f"),
        ("Submission -> verdict (s)", "to_verdict", ".1f"),
        ("inherent: CI (s)", "ci", ".1f"),
        ("inherent: time to clear (s)", "time_to_clear", ".1f"),
        ("inherent: window + soak (s)", "window_soak", ".1f"),
        ("Submission -> verdict beyond the inherent waits (s)", "beyond", ".1f"),
        ("grader CPU idle (% of one core)", "cpu_idle_pct", ".1f"),
        ("grader CPU per active Incident (% of one core)", "cpu_per_pct", ".1f"),
        ("grader RSS idle (MiB)", "rss_idle", ".0f"),
        ("grader RSS peak while active (MiB)", "rss_active", ".0f"),
        ("grader RSS per active Incident (MiB)", "rss_per", ".0f"),
    ]
    out += [
        f"| {label} | {fmt(rows['node'][k], spec)} | {fmt(rows['local'][k], spec)} |"
        for label, k, spec in lines
    ]
    out.append(f"| regressed image rebuilt, only the patch changed (s) | {fmt(built)} | n/a |")
    publish(HEADING, out, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
