"""A small in-process cache with per-key expiry and a size bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class SimpleCache:
    """Dict-backed cache: entries expire after ``timeout`` seconds, at most ``threshold`` kept.

    A ``timeout`` of 0 means the entry never expires. When the cache is full,
    expired entries are dropped first, then the oldest-written ones.
    Not thread-safe; meant for a single event loop.
    """

    def __init__(
        self,
        threshold: int = 500,
        default_timeout: float = 300,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.default_timeout = default_timeout
        self._clock = clock
        # key -> (expires_at or None, value); insertion order = write order.
        self._entries: dict[Any, tuple[float | None, Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any) -> Any | None:
        """Return the cached value, or None if absent or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, value = entry
        if expires_at is not None and expires_at <= self._clock():
            del self._entries[key]
            return None
        return value

    def has(self, key: Any) -> bool:
        return self.get(key) is not None

    def set(self, key: Any, value: Any, timeout: float | None = None) -> bool:
        """Store ``value`` under ``key`` for ``timeout`` seconds (default_timeout if None)."""
        if timeout is None:
            timeout = self.default_timeout
        expires_at = None if timeout == 0 else self._clock() + timeout
        # Re-writing a key moves it to the young end of the eviction order.
        self._entries.pop(key, None)
        if len(self._entries) >= self.threshold:
            self._prune()
        self._entries[key] = (expires_at, value)
        return True

    def delete(self, key: Any) -> bool:
        return self._entries.pop(key, None) is not None

    def clear(self) -> bool:
        self._entries.clear()
        return True

    def _prune(self) -> None:
        now = self._clock()
        expired = [k for k, (exp, _) in self._entries.items() if exp is not None and exp <= now]
        for key in expired:
            del self._entries[key]
        excess = len(self._entries) - self.threshold + 1
        if excess > 0:
            for key in list(self._entries)[:excess]:
                del self._entries[key]
