"""Benchmark the load generator (`python -m sreforge.load`) as a process of its own.

Against a target in a separate process (`python -m sreforge.load.echo`, answering after
an asyncio.sleep of ~3 ms or ~300 ms), at 200 and 1000 req/s, ~10 s each, it measures:
achieved rate, scheduling lag p50/p99, dropped iterations, and the generator process's
CPU seconds per 1000 requests (utime + stime from /proc/<pid>/stat over the steady part
of the run, after a 1 s warm-up, divided by the requests completed meanwhile).

    PYTHONPATH=operator python benchmarks/bench_load.py [--seconds 10]

Prints a markdown table and rewrites the `## Load generator` section of BENCHMARKS.md at
the repository root (only that section; the file is created if missing). Traffic goes to
127.0.0.1 only; every process started here is stopped here, by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OPERATOR = ROOT / "operator"
sys.path.insert(0, str(OPERATOR))

from sreforge.api.scenario import LoadProfile, Route  # noqa: E402
from sreforge.load.command import generator_argv  # noqa: E402
from sreforge.load.control import read_stats  # noqa: E402
from sreforge.load.process import read_port_file  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from benchmd import write_section  # noqa: E402
from procstat import cpu_seconds  # noqa: E402

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(OPERATOR), os.environ.get("PYTHONPATH")])),
}
HEADING = "## Load generator"
CASES = [(200, 3), (200, 300), (1000, 3), (1000, 300)]  # (req/s, response ms)
# What the realistic traffic costs the generator at the catalogue's rates: 60 req/s is its
# highest [load] rate, 5 req/s the prober's default (the prober is this generator too).
TRAFFIC = [("kept-alive", 60), ("default", 60), ("mix", 60), ("mix", 5)]  # (kind, req/s)


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def profile_for(kind: str, rate: int, delay_ms: int, seconds: int) -> LoadProfile:
    """The load of one row. `default`: one route, the defaults of [load] (Zipf ids, a
    quarter of the requests on new connections, visitors drawn from the client pool);
    `kept-alive`: one route as the seed's load was (uniform ids, every connection kept
    alive); `mix`: three routes as a scenario's [[load.routes]] are (two GETs, one with
    known answers checked, and a POST with a JSON body), default popularity and connections."""
    common: dict[str, Any] = {
        "rate": rate,
        "duration_seconds": seconds,
        "max_in_flight": max(64, rate),  # room for rate x 300 ms in flight
        "timeout_ms": 2000,
        "id_range": (1, 100_000),
    }
    single = {"path": f"/sleep/{delay_ms}/{{id}}", "expect_json_id": True}
    if kind == "default":
        return LoadProfile(**common, **single)
    if kind == "kept-alive":
        return LoadProfile(**common, **single, popularity="uniform", new_connection_ratio=0.0)
    routes = [
        Route(path=f"/sleep/{delay_ms}/{{id}}", name="page", weight=6, expect_json_id=True),
        Route(path="/item/{id}", name="item", weight=3, expect_json_id=True, known_answers=50),
        Route(path="/fast/{id}", name="order", method="POST", weight=1, body={"id": "{id}"}),
    ]
    return LoadProfile(**common, routes=routes)


def run_case(
    tmp: Path, echo_url: str, rate: int, delay_ms: int, seconds: int, *, kind: str = "default"
) -> dict[str, Any]:
    profile = profile_for(kind, rate, delay_ms, seconds)
    tag = f"{kind}-{rate}-{delay_ms}"
    port_file = tmp / f"load-{tag}.port"
    err_path = tmp / f"load-{tag}.err"
    control = tmp / f"load-{tag}.sock"  # /stats is on the control socket only
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            generator_argv(profile, echo_url, port_file=port_file, control_socket=control, seed=1),
            env=ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            read_port_file(port_file, 15.0, proc)  # written once both listeners are up
            t_start = time.monotonic()
            time.sleep(1.0)  # warm-up: imports done, connections opened
            cpu0, done0 = cpu_seconds(proc.pid), read_stats(control)["completed"]
            time.sleep(max(0.5, seconds - 1.5 - (time.monotonic() - t_start) + 1.0))
            cpu1, last = cpu_seconds(proc.pid), read_stats(control)
            done1 = last["completed"]
            proc.wait(timeout=seconds + 10)
        finally:
            stop(proc)
    lines = err_path.read_text().splitlines()
    summary = json.loads(lines[-1].removeprefix("sreforge-load: summary "))
    completed = max(1, done1 - done0)
    return {
        "kind": kind,
        "rate": rate,
        "delay_ms": delay_ms,
        "achieved": summary["achieved_rate"],
        "lag_p50_ms": 1000 * (summary["lag_p50"] or 0.0),
        "lag_p99_ms": 1000 * (summary["lag_p99"] or 0.0),
        "dropped": summary["dropped"],
        "scheduled": summary["scheduled"],
        "success": summary["outcomes"]["success"],
        "completed": summary["completed"],
        "cpu_per_1000": (cpu1 - cpu0) / completed * 1000,
        "cpu_share": (cpu1 - cpu0) / max(1e-9, last["elapsed_seconds"] - 1.0),
        "exit": proc.returncode,
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| target req/s | response | achieved req/s | lag p50 | lag p99 | dropped "
        "| success | CPU s / 1000 req | CPU (of one core) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ok = 100.0 * r["success"] / max(1, r["completed"])
        out.append(
            f"| {r['rate']} | {r['delay_ms']} ms | {r['achieved']:.1f} | {r['lag_p50_ms']:.2f} ms "
            f"| {r['lag_p99_ms']:.2f} ms | {r['dropped']} / {r['scheduled']} | {ok:.1f} % "
            f"| {r['cpu_per_1000']:.3f} | {100 * r['cpu_share']:.0f} % |"
        )
    return "\n".join(out)


def traffic_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| traffic | target req/s | achieved req/s | success | CPU s / 1000 req "
        "| CPU (of one core) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ok = 100.0 * r["success"] / max(1, r["completed"])
        out.append(
            f"| {r['kind']} | {r['rate']} | {r['achieved']:.1f} | {ok:.1f} % "
            f"| {r['cpu_per_1000']:.3f} | {100 * r['cpu_share']:.1f} % |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--traffic-seconds", type=int, default=30, help="per row of the traffic table")
    ap.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    rows, traffic = [], []
    budget = len(CASES) * (args.seconds + 15) + len(TRAFFIC) * (args.traffic_seconds + 15) + 30
    with tempfile.TemporaryDirectory(prefix="bench-load-") as d:
        tmp = Path(d)
        echo_port_file = tmp / "echo.port"
        echo = subprocess.Popen(
            [sys.executable, "-m", "sreforge.load.echo", "--port-file", str(echo_port_file),
             "--max-seconds", str(budget)],
            env=ENV, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            echo_url = f"http://127.0.0.1:{read_port_file(echo_port_file, 15.0, echo)}"
            for rate, delay in CASES:
                echo_cpu0 = cpu_seconds(echo.pid)
                row = run_case(tmp, echo_url, rate, delay, args.seconds)
                row["echo_cpu"] = cpu_seconds(echo.pid) - echo_cpu0
                rows.append(row)
                print(f"{rate} req/s, {delay} ms: done", file=sys.stderr, flush=True)
            for kind, rate in TRAFFIC:
                traffic.append(run_case(tmp, echo_url, rate, 3, args.traffic_seconds, kind=kind))
                print(f"{kind} at {rate} req/s: done", file=sys.stderr, flush=True)
        finally:
            stop(echo)
    md, md_traffic = table(rows), traffic_table(traffic)
    print(md)
    print(md_traffic)
    body = (
        "`benchmarks/bench_load.py`: `python -m sreforge.load` as its own process against "
        "`python -m sreforge.load.echo` in another (responses after an asyncio.sleep), "
        f"{args.seconds} s per row, `max_in_flight` = max(64, rate), timeout 2 s. Lag: how "
        "late an iteration started after its due time (whole-run p50/p99 of the generator's "
        "sample). CPU: utime+stime of the generator process after a 1 s warm-up, per 1000 "
        "completed requests.\n\n"
        f"{md}\n\n"
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"aiohttp {version('aiohttp')}, {platform.system()} {platform.release()}; "
        "the target shares the machine (its CPU, per row: "
        + ", ".join(f"{r['rate']}/{r['delay_ms']}ms {r['echo_cpu']:.1f}s" for r in rows)
        + "). Figures are machine- and load-dependent; other work on the machine shows as lag."
        "\n\nWhat the realistic traffic costs (issue 12), at the catalogue's highest [load] "
        f"rate and the prober's default, {args.traffic_seconds} s per row, responses after "
        "3 ms: *kept-alive*, one route as the seed's load was (uniform ids, every "
        "connection kept alive); *default*, one route with [load]'s defaults (Zipf ids, a "
        "quarter of the requests on new connections, visitors drawn from the client pool); "
        "*mix*, three routes as a scenario's `[[load.routes]]` (two GETs, one checking 50 "
        "known answers, and a POST with a JSON body). The 5 req/s row is what the prober "
        "costs beside the load.\n\n"
        f"{md_traffic}"
    )
    write_section(args.output, HEADING, body)
    print(f"updated {args.output} ({HEADING})", file=sys.stderr)
    return 0 if all(r["exit"] == 0 for r in rows + traffic) else 1


if __name__ == "__main__":
    sys.exit(main())
