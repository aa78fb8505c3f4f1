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

from sreforge.api.scenario import LoadProfile  # noqa: E402
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


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_case(tmp: Path, echo_url: str, rate: int, delay_ms: int, seconds: int) -> dict[str, Any]:
    profile = LoadProfile(
        rate=rate,
        duration_seconds=seconds,
        max_in_flight=max(64, rate),  # room for rate x 300 ms in flight
        timeout_ms=2000,
        path=f"/sleep/{delay_ms}/{{id}}",
        id_range=(1, 100_000),
        expect_json_id=True,
    )
    port_file = tmp / f"load-{rate}-{delay_ms}.port"
    err_path = tmp / f"load-{rate}-{delay_ms}.err"
    control = tmp / f"load-{rate}-{delay_ms}.sock"  # /stats is on the control socket only
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-load-") as d:
        tmp = Path(d)
        echo_port_file = tmp / "echo.port"
        echo = subprocess.Popen(
            [sys.executable, "-m", "sreforge.load.echo", "--port-file", str(echo_port_file),
             "--max-seconds", str(len(CASES) * (args.seconds + 15) + 30)],
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
        finally:
            stop(echo)
    md = table(rows)
    print(md)
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
    )
    write_section(args.output, HEADING, body)
    print(f"updated {args.output} ({HEADING})", file=sys.stderr)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
