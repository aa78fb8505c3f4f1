"""The contention guard, measured: verdicts of a fix and of the empty patch while other
work takes the machine's CPU.

For each count of outside busy loops (plain Python `while True: pass` processes started
by this script, not by the run, each stopped by this script after the run), runs
latency-cache-stampede once with a reference fix and once with the empty patch, and
reports the verdict and the outside-CPU share the run measured while it verified.
Writes the `## Contention guard` section of BENCHMARKS.md.

    python benchmarks/bench_contention.py [--burners 0 2 4] [--fix restore-simplecache.patch]
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
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
HEADING = "## Contention guard"
BURNER = "import time\nend = time.time() + 900\nwhile time.time() < end: pass\n"


def one_run(patch: Path, runs: Path) -> dict[str, object]:
    subprocess.run(
        [sys.executable, "-m", "sreforge.cli", "run", str(SCENARIO), "--fix", str(patch),
         "--sustain-seconds", "30", "--runs-dir", str(runs)],
        check=False, capture_output=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    (record_path,) = runs.glob("*/record.json")
    record: dict[str, object] = json.loads(record_path.read_text())
    return record


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--burners", type=int, nargs="+", default=[0, 2, 4])
    ap.add_argument("--fix", default="restore-simplecache.patch")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sreforge-contention-") as tmp:
        empty = Path(tmp) / "empty.patch"
        empty.write_text("", encoding="utf-8")
        for n in args.burners:
            for label, patch in ((args.fix, SCENARIO / "fixes" / args.fix), ("empty", empty)):
                burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(n)]
                try:
                    record = one_run(patch, Path(tmp) / f"{n}-{label}")
                finally:
                    for b in burners:
                        b.kill()
                        b.wait(timeout=30)
                c = record.get("contention") or {}
                assert isinstance(c, dict)
                rows.append((n, label, record["reason"], record["score"], c))
                print(rows[-1], flush=True)
    out = [
        "`python benchmarks/bench_contention.py` "
        f"({os.cpu_count()} CPUs; burners: busy loops outside the run; outside CPU: the mean "
        "and max share of the machine's CPU spent outside the run while the patch was "
        "verified; CPU wait: seconds per second the run's threads waited, runnable, for a CPU; a "
        "behavioural failure is Inconclusive above both 0.25 outside and 0.5 s/s wait)",
        "",
        "| burners | patch | verdict | score | outside CPU mean | outside CPU max "
        "| run's CPU wait mean (s/s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, label, reason, score, c in rows:
        cells = [
            "-" if c.get(k) is None else f"{c[k]:.2f}"
            for k in ("verifyOutsideCpuMean", "verifyOutsideCpuMax", "verifyCpuWaitMean")
        ]
        out.append(f"| {n} | {label} | {reason} | {score} | " + " | ".join(cells) + " |")
    publish(HEADING, out, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
