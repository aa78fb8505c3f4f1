"""What confining the substrate costs: a build's start and the CI gate, confined or not.

A confined build (sreforge.runtime.confine) starts through util-linux's unshare, the
view's child (`python -I -S sandbox.py`: mounts, pivot_root, the uid change) and a network
namespace of its own the gateway makes, exposes its dependencies into and publishes its
port from; every request to it then crosses the gateway. Measured here on the real
catalog service with its prepared data, alternating confined and unconfined starts so
both see the same machine:

- start: from asking for a place to the first 200 from /healthz through the harness's
  port (what `swap_service` waits for before it moves the load);
- CI: the catalog's compile step and pristine tests (`ci.run_gate`, an empty patch);
- requests: 500 sequential GET /products/<id> through the port (the gateway's hop).

Writes the `## Confinement` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmd import publish

from sreforge.runtime import ci
from sreforge.runtime.confine import Substrate
from sreforge.runtime.process import resolve_command

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "substrate" / "catalog"
HEADING = "## Confinement"
TEST_COMMAND = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]


def _start(sub: Substrate, tree: Path, data: Path, log: Path) -> tuple[float, float]:
    """Seconds to healthy, and seconds for 500 page requests, for one build."""
    t0 = time.monotonic()
    place = sub.place(reach=[])
    env = {"HOST": "127.0.0.1", "PORT": str(place.port), "DATA_DIR": sub.data_path(data)}
    proc = sub.spawn(
        "catalog", ["python", "-m", "catalog"], place=place, log_path=log, tree=tree, data=data,
        env=env,
    )  # fmt: skip
    proc.wait_http(f"http://127.0.0.1:{place.port}/healthz", 60)
    started = time.monotonic() - t0
    t1 = time.monotonic()
    for i in range(500):
        with urllib.request.urlopen(f"http://127.0.0.1:{place.port}/products/{i % 300 + 1}") as r:
            r.read()
    pages = time.monotonic() - t1
    proc.stop()
    sub.release(place.port)
    return started, pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sreforge-bench-confine-"))
    tree = work / "tree"
    ci.copy_tree(SOURCE, tree)
    seeded = work / "seeded"
    seeded.mkdir()
    subprocess.run(
        resolve_command(["python", "-m", "catalog.seed", str(seeded / "catalog.db")]),
        cwd=tree,
        check=True,
        capture_output=True,
    )
    results: dict[bool, dict[str, list[float]]] = {
        c: {"start": [], "pages": [], "ci": []} for c in (True, False)
    }
    subs = {c: Substrate(work / ("confined" if c else "plain"), confined=c) for c in (True, False)}
    try:
        for i in range(args.starts):
            for confined in (True, False):
                data = work / f"data-{confined}-{i}"
                ci.copy_tree(seeded, data)
                started, pages = _start(subs[confined], tree, data, work / f"log-{confined}-{i}")
                results[confined]["start"].append(started)
                results[confined]["pages"].append(pages)
        for i in range(3):
            for confined in (True, False):
                sub = subs[confined]
                result, _ = ci.run_gate(
                    pristine=tree,
                    workdir=work / f"ci-{confined}-{i}",
                    patch="",
                    protected=["tests"],
                    test_command=TEST_COMMAND,
                    test_paths=["tests"],
                    timeout=300,
                    confine=(
                        (lambda a, t, s=sub: s.wrap(a, tree=t, tree_writable=True))
                        if confined
                        else None
                    ),
                )
                assert result.status.value == "green", result.output_tail
                results[confined]["ci"].append(result.duration_seconds)
    finally:
        for sub in subs.values():
            sub.close()

    def med(confined: bool, key: str) -> float:
        return statistics.median(results[confined][key])

    lines = [
        f"`python benchmarks/bench_confine.py --starts {args.starts}` (the catalog service, "
        f"{args.starts} starts each way, alternating; CI 3 times each; medians, seconds):",
        "",
        "| | unconfined | confined | cost |",
        "|---|---|---|---|",
    ]
    for key, what in (
        ("start", "a build's start, to its first healthy answer"),
        ("pages", "500 sequential page requests through its port"),
        ("ci", "the CI gate (compile and the pristine tests)"),
    ):
        plain, boxed = med(False, key), med(True, key)
        lines.append(f"| {what} | {plain:.3f} | {boxed:.3f} | {boxed - plain:+.3f} |")
    publish(HEADING, lines, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
