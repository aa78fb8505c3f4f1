"""The harness's side of the generator's control socket (``--control-socket PATH``).

:func:`control_request` sends one HTTP request over the Unix socket and returns the status
and the answer; :func:`set_target` and :func:`read_stats` are the two calls the harness
makes. Blocking (``http.client``), for callers that are not on an event loop.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any


class ControlError(OSError):
    """The control socket answered with an error, or with something that is not an answer.

    An OSError, as a socket that cannot be reached is: callers handle both alike.
    """


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection to a Unix socket instead of host:port."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)  # the Host header only
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def control_request(
    socket_path: Path | str,
    method: str,
    path: str,
    body: Any = None,
    *,
    timeout: float = 5.0,
) -> tuple[int, Any]:
    """``method path`` on the control socket, ``body`` (if not None) sent as JSON.

    Returns the status and the answer: parsed JSON when the answer is JSON, else its text.
    Raises OSError if the socket cannot be reached or times out, ControlError if what
    comes back is not HTTP.
    """
    conn = _UnixConnection(os.fspath(socket_path), timeout)
    headers = {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        status, content_type = resp.status, resp.headers.get_content_type()
    except http.client.HTTPException as exc:
        raise ControlError(f"{socket_path}: {method} {path}: {exc!r}") from exc
    finally:
        conn.close()
    text = raw.decode("utf-8", errors="replace")
    if content_type == "application/json":
        try:
            return status, json.loads(text)
        except ValueError as exc:
            raise ControlError(f"{socket_path}: {method} {path}: bad JSON: {exc}") from exc
    return status, text


def set_target(socket_path: Path | str, url: str, *, timeout: float = 5.0) -> str:
    """Send the load's new iterations to ``url``; returns the target as the generator
    normalised it. Raises ControlError if the generator refuses (a bad URL)."""
    status, answer = control_request(socket_path, "POST", "/target", {"url": url}, timeout=timeout)
    if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("target"), str):
        raise ControlError(f"{socket_path}: POST /target {url!r} answered {status}: {answer}")
    return str(answer["target"])


def read_stats(socket_path: Path | str, *, timeout: float = 5.0) -> dict[str, Any]:
    """The generator's ``GET /stats``: totals since the start, the last 10 s, its target."""
    status, answer = control_request(socket_path, "GET", "/stats", timeout=timeout)
    if status != 200 or not isinstance(answer, dict):
        raise ControlError(f"{socket_path}: GET /stats answered {status}: {answer}")
    return answer
