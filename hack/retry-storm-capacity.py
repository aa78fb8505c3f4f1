#!/usr/bin/env python3
"""A queue model of configuration-retry-storm's supplier and pricing's client: how many
workers the supplier needs so that the healthy build never pages, and whether the
regression still saturates them.

Quotes arrive at `--rate`/s (the load and the prober together), a SKU is slow with
probability `--slow-share` (a 1 s warehouse check) and otherwise takes 20-40 ms; the supplier has
`c` workers in front of a FIFO queue. The client makes up to `attempts` attempts, each
with `timeout`, retried at once (the regression) or after a timeout only once (healthy);
an attempt the client gave up on keeps its place and then its worker, as the supplier
does not cancel (substrate/supplier). Pages are counted as PricingSLOBreach reads them:
the trailing 10 s of client latencies with p95 over 0.5 s (or over 5% failed) for 5 s.
A model, not the service: it chose SUPPLIER_WORKERS, and `sreforge scenarios validate
configuration-retry-storm` is the measurement.

    python3 hack/retry-storm-capacity.py --rate 70 --workers 6 8 10
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from collections import deque


def simulate(
    workers: int,
    rate: float,
    timeout: float,
    attempts: int,
    seconds: float,
    *,
    slow_share: float,
    seed: int,
) -> list[tuple[float, float]]:
    """(finish time, client latency; inf when every attempt failed) of each request."""
    rnd = random.Random(seed)
    events: list[tuple[float, int, int]] = []  # (time, kind, attempt id)
    t = 0.0
    while t < seconds:
        t += rnd.expovariate(rate)
        heapq.heappush(events, (t, 0, 0))
    free, queue = workers, deque[int]()
    state: dict[int, list[float]] = {}  # id -> [request start, service, attempt no, done]
    done: list[tuple[float, float]] = []
    next_id = 0

    def attempt(now: float, start: float, service: float, n: int) -> None:
        nonlocal next_id, free
        next_id += 1
        state[next_id] = [start, service, n, 0.0]
        heapq.heappush(events, (now + timeout, 2, next_id))
        if free:
            free -= 1
            heapq.heappush(events, (now + service, 1, next_id))
        else:
            queue.append(next_id)

    while events:
        now, kind, a = heapq.heappop(events)
        if kind == 0:  # a client's lookup
            slow = rnd.random() < slow_share
            attempt(now, now, 1.0 if slow else rnd.uniform(0.02, 0.04), 0)
        elif kind == 1:  # a worker finished a quote
            free += 1
            st = state[a]
            if not st[3]:
                st[3] = 1.0
                done.append((now, now - st[0]))
            if queue:
                free -= 1
                b = queue.popleft()
                heapq.heappush(events, (now + state[b][1], 1, b))
        else:  # the client's timeout of attempt a
            st = state[a]
            if st[3]:
                continue
            st[3] = 1.0  # given up on; it still waits for and holds a worker
            if st[2] + 1 < attempts:
                attempt(now, st[0], st[1], int(st[2]) + 1)
            else:
                done.append((now, math.inf))
    return done


def pages(done: list[tuple[float, float]], seconds: float) -> tuple[int, float]:
    """(pages, share of seconds in breach) as PricingSLOBreach reads the client's view."""
    per_second: list[list[float]] = [[] for _ in range(int(seconds) + 1)]
    for finished, latency in done:
        if finished < seconds:
            per_second[int(finished)].append(latency)
    breach = []
    for s in range(10, int(seconds)):
        window = sorted(x for k in range(s - 10, s) for x in per_second[k])
        if not window:
            breach.append(False)
            continue
        p95 = window[math.ceil(0.95 * len(window)) - 1]
        failed = sum(1 for x in window if x == math.inf) / len(window)
        breach.append(p95 > 0.5 or failed > 0.05)
    count, run = 0, 0
    for b in breach:
        run = run + 1 if b else 0
        count += run == 5
    return count, sum(breach) / max(1, len(breach))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=70.0, help="quotes asked per second")
    ap.add_argument("--workers", type=int, nargs="+", default=[6, 8, 10])
    ap.add_argument(
        "--slow-share",
        type=float,
        default=0.01,
        help="share of lookups for slow SKUs (1 in SUPPLIER_SLOW_EVERY, more when a "
        "popular SKU is one: each run draws which SKUs are popular)",
    )
    ap.add_argument("--windows", type=int, default=100, help="480 s control windows")
    args = ap.parse_args()
    print("| workers | healthy: pages per 480 s | regressed: failed lookups after 30 s |")
    print("|---|---|---|")
    for c in args.workers:
        healthy = simulate(
            c, args.rate, 2.0, 2, 480.0 * args.windows, slow_share=args.slow_share, seed=1
        )
        n, _ = pages(healthy, 480.0 * args.windows)
        storm = [
            lat
            for t, lat in simulate(c, args.rate, 0.2, 6, 120.0, slow_share=args.slow_share, seed=2)
            if t > 30
        ]
        failed = sum(1 for x in storm if x == math.inf) / len(storm)
        print(f"| {c} | {n / args.windows:.2f} ({n} in {args.windows}) | {failed:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
