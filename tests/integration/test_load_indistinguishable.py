"""Nothing a patched service can read in a request tells the load from the prober, or
either from a pool of ordinary clients.

The load generator and the prober run as the harness runs them (two processes, one id
layout) against a recording HTTP/1.1 server that keeps every attribute a service could
branch on: the request line (method, path shape, HTTP version), the header names in their
order and every header's value, which connection carried the request, and the id asked
for. Their distributions must agree, and every request must be one an ordinary client of
the pool (sreforge.load.identity) would send.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sreforge.api.scenario import LoadProfile
from sreforge.load.identity import CLIENTS, LANGUAGES
from sreforge.load.process import GeneratorProcess

# Words that would name a harness or a load tool anywhere in a request.
TELLTALES = ("sreforge", "k6", "aiohttp", "loadgen", "probe", "harness", "locust", "bench")


@dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    source: str  # which client's port range it came from: set by the recording server
    connection: int
    nth_on_connection: int
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    @property
    def path_shape(self) -> str:
        return re.sub(r"\d+", "N", self.target)

    @property
    def ident(self) -> int:
        return int(re.findall(r"\d+", self.target)[0])

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class Recorder:
    """An HTTP/1.1 server on 127.0.0.1 that answers ``{"id": N}`` and records requests;
    two listening ports, one per client, so the test (never the service) knows who sent what."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._next_conn = 0
        self.ports: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []

    def start(self) -> None:
        self._thread.start()
        for source in ("load", "probe"):
            fut = asyncio.run_coroutine_threadsafe(self._listen(source), self._loop)
            self.ports[source] = fut.result(5)

    async def _listen(self, source: str) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._next_conn += 1
            conn, nth = self._next_conn, 0
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    method, target, version = lines[0].split(" ")
                    headers = tuple(
                        (k, v.strip())
                        for k, _, v in (line.partition(":") for line in lines[1:] if line)
                    )
                    length = int({k.lower(): v for k, v in headers}.get("content-length", 0))
                    if length:
                        await reader.readexactly(length)
                    nth += 1
                    seen = Seen(source, conn, nth, method, target, version, headers)
                    self.seen.append(seen)
                    body = json.dumps({"id": seen.ident}).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        for server in self._servers:
            self._loop.call_soon_threadsafe(server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Seen]]:
    """The load (200/s) and its prober (100/s here, to have samples enough) for 5 s over a
    two-route mix, as the harness starts them: one id layout, seeds of their own."""
    tmp = tmp_path_factory.mktemp("recorded")
    profile = LoadProfile(
        rate=200,
        probe_rate=100,
        duration_seconds=5,
        id_range=(1, 500),
        routes=[
            {"name": "product", "path": "/products/{id}", "weight": 4, "expect_json_id": True},
            {"name": "stock", "path": "/products/{id}/stock", "weight": 1, "known_answers": 10},
        ],
    )
    rec = Recorder()
    rec.start()
    try:
        procs = [
            GeneratorProcess(
                profile,
                f"http://127.0.0.1:{rec.ports[source]}",
                Path(tmp) / f"{source}.port",
                seed=seed,
                ids_seed=42,
                probe=source == "probe",
            )
            for source, seed in (("load", 1), ("probe", 2))
        ]
        for proc in procs:
            proc.proc.wait(30)
    finally:
        rec.stop()
    by_source: dict[str, list[Seen]] = {"load": [], "probe": []}
    for seen in rec.seen:
        by_source[seen.source].append(seen)
    return by_source


def _tv(a: Counter[Any], b: Counter[Any]) -> float:
    """Total variation distance of two empirical distributions (0 alike .. 1 disjoint)."""
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


def _per_connection(seen: list[Seen]) -> Counter[int]:
    counts = Counter(s.connection for s in seen)
    return Counter(min(n, 8) for n in counts.values())


FEATURES = {
    "method": lambda s: s.method,
    "path shape": lambda s: s.path_shape,
    "HTTP version": lambda s: s.version,
    "header names in order": lambda s: tuple(k for k, _ in s.headers),
    "User-Agent": lambda s: s.header("User-Agent"),
    "Accept": lambda s: s.header("Accept"),
    "Accept-Encoding": lambda s: s.header("Accept-Encoding"),
    "Accept-Language": lambda s: s.header("Accept-Language"),
    "Connection header": lambda s: s.header("Connection"),
    "first request on its connection": lambda s: s.nth_on_connection == 1,
}


def test_both_clients_were_recorded(recorded: dict[str, list[Seen]]) -> None:
    assert len(recorded["load"]) >= 900, len(recorded["load"])
    assert len(recorded["probe"]) >= 450, len(recorded["probe"])


@pytest.mark.parametrize("feature", list(FEATURES))
def test_no_request_attribute_tells_the_load_from_the_prober(
    recorded: dict[str, list[Seen]], feature: str
) -> None:
    key = FEATURES[feature]
    # Per request, and per visitor (a connection's first request): a visitor's requests
    # share its headers, so visitors are the independent draws.
    for unit in ("request", "visitor"):
        load = Counter(key(s) for s in _units(recorded["load"], unit))
        probe = Counter(key(s) for s in _units(recorded["probe"], unit))
        # two samples (~250 visitors, ~500 requests and more) of one distribution stay well
        # under 0.3 apart (same code, seeds of their own); a tell (a header only one of them
        # sends, another HTTP version) is near 1
        assert _tv(load, probe) < 0.3, (feature, unit, load.most_common(4), probe.most_common(4))


def _units(seen: list[Seen], unit: str) -> list[Seen]:
    return seen if unit == "request" else [s for s in seen if s.nth_on_connection == 1]


def test_connection_reuse_is_alike_and_mixed(recorded: dict[str, list[Seen]]) -> None:
    load, probe = _per_connection(recorded["load"]), _per_connection(recorded["probe"])
    assert _tv(load, probe) < 0.3, (load, probe)
    for seen in (recorded["load"], recorded["probe"]):
        first = sum(s.nth_on_connection == 1 for s in seen) / len(seen)
        assert 0.1 < first < 0.6, first  # kept-alive connections and new ones, both


def test_both_ask_for_the_same_popular_ids(recorded: dict[str, list[Seen]]) -> None:
    load = Counter(s.ident for s in recorded["load"] if s.path_shape == "/products/N")
    probe = Counter(s.ident for s in recorded["probe"] if s.path_shape == "/products/N")
    top_load = {i for i, _ in load.most_common(5)}
    top_probe = {i for i, _ in probe.most_common(5)}
    assert len(top_load & top_probe) >= 3, (load.most_common(5), probe.most_common(5))
    # skewed as users are, not uniform: the top id takes far more than 1/500 of the views
    assert load.most_common(1)[0][1] / sum(load.values()) > 0.05
    assert _tv(load, probe) < 0.5


def test_every_request_is_an_ordinary_clients_and_names_no_harness(
    recorded: dict[str, list[Seen]],
) -> None:
    templates = {tuple(k for k, _ in c.headers) for c in CLIENTS}
    languages = {lang for lang, _ in LANGUAGES}
    for seen in recorded["load"] + recorded["probe"]:
        names = tuple(k for k, _ in seen.headers)
        assert names in templates, names
        assert seen.version == "HTTP/1.1"
        assert any(_sent_by(c.headers, seen.headers, languages) for c in CLIENTS), seen.headers
        text = (seen.target + " " + " ".join(f"{k}: {v}" for k, v in seen.headers)).lower()
        for word in TELLTALES:
            assert word not in text, (word, text)


def _sent_by(
    template: tuple[tuple[str, str], ...],
    headers: tuple[tuple[str, str], ...],
    languages: set[str],
) -> bool:
    """Whether a client of this template sends exactly these headers."""
    if len(template) != len(headers):
        return False
    for (name, want), (got_name, got) in zip(template, headers, strict=True):
        if name != got_name:
            return False
        if want == "{lang}":
            if got not in languages:
                return False
        elif want not in ("{host}", got):
            return False
    return True


def test_a_visitor_keeps_its_identity_on_its_connection(recorded: dict[str, list[Seen]]) -> None:
    agents: dict[int, set[tuple[str | None, str | None]]] = {}
    for seen in recorded["load"] + recorded["probe"]:
        agents.setdefault(seen.connection, set()).add(
            (seen.header("User-Agent"), seen.header("Accept-Language"))
        )
    assert all(len(v) == 1 for v in agents.values())  # as a browser's connection carries one
