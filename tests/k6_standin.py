"""A network-level stand-in for k6 v0.54.0's ``experimental-prometheus-rw`` output.

k6 is AGPL and never installed or run here. What reaches Prometheus from a k6 load Job is
an HTTP POST to the remote-write receiver of a snappy-compressed protobuf ``WriteRequest``
(Prometheus remote-write 1.0: ``Content-Encoding: snappy``, ``Content-Type:
application/x-protobuf``, ``X-Prometheus-Remote-Write-Version: 0.1.0``), every push
interval, holding for each series that got samples since the last push its labels (sorted,
``__name__`` included) and one sample of its cumulative value; at the end, with
``K6_PROMETHEUS_RW_STALE_MARKERS``, a stale marker (the NaN ``0x7ff0000000000002``) for
every series it sent. This module sends exactly that, for the series the rendered script
makes (sreforge.load.k6series) and k6's own ``iterations`` counter.

The protobuf and snappy encodings are written out here (small: four messages, and snappy's
block format with literals and 2-byte-offset copies), so no codec dependency is needed.
"""

from __future__ import annotations

import struct
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sreforge.load import k6series

STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]

Labels = tuple[tuple[str, str], ...]


# --- protobuf (prometheus/prompb: WriteRequest, TimeSeries, Label, Sample)
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(value: float, timestamp_ms: int) -> bytes:
    # value: field 1, double (wire type 1); timestamp: field 2, int64 varint (wire type 0)
    return b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(timestamp_ms)


def write_request(series: Iterable[tuple[Labels, float, int]]) -> bytes:
    """A WriteRequest of (labels, value, timestamp ms) series, labels sorted by name."""
    out = bytearray()
    for labels, value, ts in series:
        body = b"".join(_field(1, _label(k, v)) for k, v in sorted(labels))
        body += _field(2, _sample(value, ts))
        out += _field(1, body)
    return bytes(out)


# --- snappy block format
def _literal(data: bytes) -> bytes:
    out = bytearray()
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + n.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def snappy(data: bytes) -> bytes:
    """Snappy's block format: the length, then literals and copies (greedy, 4-byte hash)."""
    out = bytearray(_varint(len(data)))
    seen: dict[bytes, int] = {}
    i = start = 0
    while i + 4 <= len(data):
        key = data[i : i + 4]
        j = seen.get(key)
        seen[key] = i
        if j is None or i - j > 0xFFFF:
            i += 1
            continue
        length = 4
        while i + length < len(data) and length < 64 and data[j + length] == data[i + length]:
            length += 1
        if i > start:
            out += _literal(data[start:i])
        out += bytes([(length - 1) << 2 | 2]) + (i - j).to_bytes(2, "little")
        i += length
        start = i
    if start < len(data):
        out += _literal(data[start:])
    return bytes(out)


def push(url: str, series: Iterable[tuple[Labels, float, int]]) -> int:
    """POST one WriteRequest as k6's output does; returns the HTTP status."""
    body = snappy(write_request(series))
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
            "User-Agent": f"k6/{k6series.K6_VERSION} stand-in (sreforge tests)",
        },
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return int(resp.status)


@dataclass
class K6StandIn:
    """The remote-write traffic of one k6 load Job of an Incident, one push a second.

    ``latency`` (seconds) and ``invalid`` (share of requests judged invalid) say what the
    requests of each second were like; ``rate`` requests a second on ``route``.
    """

    url: str
    tags: Mapping[str, str]
    route: str
    rate: int
    latency: float = 0.02
    invalid: float = 0.0
    counters: dict[Labels, float] = field(default_factory=dict)
    gauges: dict[Labels, float] = field(default_factory=dict)
    pushes: int = 0
    errors: list[str] = field(default_factory=list)
    _touched: set[Labels] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _labels(self, name: str, **extra: str) -> Labels:
        # the test-wide tags, k6's `scenario` system tag, the sample's own tags
        base = {**self.tags, "scenario": k6series.K6_SCENARIO, **extra, "__name__": name}
        return tuple(sorted(base.items()))

    def _add(self, key: Labels, n: float) -> None:
        if n > 0:  # a series exists, and is sent, once it has a sample
            self.counters[key] = self.counters.get(key, 0) + n
            self._touched.add(key)

    def _second(self) -> None:
        """What one second of constant-arrival-rate traffic adds to k6's sinks."""
        bad = round(self.rate * self.invalid)
        for outcome, n in (("success", self.rate - bad), ("invalid", bad)):
            self._add(
                self._labels(k6series.K6_REQUESTS_TOTAL, route=self.route, outcome=outcome), n
            )
        for bound, le in k6series.bucket_bounds():
            if self.latency <= bound:
                key = self._labels(k6series.K6_BUCKET_TOTAL, route=self.route, le=le)
                self._add(key, self.rate)
        self._add(self._labels(k6series.K6_ITERATIONS_TOTAL), self.rate)
        key = self._labels(k6series.K6_TARGET_RATE)
        self.gauges[key] = self.rate
        self._touched.add(key)

    def _flush(self) -> None:
        """The series with samples since the last push, each with its sink's value."""
        now = int(time.time() * 1000)
        values = {**self.counters, **self.gauges}
        series = [(k, values[k], now) for k in sorted(self._touched)]
        self._touched.clear()
        status = push(self.url, series)
        if status // 100 != 2:
            self.errors.append(f"push answered {status}")
        self.pushes += 1

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._second()
                self._flush()
            except OSError as exc:
                self.errors.append(repr(exc))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="k6-standin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop pushing and mark every series stale (K6_PROMETHEUS_RW_STALE_MARKERS)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        now = int(time.time() * 1000) + 1
        push(self.url, [(k, STALE_NAN, now) for k in (*self.counters, *self.gauges)])
