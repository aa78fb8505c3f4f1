"""An open-model, constant-arrival-rate HTTP load generator (k6 `constant-arrival-rate`).

Iteration i is due at ``start + i / rate`` on an absolute schedule, so lateness never
accumulates into drift. An iteration starts when it is due whatever the response time
of the earlier ones (a slow service does not slow the schedule); if ``max_in_flight``
requests are already in flight it is *dropped* and counted, like k6's
``dropped_iterations``. If the event loop lags, due iterations start late and their
lateness is measured; catch-up is bounded: an iteration more than 1 s late is dropped.

Each iteration is one user's request: a route of the mix drawn by weight, an id drawn by
popularity (sreforge.load.popularity), sent by a visitor of the ordinary-client pool over
its own kept-alive or new connection (sreforge.load.client, sreforge.load.identity).
Nothing in a request names the harness. The target can be switched while running
(:meth:`LoadGenerator.set_target`); requests in flight to the old target complete.

Known answers (each route's ``known_answers``): before the schedule starts, the generator
asks the target for that many ids of the route (its most popular ones; 8 at a time, each
up to 3 times, within ``LEARN_SECONDS``), and keeps each answer with the expected status
(and, with ``expect_json_id``, its own id) as parsed JSON. From then on a response for a
known id that is not the same JSON document is ``invalid``. Locally the answers come from
the healthy build; a service that fabricates bodies under load (the status and id right,
the rest made up) is caught on every known id it is asked for.

The prober (``python -m sreforge.load --series probe``) is this same generator at the
profile's ``probe_rate`` with series of its own: the same code makes its requests, so no
request attribute tells the load and the prober apart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import random
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from yarl import URL

from sreforge.api.scenario import (
    KNOWN_ANSWER_ATTEMPTS,
    KNOWN_ANSWER_PARALLEL,
    LoadProfile,
    Route,
)
from sreforge.load.client import ClientPool
from sreforge.load.metrics import OUTCOMES, LoadMetrics, Outcome
from sreforge.load.popularity import Popularity

log = logging.getLogger(__name__)

#: An iteration later than this is dropped instead of started (bounded catch-up).
LATE_DROP_SECONDS = 1.0
#: Window of the "recent" figures of :meth:`LoadGenerator.stats`.
WINDOW_SECONDS = 10.0
_SLICE = 0.1  # seconds per slice of the recent window
_SLICES = round(WINDOW_SECONDS / _SLICE)
_SLICE_LAG_SAMPLES = 256  # lag reservoir per slice: 2,560 samples/s at most
_RUN_LAG_SAMPLES = 20_000  # lag reservoir for the whole run
#: Known answers: the time budget of learning them.
LEARN_SECONDS = 20.0
_YIELD_EVERY = 256  # start at most this many iterations before yielding to the loop
# Characters that need no quoting in a path and query.
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9\-._~/!$&'()*+,;=:@%?]*$")
_PATH_SAFE = "/!$&'()*+,;=:@%?-._~"


class TargetError(ValueError):
    """A target URL the generator cannot use."""


def normalize_target(url: str) -> str:
    """``scheme://host[:port]`` of an http(s) URL without a path; raises TargetError."""
    try:
        u = URL(url.strip())
    except (ValueError, TypeError) as exc:
        raise TargetError(f"not a URL: {url!r}") from exc
    if u.scheme not in ("http", "https") or not u.host:
        raise TargetError(f"target must be http(s)://host[:port], got {url!r}")
    if u.path not in ("", "/") or u.query_string or u.fragment:
        raise TargetError(f"target must have no path, query or fragment, got {url!r}")
    return str(u.origin())


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _Reservoir:
    """A uniform sample of at most ``cap`` values (Algorithm R)."""

    __slots__ = ("cap", "rng", "seen", "values")

    def __init__(self, cap: int, rng: random.Random) -> None:
        self.cap = cap
        self.rng = rng
        self.seen = 0
        self.values: list[float] = []

    def add(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.cap:
            self.values.append(value)
        else:
            j = self.rng.randrange(self.seen)
            if j < self.cap:
                self.values[j] = value


@dataclass(slots=True)
class _Slice:
    index: int
    scheduled: int = 0
    started: int = 0
    dropped: int = 0
    completed: int = 0
    success: int = 0
    lags: _Reservoir = field(default_factory=lambda: _Reservoir(0, random.Random()))


class _Window:
    """Counts over the last WINDOW_SECONDS in slices of 0.1 s, for /stats."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._slices: deque[_Slice] = deque()
        self._t0 = 0.0

    def reset(self, t0: float) -> None:
        self._t0 = t0
        self._slices.clear()

    def at(self, now: float) -> _Slice:
        index = int((now - self._t0) / _SLICE)
        slices = self._slices
        if slices and slices[-1].index == index:
            return slices[-1]
        s = _Slice(index, lags=_Reservoir(_SLICE_LAG_SAMPLES, self._rng))
        slices.append(s)
        while slices and slices[0].index <= index - _SLICES:
            slices.popleft()
        return s

    def summary(self, now: float) -> dict[str, Any]:
        index = int((now - self._t0) / _SLICE)
        first = index - _SLICES + 1
        live = [s for s in self._slices if s.index >= first]
        span = max(now - max(self._t0, self._t0 + first * _SLICE), 1e-9)
        lags = sorted(v for s in live for v in s.lags.values)
        started = sum(s.started for s in live)
        return {
            "seconds": round(span, 3),
            "scheduled": sum(s.scheduled for s in live),
            "started": started,
            "dropped": sum(s.dropped for s in live),
            "completed": sum(s.completed for s in live),
            "success": sum(s.success for s in live),
            "achieved_rate": started / span,
            "lag_p50": _percentile(lags, 0.50),
            "lag_p99": _percentile(lags, 0.99),
        }


class LoadGenerator:
    """Runs one :class:`LoadProfile` against a target; see the module docstring.

    Use from a running event loop::

        gen = LoadGenerator(profile, "http://127.0.0.1:8080", seed=1)
        summary = await gen.run()      # returns after duration_seconds, or stop()

    ``stats()`` and ``set_target()`` may be called while ``run()`` is going, from the
    loop's thread; ``stop()`` from any thread.
    """

    def __init__(
        self,
        profile: LoadProfile,
        target: str,
        *,
        seed: int | None = None,
        ids_seed: int | None = None,
        metrics: LoadMetrics | None = None,
        stop_grace_seconds: float = 0.5,
    ) -> None:
        self.profile = profile
        self.mix: list[Route] = profile.mix()
        labels = [r.label for r in self.mix]
        self.metrics = metrics if metrics is not None else LoadMetrics(routes=labels)
        self.stop_grace_seconds = stop_grace_seconds
        self._target = normalize_target(target)
        self._rng = random.Random(seed)
        aux = random.Random(None if seed is None else seed + 1)
        self._client_rng = random.Random(None if seed is None else seed + 2)
        self._window = _Window(aux)
        self._run_lags = _Reservoir(_RUN_LAG_SAMPLES, aux)
        self._timeout = profile.timeout_ms / 1000.0
        self._weights = [r.weight for r in self.mix]
        # which ids are popular: the same for every client given the same ids_seed
        layout = seed if ids_seed is None else ids_seed
        self.popularity = {
            r.label: Popularity(
                *r.ids, kind=profile.popularity, exponent=profile.zipf_exponent, seed=layout
            )
            for r in self.mix
        }
        self._pool: ClientPool | None = None

        self.scheduled = 0
        self.started = 0
        self.completed = 0
        self.dropped = 0
        self.dropped_late = 0
        self.interrupted = 0
        self.in_flight = 0
        self.outcomes: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
        self.route_outcomes: dict[str, dict[Outcome, int]] = {
            label: dict.fromkeys(OUTCOMES, 0) for label in labels
        }
        self.target_switches = 0
        # route label -> id -> the expected JSON document
        self.known: dict[str, dict[int, Any]] = {label: {} for label in labels}
        self.learn_seconds = 0.0

        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._stop_at: float | None = None
        self._wake: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._t0: float | None = None
        self._t_end: float | None = None
        self._running = False
        self._finished = False

        self.metrics.target_rate.set(profile.rate)
        self.metrics.in_flight.set(0)

    # ---- control -------------------------------------------------------------------

    @property
    def target(self) -> str:
        return self._target

    def set_target(self, url: str) -> str:
        """Send new iterations to ``url`` from now on; returns the normalised target.

        Requests in flight to the previous target complete normally.
        """
        new = normalize_target(url)
        if new != self._target:
            log.info("load target %s -> %s", self._target, new)
            self._target = new
            self.target_switches += 1
            if self._pool is not None:
                self._pool.set_target(new)
        return new

    def stop(self) -> None:
        """Stop scheduling; in-flight requests get ``stop_grace_seconds``, then cancelled."""
        self._stopping = True
        loop = self._loop
        if self._stop_at is None:
            # loop.time() reads a monotonic clock and is safe to call from any thread
            self._stop_at = loop.time() if loop is not None else time.monotonic()
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_up()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_up)

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    @property
    def running(self) -> bool:
        return self._running

    @property
    def finished(self) -> bool:
        return self._finished

    # ---- the run -------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Run the profile to its end (or stop()); returns :meth:`summary`."""
        if self._running or self._finished:
            raise RuntimeError("a LoadGenerator runs once")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._running = True
        session = ClientPool(
            self._target,
            self._client_rng,
            new_connection_ratio=self.profile.new_connection_ratio,
        )
        self._pool = session
        try:
            if any(r.known_answers for r in self.mix) and not self._stopping:
                await self._learn(loop, session)
            self._t0 = loop.time()
            self._window.reset(self._t0)
            if not self._stopping:
                await self._schedule(loop, session)
            self._t_end = loop.time()
            await self._drain(loop)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            session.close()
            self._running = False
            self._finished = True
            if self._t_end is None:
                self._t_end = loop.time()
        return self.summary()

    def known_ids(self, route: Route) -> list[int]:
        """The ids of ``route`` whose answers are learned: its most popular ones."""
        return self.popularity[route.label].top(route.known_answers) if route.known_answers else []

    def known_count(self) -> int:
        return sum(len(k) for k in self.known.values())

    async def _learn(self, loop: asyncio.AbstractEventLoop, session: ClientPool) -> None:
        """Ask for the known ids and keep their expected answers (see the module doc)."""
        started = loop.time()
        deadline = started + LEARN_SECONDS
        gate = asyncio.Semaphore(KNOWN_ANSWER_PARALLEL)

        async def one(route: Route, ident: int) -> None:
            async with gate:
                for _attempt in range(KNOWN_ANSWER_ATTEMPTS):
                    if self._stopping or loop.time() >= deadline:
                        return
                    try:
                        resp = await self._send(session, route, ident)
                        if resp.status == route.expect_status:
                            doc = _json_doc(resp.body)
                            if doc is not _NOT_JSON and (
                                not route.expect_json_id or _doc_id_matches(doc, ident)
                            ):
                                self.known[route.label][ident] = doc
                                return
                    except (TimeoutError, OSError):
                        pass
                    await asyncio.sleep(0.2)

        tasks = [
            loop.create_task(one(route, i)) for route in self.mix for i in self.known_ids(route)
        ]
        try:
            await asyncio.wait(tasks, timeout=LEARN_SECONDS + 1.0)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.learn_seconds = loop.time() - started
        learned, wanted = self.known_count(), sum(r.known_answers for r in self.mix)
        self.metrics.known_answers.set(learned)
        log.info("learned %d of %d known answers in %.1fs", learned, wanted, self.learn_seconds)
        if learned < wanted:
            log.warning(
                "only %d of %d known answers could be learned from %s",
                learned,
                wanted,
                self._target,
            )

    async def _schedule(self, loop: asyncio.AbstractEventLoop, session: ClientPool) -> None:
        p = self.profile
        rate = float(p.rate)
        t0 = self._t0
        assert t0 is not None
        total = p.duration_seconds * p.rate  # iterations i with i / rate < duration
        max_in_flight = p.max_in_flight
        m = self.metrics
        window = self._window
        i = 0
        burst = 0
        while i < total and not self._stopping:
            now = loop.time()
            due = t0 + i / rate
            if due > now:
                burst = 0
                await self._sleep_until(loop, due)
                continue
            lag = now - due
            if lag > LATE_DROP_SECONDS:
                # Bounded catch-up: every iteration more than 1 s late is dropped at once.
                j = max(i + 1, min(total, math.ceil((now - LATE_DROP_SECONDS - t0) * rate)))
                k = j - i
                i = j
                self.scheduled += k
                self.dropped += k
                self.dropped_late += k
                m.scheduled.inc(k)
                m.dropped.inc(k)
                s = window.at(now)
                s.scheduled += k
                s.dropped += k
                continue
            i += 1
            self.scheduled += 1
            m.scheduled.inc()
            s = window.at(now)
            s.scheduled += 1
            if self.in_flight >= max_in_flight:
                self.dropped += 1
                m.dropped.inc()
                s.dropped += 1
            else:
                self._start(loop, session, lag, s)
            burst += 1
            if burst >= _YIELD_EVERY:
                # Behind schedule: let started requests run before starting more.
                burst = 0
                await asyncio.sleep(0)
        end = t0 + p.duration_seconds
        if not self._stopping and loop.time() < end:
            await self._sleep_until(loop, end)  # the run lasts duration_seconds exactly

    async def _sleep_until(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        wake: asyncio.Future[None] = loop.create_future()
        self._wake = wake
        handle = loop.call_at(when, _resolve, wake)
        try:
            await wake
        finally:
            handle.cancel()
            self._wake = None

    def _start(
        self,
        loop: asyncio.AbstractEventLoop,
        session: ClientPool,
        lag: float,
        s: _Slice,
    ) -> None:
        mix = self.mix
        route = mix[0] if len(mix) == 1 else self._rng.choices(mix, weights=self._weights)[0]
        ident = self.popularity[route.label].draw(self._rng)
        self.in_flight += 1
        self.started += 1
        s.started += 1
        s.lags.add(lag)
        self._run_lags.add(lag)
        m = self.metrics
        m.in_flight.inc()
        m.scheduling_lag.observe(lag)
        task = loop.create_task(self._request(loop, session, route, ident))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _request(
        self,
        loop: asyncio.AbstractEventLoop,
        session: ClientPool,
        route: Route,
        ident: int,
    ) -> None:
        outcome: Outcome
        t = loop.time()
        try:
            try:
                resp = await self._send(session, route, ident)
                if resp.status != route.expect_status:
                    outcome = "http_error"
                elif not self._valid(route, resp.body, ident):
                    outcome = "invalid"
                else:
                    outcome = "success"
            except TimeoutError:
                outcome = "timeout"
            except OSError:
                outcome = "connect_error"
            except asyncio.CancelledError:
                self.interrupted += 1
                raise
            except Exception:  # never let one request kill the run; count it
                log.exception("load request failed unexpectedly")
                outcome = "connect_error"
            now = loop.time()
            self.completed += 1
            self.outcomes[outcome] += 1
            self.route_outcomes[route.label][outcome] += 1
            m = self.metrics
            m.by_outcome[route.label, outcome].inc()
            m.duration_of[route.label].observe(now - t)
            s = self._window.at(now)
            s.completed += 1
            if outcome == "success":
                s.success += 1
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.dec()

    async def _send(self, session: ClientPool, route: Route, ident: int) -> Any:
        """The request of ``route`` for id ``ident``; its answer (status and body)."""
        return await session.request(
            route.method,
            request_path(route, ident),
            request_body(route, ident),
            self._timeout,
            authorization=request_authorization(route, ident),
        )

    def _valid(self, route: Route, body: bytes, ident: int) -> bool:
        """A response with the expected status: its own id, and the known answer if any."""
        want = self.known[route.label].get(ident, _NOT_JSON)
        if not route.expect_json_id and want is _NOT_JSON:
            return True
        doc = _json_doc(body)
        if route.expect_json_id and not _doc_id_matches(doc, ident):
            return False
        return want is _NOT_JSON or doc == want

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let in-flight requests finish: up to their timeout at the end, a grace on stop()."""
        base = loop.time() + self.profile.timeout_ms / 1000.0 + 1.0
        while self._tasks:
            deadline = base
            if self._stop_at is not None:
                deadline = min(deadline, self._stop_at + self.stop_grace_seconds)
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait(set(self._tasks), timeout=min(remaining, 0.05))

    # ---- observation ---------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds from the start to now, or to the end of scheduling once it ended."""
        if self._t0 is None or self._loop is None:
            return 0.0
        end = self._t_end if self._t_end is not None else self._loop.time()
        return max(0.0, end - self._t0)

    def stats(self) -> dict[str, Any]:
        """The JSON of ``GET /stats``: totals since start and the last 10 s."""
        elapsed = self.elapsed()
        now = self._loop.time() if self._loop is not None else 0.0
        if self._t_end is not None:
            now = self._t_end
        recent = self._window.summary(now) if self._t0 is not None else None
        return {
            "target": self._target,
            "target_rate": self.profile.rate,
            "max_in_flight": self.profile.max_in_flight,
            "running": self._running and not self._stopping and self._t_end is None,
            "finished": self._finished,
            "elapsed_seconds": round(elapsed, 3),
            "scheduled": self.scheduled,
            "started": self.started,
            "completed": self.completed,
            "dropped": self.dropped,
            "dropped_late": self.dropped_late,
            "interrupted": self.interrupted,
            "in_flight": self.in_flight,
            "outcomes": dict(self.outcomes),
            "routes": {label: dict(o) for label, o in self.route_outcomes.items()},
            "target_switches": self.target_switches,
            "known_answers": self.known_count(),
            "achieved_rate_total": (self.started / elapsed) if elapsed > 0 else 0.0,
            "achieved_rate_10s": recent["achieved_rate"] if recent else 0.0,
            "lag_p50_10s": recent["lag_p50"] if recent else None,
            "lag_p99_10s": recent["lag_p99"] if recent else None,
            "window": recent,
        }

    def summary(self) -> dict[str, Any]:
        """Whole-run figures (what ``python -m sreforge.load`` prints at exit)."""
        elapsed = self.elapsed()
        lags = sorted(self._run_lags.values)
        return {
            "target": self._target,
            "target_rate": self.profile.rate,
            "elapsed_seconds": round(elapsed, 3),
            "scheduled": self.scheduled,
            "started": self.started,
            "completed": self.completed,
            "dropped": self.dropped,
            "dropped_late": self.dropped_late,
            "interrupted": self.interrupted,
            "outcomes": dict(self.outcomes),
            "routes": {label: dict(o) for label, o in self.route_outcomes.items()},
            "known_answers": self.known_count(),
            "learn_seconds": round(self.learn_seconds, 3),
            "achieved_rate": (self.started / elapsed) if elapsed > 0 else 0.0,
            "lag_p50": _percentile(lags, 0.50),
            "lag_p99": _percentile(lags, 0.99),
            "lag_max": lags[-1] if lags else None,
        }


def request_path(route: Route, ident: int) -> str:
    """The request target of ``route`` for id ``ident`` (percent-encoded where needed)."""
    raw = route.path.replace("{id}", str(ident))
    return raw if _PLAIN_PATH.match(raw) else quote(raw, safe=_PATH_SAFE)


def request_authorization(route: Route, ident: int) -> str | None:
    """The Authorization header of ``route`` for id ``ident`` (HTTP Basic), if it has one."""
    if route.basic_auth is None:
        return None
    user, password = (part.replace("{id}", str(ident)) for part in route.basic_auth)
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _fill(value: Any, ident: int) -> Any:
    if value == "{id}":
        return ident
    if isinstance(value, str):
        return value.replace("{id}", str(ident))
    if isinstance(value, list):
        return [_fill(v, ident) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ident) for k, v in value.items()}
    return value


def request_body(route: Route, ident: int) -> bytes | None:
    """The JSON body of ``route`` for ``ident``: its template filled in; ``{"id": ident}``
    for a POST without one; None for a method that sends no body."""
    if route.body is not None:
        doc = _fill(route.body, ident)
    elif route.method == "POST":
        doc = {"id": ident}
    else:
        return None
    return json.dumps(doc, separators=(",", ":")).encode()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_NOT_JSON: Any = object()  # no document (unparseable body, or no known answer)


def _json_doc(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON


def _doc_id_matches(doc: Any, ident: int) -> bool:
    if not isinstance(doc, dict):
        return False
    got = doc.get("id")
    return isinstance(got, int) and not isinstance(got, bool) and got == ident
