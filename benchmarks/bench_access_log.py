"""What the catalog's access log costs a request: `python benchmarks/bench_access_log.py`.

The healthy catalog (substrate/catalog, product pages cached in process, so a request is
as cheap as it gets and the log's share is largest) serves sequential keep-alive GETs of
cached product pages over loopback, in this process: without the access log, then with it
(an access line per request at INFO, written to a file through the buffered handler). The
difference in CPU per request is what logging costs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "substrate" / "catalog"))

from benchmarks.benchmd import publish  # noqa: E402
from catalog import logs  # noqa: E402
from catalog.app import create_app  # noqa: E402
from catalog.seed import main as seed  # noqa: E402


async def measure(db: Path, *, logged: bool, requests: int, out: Path) -> tuple[float, float]:
    """(CPU µs, wall µs) per request over `requests` GETs of cached product pages."""
    handler = logs.configure("INFO" if logged else "WARNING")
    handler.setStream(out.open("a", encoding="utf-8"))
    app = create_app(str(db))
    logs.serve_logs(app, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as s:
        for i in range(1, 51):  # warm the cache: every page after this is a hit
            await (await s.get(f"http://127.0.0.1:{port}/products/{i}")).read()
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(requests):
            async with s.get(f"http://127.0.0.1:{port}/products/{1 + i % 50}") as r:
                await r.read()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    await runner.cleanup()
    logging.getLogger().handlers[:] = []
    return cpu / requests * 1e6, wall / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5, help="alternated off/on pairs")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "catalog.db"
        seed([str(db)])
        out = Path(tmp) / "catalog.log"
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _round in range(args.rounds):  # alternated, so drift on the machine hits both
            for logged in (False, True):
                runs[logged].append(
                    asyncio.run(measure(db, logged=logged, requests=args.requests, out=out))
                )
        lines = sum(1 for _ in out.open(encoding="utf-8"))
    rows = [
        (on, statistics.median(c for c, _ in runs[on]), statistics.median(w for _, w in runs[on]))
        for on in (False, True)
    ]
    table = [
        "`python benchmarks/bench_access_log.py`: the healthy catalog serving "
        f"{args.requests} sequential keep-alive GETs of cached product pages over loopback "
        "(client and server in one process, so CPU counts both), without and with the access "
        "log (a line per request at INFO through the buffered handler, flushed once a second); "
        f"medians of {args.rounds} alternated rounds.",
        "",
        "| access log | CPU µs / request (median) | wall µs / request (median) |",
        "|---|---:|---:|",
        *(f"| {'on' if on else 'off'} | {cpu:.0f} | {wall:.0f} |" for on, cpu, wall in rows),
        "",
        f"Lines written: {lines}. Machine: Python {platform.python_version()}, "
        f"aiohttp {aiohttp.__version__}, {platform.system()} {platform.release()}. A regressed "
        "product page costs ~30 ms of SQLite (scenarios/latency-cache-stampede).",
    ]
    publish("Substrate access log", table, write=not args.no_write)


if __name__ == "__main__":
    main()
