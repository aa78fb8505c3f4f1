"""The operator under 20 concurrent Incidents (one per namespace) on a real kube-apiserver.

A real control plane (tests/kubeenv.py: etcd, kube-apiserver, controller-manager,
scheduler, kwok as the kubelet of one fake Node), `sreforge operator` as a real
subprocess watching the whole cluster, and a real Prometheus with the scenario's rules
that scrapes nothing (kwok runs no containers, so the alert never fires: every Incident
stays in AwaitingFire, sampling Prometheus every second, which is the operator's steady
load while a run waits for its alert).

Measured: per Incident, the time from its creation to its `Injected` condition (the image
swap, the rollout through the real Deployment controller, the load Job created), polled
every 0.2 s; the operator's CPU (utime+stime from /proc) and resident memory while idle,
during the burst of 20 injections and in the steady state after it.
Writes the `## Operator: concurrent Incidents` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sreforge.api.resources import GROUP, VERSION
from sreforge.markdown import write_section
from sreforge.runtime.prometheus import PrometheusServer
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test suite's control plane, reused
from tests.kubeenv import BUILD_COMMAND, ControlPlane, find_tools_bin  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from procstat import cpu_seconds, rss_mib  # noqa: E402

HEADING = "## Operator: concurrent Incidents"
SCENARIO = load_scenario(ROOT / "scenarios" / "latency-cache-stampede")


def target(apps: Any, core: Any, ns: str) -> None:
    labels = {"app": "catalog"}
    apps.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "catalog", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "catalog",
                                "image": "sreforge/catalog:healthy",
                                "ports": [{"containerPort": 8080}],
                            }
                        ]
                    },
                },
            },
        },
    )
    core.create_namespaced_service(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "catalog"},
            "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
        },
    )


def injected(custom: Any, ns: str) -> bool:
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "incidents", "bench")
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Injected" and c["status"] == "True" for c in conds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--incidents", type=int, default=20)
    ap.add_argument("--steady-seconds", type=int, default=60)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    bin_dir = find_tools_bin()
    if bin_dir is None:
        print(f"control-plane binaries are not built: {BUILD_COMMAND}", file=sys.stderr)
        return 2
    from kubernetes import client, config  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="sreforge-bench-op-") as tmp:
        work = Path(tmp)
        with ControlPlane(bin_dir, work / "kube") as cp:
            cp.install_crds()
            prom = PrometheusServer(work / "prom", [SCENARIO.rules_path], ["catalog", "loadgen"])
            prom.start()
            api = config.new_client_from_config(config_file=str(cp.kubeconfig))
            custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
            apps = client.AppsV1Api(api)
            namespaces = [f"bench-{i:02d}" for i in range(args.incidents)]
            for ns in namespaces:
                core.create_namespace({"metadata": {"name": ns}})
                target(apps, core, ns)
            log = (work / "operator.log").open("wb")
            op = subprocess.Popen(
                [
                    str(ROOT / ".venv" / "bin" / "sreforge"),
                    "operator",
                    "--kubeconfig",
                    str(cp.kubeconfig),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
            try:
                time.sleep(10)  # kopf starts, lists, settles
                idle_cpu0, idle_t0 = cpu_seconds(op.pid), time.monotonic()
                time.sleep(10)
                idle = (cpu_seconds(op.pid) - idle_cpu0) / (time.monotonic() - idle_t0)
                idle_rss = rss_mib(op.pid)
                created: dict[str, float] = {}
                burst_cpu0, burst_t0 = cpu_seconds(op.pid), time.monotonic()
                for ns in namespaces:
                    custom.create_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        ns,
                        "incidents",
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "Incident",
                            "metadata": {"name": "bench"},
                            "spec": {
                                "scenario": SCENARIO.name,
                                "prometheusURL": prom.url,
                                "load": {"rate": 5, "durationSeconds": 900},
                                "verify": {"fireTimeoutSeconds": 900},
                            },
                        },
                    )
                    created[ns] = time.monotonic()
                latency: dict[str, float] = {}
                peak = idle_rss
                deadline = time.monotonic() + 300
                while len(latency) < len(namespaces) and time.monotonic() < deadline:
                    for ns in namespaces:
                        if ns not in latency and injected(custom, ns):
                            latency[ns] = time.monotonic() - created[ns]
                    peak = max(peak, rss_mib(op.pid))
                    time.sleep(0.2)
                burst_s = time.monotonic() - burst_t0
                burst = (cpu_seconds(op.pid) - burst_cpu0) / burst_s
                steady_cpu0, steady_t0 = cpu_seconds(op.pid), time.monotonic()
                while time.monotonic() - steady_t0 < args.steady_seconds:
                    peak = max(peak, rss_mib(op.pid))
                    time.sleep(1)
                steady = (cpu_seconds(op.pid) - steady_cpu0) / (time.monotonic() - steady_t0)
                steady_rss = rss_mib(op.pid)
            finally:
                op.terminate()
                try:
                    op.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    op.kill()
                log.close()
                prom.stop()
                api.close()
    done = sorted(latency.values())
    missing = len(namespaces) - len(done)
    q = statistics.quantiles(done, n=20) if len(done) >= 2 else done * 19
    body = "\n".join(
        [
            f"`python benchmarks/bench_operator.py --incidents {args.incidents} "
            f"--steady-seconds {args.steady_seconds}`: one operator, {args.incidents} "
            "Incidents created at once (one per namespace) on a real kube-apiserver with kwok; "
            "the alert never fires (no containers run), so each Incident samples Prometheus "
            f"every second in AwaitingFire. {os.cpu_count()} CPUs, 1-minute load average "
            f"{os.getloadavg()[0]:.1f} at the end (the control plane shares the machine).",
            "",
            "| measure | value |",
            "|---|---|",
            f"| Incidents Injected | {len(done)} of {len(namespaces)}"
            + (f" ({missing} not within 300 s)" if missing else "")
            + " |",
            f"| creation → Injected, median | {statistics.median(done):.2f} s |"
            if done
            else "| creation → Injected | - |",
            f"| creation → Injected, p95 / max | {q[18]:.2f} s / {done[-1]:.2f} s |"
            if done
            else "| p95 | - |",
            f"| burst of injections (until all Injected) | {burst_s:.1f} s |",
            f"| operator CPU idle / burst / steady ({args.incidents} sampling) | "
            f"{idle:.1%} / {burst:.1%} / {steady:.1%} of one core |",
            f"| operator RSS idle / peak / steady | {idle_rss:.0f} / {peak:.0f} / "
            f"{steady_rss:.0f} MiB |",
        ]
    )
    print(body)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", HEADING, body)
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
