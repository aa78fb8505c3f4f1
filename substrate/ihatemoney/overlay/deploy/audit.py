"""budget.example's audit trail: every API access (when, which project, what was asked,
the answer) goes to the compliance team's collector at BUDGET_AUDIT_URL. Off when that is
unset (the project's tests, development).

A request never waits for the collector: its access is put on a queue, and one sender
thread delivers whatever has gathered, up to 500 events a POST. The collector
acknowledges a batch once it is stored; a batch it did not acknowledge is sent again,
with a backoff while the collector is unreachable. The queue holds 200000 events (hours
of accesses); beyond that, new accesses are counted as dropped and logged.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import urllib.request
from typing import Any

from flask import Flask, Response, request

log = logging.getLogger("budget.audit")

BATCH = 500
CAPACITY = 200_000


def access(response: Response) -> dict[str, Any]:
    """The audit event of the request being answered."""
    auth = request.authorization
    return {
        "time": time.time(),
        "project": (request.view_args or {}).get("project_id", ""),
        "user": auth.username if auth and auth.username else "",
        "method": request.method,
        "path": request.path,
        "status": response.status_code,
        "remote": request.remote_addr or "",
    }


class AuditTrail:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/v1/events"
        self.pending: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=CAPACITY)
        self.dropped = 0
        self._sender = threading.Thread(target=self._deliver, name="audit-sender", daemon=True)
        self._sender.start()

    def record(self, event: dict[str, Any]) -> None:
        try:
            self.pending.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.error("audit queue full: %d accesses dropped so far", self.dropped)

    def _deliver(self) -> None:
        while True:
            batch = [self.pending.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self.pending.get_nowait())
                except queue.Empty:
                    break
            self._send(batch)

    def _send(self, batch: list[dict[str, Any]]) -> None:
        body = json.dumps(batch).encode()
        backoff = 0.5
        while True:
            req = urllib.request.Request(
                self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as answer:
                    answer.read()
                return
            except OSError as exc:
                log.warning(
                    "audit: %d events not delivered (%s); again in %.1fs", len(batch), exc, backoff
                )
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)


def install(app: Flask, url: str | None = None) -> AuditTrail | None:
    """Record every API access of `app`; None (nothing recorded) without a collector."""
    url = url if url is not None else os.environ.get("BUDGET_AUDIT_URL", "")
    if not url:
        return None
    trail = AuditTrail(url)

    @app.after_request
    def _audit(response: Response) -> Response:
        if request.path.startswith("/api/"):
            trail.record(access(response))
        return response

    return trail
