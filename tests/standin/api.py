"""A small JSON client of the real kube-apiserver for the stand-in (plain HTTPS).

Requests and watches with the bearer token and CA of tests/kubeenv.py's ControlPlane.
A watch is a generator of ``(type, object)`` events; it ends when the server closes the
stream (``timeoutSeconds``) and raises :class:`WatchExpired` on a 410 so the caller
lists again.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    """A non-2xx answer of the apiserver (``status`` holds the HTTP code)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


class WatchExpired(RuntimeError):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Api:
    def __init__(self, server: str, token: str, ca_file: str | Path, timeout: float = 15.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._ssl = ssl.create_default_context(cafile=str(ca_file))

    def _open(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        try:
            return urllib.request.urlopen(req, context=self._ssl, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            e.close()
            raise ApiError(e.code, method, path, text) from None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        with self._open(method, path, body, params=params, content_type=content_type) as resp:
            return json.loads(resp.read() or b"null")

    def get(self, path: str, **params: str) -> Any:
        return self.request("GET", path, params=params or None)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 30, **params: str
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events after resource_version until the server ends the stream."""
        query = {
            **params,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        with self._open("GET", path, params=query, timeout=timeout_seconds + 15) as resp:
            for line in resp:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(obj.get("message", "410 Gone"))
                    raise ApiError(int(obj.get("code") or 500), "WATCH", path, json.dumps(obj))
                yield kind, obj
