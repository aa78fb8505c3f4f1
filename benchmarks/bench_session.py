"""Cold runs against one warm session: the same scenario, the same patches.

Cold: one `sreforge run` per patch, each with its own environment (Prometheus, the
healthy build, the load, the quiet check, the injection). Warm: one `sreforge campaign`
grading the same patches in turn on one environment, restoring the regressed build and
waiting for the alert to fire again between them.

Per case, the inherent waits are the alert's fire wait (its `for` after the injection or
the restore), CI, and the verification (the time to clear and the sustained window, or the
clear budget when it never clears); everything else is overhead: in a cold run the whole
setup, in a warm session the restore, the recording and the hand-off. The setup of a cold
run is also split into the part the target set bounds (everything but the healthy build's
own start and the quiet check). Writes the `## Warm sessions` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmd import publish

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Warm sessions"
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
PATCHES = ["fixes/restore-simplecache.patch", "empty", "decoys/background-refresh.patch"]


def _cli(*args: str) -> float:
    """Run `sreforge ARGS` to its end; returns its wall seconds."""
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "sreforge.cli", *args],
        check=False,
        capture_output=True,
        timeout=1800,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    return time.monotonic() - t0


def _records(runs: Path) -> list[dict[str, Any]]:
    out = [json.loads(p.read_text()) for p in runs.glob("*/record.json")]
    return sorted(out, key=lambda r: r["timestamps"]["recorded"])


def _t(stamp: str | None) -> float:
    return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def _inherent(r: dict[str, Any]) -> float:
    wall = r["wallTimeSeconds"]
    return wall.get("fireWait", 0.0) + r["ci"]["durationSeconds"] + wall.get("verify", 0.0)


def cold(patches: list[str], sustain: int, runs: Path) -> dict[str, float]:
    total, overhead, setup_over, own_start = 0.0, 0.0, 0.0, 0.0
    passed = 0
    for i, patch in enumerate(patches):
        d = runs / str(i)
        fix = d / "empty.patch" if patch == "empty" else SCENARIO / patch
        if patch == "empty":
            d.mkdir(parents=True)
            fix.write_text("")
        total += _cli(
            "run",
            str(SCENARIO),
            "--fix",
            str(fix),
            "--sustain-seconds",
            str(sustain),
            "--runs-dir",
            str(d),
        )
        (r,) = _records(d)
        wall = r["wallTimeSeconds"]
        overhead += wall["total"] - _inherent(r)
        own_start += wall.get("deploy", 0.0)
        print(f"cold run {patch}: wall {wall}", file=sys.stderr)
        # bounded by the target: the setup beyond the healthy build's start and the quiet
        setup_over += wall["setup"] - wall.get("warmup", 0.0) - wall.get("healthyStart", 0.0)
        passed += r["passed"]
    n = len(patches)
    return {
        "cases": n,
        "wall": total,
        "overhead": overhead / n,
        "setup_over": setup_over / n,
        "passed": passed,
        "own_start": own_start / n,
    }


def warm(patches: list[str], sustain: int, runs: Path) -> dict[str, float]:
    fixes = [x for p in patches for x in ("--fix", p if p == "empty" else str(SCENARIO / p))]
    total = _cli(
        "campaign",
        str(SCENARIO),
        *fixes,
        "--sustain-seconds",
        str(sustain),
        "--runs-dir",
        str(runs),
    )
    records = _records(runs)
    assert len(records) == len(patches), f"{len(records)} records for {len(patches)} cases"
    first = records[0]["wallTimeSeconds"]
    setup = first["setup"]
    per_case = []
    own_start = []  # the patched build's own start until it answers its health check
    previous_end: float | None = None
    for r in records:
        # a later case begins when the one before it was recorded: its restore, the wait
        # for the alert to fire again and the hand-off are all in its span
        end = _t(r["timestamps"]["recorded"])
        start = previous_end if previous_end is not None else end - r["wallTimeSeconds"]["total"]
        span = end - start - (setup if previous_end is None else 0.0)
        per_case.append(span - _inherent(r))
        own_start.append(r["wallTimeSeconds"].get("deploy", 0.0))
        print(
            f"warm case {r['session']['label']}: span {span:.1f}s, inherent "
            f"{_inherent(r):.1f}s, wall {r['wallTimeSeconds']}",
            file=sys.stderr,
        )
        previous_end = end
    return {
        "cases": len(records),
        "wall": total,
        "overhead": sum(per_case) / len(per_case),
        "setup": setup,
        "passed": sum(r["passed"] for r in records),
        "overhead_max": max(per_case),
        "own_start": sum(own_start) / len(own_start),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sustain", type=int, default=30)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sreforge-bench-") as tmp:
        c = cold(PATCHES, args.sustain, Path(tmp) / "cold")
        w = warm(PATCHES, args.sustain, Path(tmp) / "warm")
    load = os.getloadavg()[0]
    out = [
        f"`python benchmarks/bench_session.py --sustain {args.sustain}`: latency-cache-stampede, "
        f"the same {len(PATCHES)} cases ({', '.join(PATCHES)}) as {len(PATCHES)} cold "
        "`sreforge run`s and as one warm session (`sreforge campaign`). Overhead per case = "
        "the case's wall time less its inherent waits (fire wait, CI, verification: time to "
        "clear + sustained window, or the clear budget); a warm case's span runs from the "
        "previous case's record, so its restore and the wait for the alert to fire again "
        "are in it (the fire wait counts as inherent). "
        f"{os.cpu_count()} CPUs, 1-minute load average {load:.1f} at the end.",
        "",
        "| mode | cases | passed | wall (s) | cases per hour | overhead per case (s) "
        "| of it, the patched build's own start (s) | setup (s) |",
        "|---|---|---|---|---|---|---|---|",
        f"| cold runs | {c['cases']} | {c['passed']} | {c['wall']:.0f} | "
        f"{3600 * c['cases'] / c['wall']:.1f} | {c['overhead']:.1f} | {c['own_start']:.1f} | "
        f"per run, beyond the healthy build's start and the quiet check: {c['setup_over']:.1f} |",
        f"| warm session | {w['cases']} | {w['passed']} | {w['wall']:.0f} | "
        f"{3600 * w['cases'] / w['wall']:.1f} | {w['overhead']:.1f} (max {w['overhead_max']:.1f})"
        f" | {w['own_start']:.1f} | once: {w['setup']:.1f} |",
    ]
    publish(HEADING, out, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
