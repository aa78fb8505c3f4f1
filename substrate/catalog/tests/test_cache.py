from __future__ import annotations

import pytest

from catalog.cache import SimpleCache


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_get_set_delete_clear():
    cache = SimpleCache(threshold=10, default_timeout=60)
    assert cache.get("a") is None
    assert cache.set("a", {"x": 1})
    assert cache.get("a") == {"x": 1}
    assert cache.has("a")
    assert cache.delete("a")
    assert not cache.delete("a")
    assert cache.get("a") is None
    cache.set("b", 2)
    cache.set("c", 3)
    cache.clear()
    assert len(cache) == 0
    assert cache.get("b") is None


def test_default_timeout_expires_entries():
    clock = FakeClock()
    cache = SimpleCache(threshold=10, default_timeout=30, clock=clock)
    cache.set("k", "v")
    clock.now += 29.9
    assert cache.get("k") == "v"
    clock.now += 0.1
    assert cache.get("k") is None
    assert len(cache) == 0


def test_per_key_timeout_and_no_expiry():
    clock = FakeClock()
    cache = SimpleCache(threshold=10, default_timeout=30, clock=clock)
    cache.set("short", 1, timeout=5)
    cache.set("forever", 2, timeout=0)
    cache.set("default", 3)
    clock.now += 6
    assert cache.get("short") is None
    assert cache.get("default") == 3
    clock.now += 10_000
    assert cache.get("default") is None
    assert cache.get("forever") == 2


def test_rewrite_refreshes_timeout():
    clock = FakeClock()
    cache = SimpleCache(threshold=10, default_timeout=10, clock=clock)
    cache.set("k", 1)
    clock.now += 8
    cache.set("k", 2)
    clock.now += 8
    assert cache.get("k") == 2


def test_threshold_evicts_oldest_when_nothing_expired():
    cache = SimpleCache(threshold=3, default_timeout=60, clock=FakeClock())
    for key in "abc":
        cache.set(key, key.upper())
    cache.set("d", "D")
    assert len(cache) == 3
    assert cache.get("a") is None
    assert [cache.get(k) for k in "bcd"] == ["B", "C", "D"]


def test_threshold_evicts_expired_before_live():
    clock = FakeClock()
    cache = SimpleCache(threshold=3, default_timeout=60, clock=clock)
    cache.set("old", 1)
    cache.set("brief", 2, timeout=1)
    cache.set("young", 3)
    clock.now += 2
    cache.set("new", 4)
    assert len(cache) == 3
    assert cache.get("brief") is None
    assert [cache.get(k) for k in ("old", "young", "new")] == [1, 3, 4]


def test_rewriting_a_key_never_evicts_another():
    cache = SimpleCache(threshold=2, default_timeout=60, clock=FakeClock())
    cache.set("a", 1)
    cache.set("b", 2)
    cache.set("b", 3)
    assert cache.get("a") == 1
    assert cache.get("b") == 3


def test_threshold_must_be_positive():
    with pytest.raises(ValueError, match="threshold"):
        SimpleCache(threshold=0)
