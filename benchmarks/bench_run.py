"""Full-run overhead: where the wall time of one graded `sreforge run` goes.

Runs latency-cache-stampede with a reference fix (real Prometheus, service, load) and
splits its wall time into the inherent waits (the alert's fire wait, the time the fix
takes to clear the alert, the sustained window and the soak after it) and the harness
overhead (everything else: trees, seeding, process start-up, CI, redeploy, restore,
recording). The soak is fixed (--soak, both ends of its range) so that runs compare.
Writes the `## Full run` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmd import publish

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Full run"


def one_run(fix: str, sustain: int, soak: int, runs: Path) -> dict[str, float]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sreforge.cli",
            "run",
            str(ROOT / "scenarios" / "latency-cache-stampede"),
            "--fix",
            str(ROOT / "scenarios" / "latency-cache-stampede" / "fixes" / fix),
            "--sustain-seconds",
            str(sustain),
            "--soak-seconds",
            f"{soak}:{soak}",
            "--runs-dir",
            str(runs),
        ],
        check=False,
        capture_output=True,
        timeout=900,
    )
    record_path = max(runs.glob("*/record.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(record_path.read_text())
    wall = record["wallTimeSeconds"]
    ttc = record["timeToClearSeconds"] or 0.0
    soaked = float((record.get("soak") or {}).get("seconds") or 0.0)
    inherent = wall.get("fireWait", 0.0) + ttc + sustain + soaked
    return {
        "passed": float(record["passed"]),
        "total": wall["total"],
        "setup": wall.get("setup", 0.0),
        "fire_wait": wall.get("fireWait", 0.0),
        "ci": wall.get("ci", 0.0),
        "deploy": wall.get("deploy", 0.0),
        "time_to_clear": ttc,
        "sustain": float(sustain),
        "soak": soaked,
        "restore": wall.get("restore", 0.0),
        "overhead": wall["total"] - inherent,
        # share of the machine's CPU outside this run while the fix was verified
        "outside_cpu": (record.get("contention") or {}).get("verifyOutsideCpuMean") or 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fix", default="restore-simplecache.patch")
    ap.add_argument("--sustain", type=int, default=30)
    ap.add_argument("--soak", type=int, default=60, help="the soak after the window (s)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sreforge-bench-") as tmp:
        for i in range(args.runs):
            row = one_run(args.fix, args.sustain, args.soak, Path(tmp) / str(i))
            row["load_avg_1m"] = os.getloadavg()[0]  # other work on the machine, at the end
            rows.append(row)
    cols = [
        "total",
        "setup",
        "fire_wait",
        "ci",
        "deploy",
        "time_to_clear",
        "sustain",
        "soak",
        "restore",
        "overhead",
        "load_avg_1m",
        "outside_cpu",
    ]
    out = [
        f"`python benchmarks/bench_run.py --fix {args.fix} --sustain {args.sustain} "
        f"--soak {args.soak}` (seconds; overhead = total - fire wait - time to clear - "
        "sustained window - soak (the hidden soak's length fixed here, drawn per run "
        "otherwise); "
        f"load_avg_1m: the machine's 1-minute load average when the run ended, {os.cpu_count()} "
        "CPUs: setup includes the wait for 15 s of steady quiet on the healthy build, which "
        "other work on the machine lengthens; outside_cpu: the share of the machine's CPU "
        "spent outside the run while the fix was verified, the contention guard's measure)",
        "",
        "| run | passed | " + " | ".join(cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for i, r in enumerate(rows):
        out.append(
            f"| {i + 1} | {bool(r['passed'])} | "
            + " | ".join(f"{r[c]:.2f}" if c == "outside_cpu" else f"{r[c]:.1f}" for c in cols)
            + " |"
        )
    publish(HEADING, out, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
