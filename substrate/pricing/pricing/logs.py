"""Logging: one access line per request, and a count of the bytes the service logs."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter

ACCESS = logging.getLogger("pricing.access")


def access_line(method: str, path: str, status: int, millis: float, **extra: Any) -> str:
    """One access-log line as JSON, so the log pipeline can index its fields."""
    return json.dumps(
        {
            "ts": datetime.now(tz=UTC).isoformat(timespec="milliseconds"),
            "event": "http_request",
            "service": "pricing",
            "version": "3.2.0",
            "http": {"method": method, "path": path, "status": status},
            "duration_ms": round(millis, 3),
            "client": {
                "address": extra.get("remote", ""),
                "user_agent": extra.get("user_agent", ""),
            },
        },
        sort_keys=True,
    )


class CountingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that also counts the bytes it writes (pricing_log_bytes_total)."""

    def __init__(self, counter: Counter) -> None:
        super().__init__(sys.stdout)
        self.counter = counter

    def emit(self, record: logging.LogRecord) -> None:
        self.counter.inc(len(self.format(record)) + 1)
        super().emit(record)


def configure(level: str, counter: Counter) -> None:
    handler = CountingHandler(counter)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
