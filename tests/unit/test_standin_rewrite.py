"""How the pod stand-in (tests/standin) rewrites a container's args and env values."""

from __future__ import annotations

from pathlib import Path

from tests.standin.pods import _exit_code, expand_vars, make_rewriter

PATHS = {"/app": Path("/L/img"), "/work": Path("/L/vol/work"), "/dev/termination-log": Path("/L/t")}
SERVICES = [
    (
        ["catalog.ns.svc.cluster.local", "catalog.ns.svc", "catalog.ns", "catalog", "10.96.0.9"],
        8080,
        41000,
    ),
]


def test_paths_are_rewritten_at_path_boundaries_only() -> None:
    rw = make_rewriter(PATHS, {}, [])
    assert rw("/app/data/catalog.db") == "/L/img/data/catalog.db"
    assert rw("/app") == "/L/img"
    assert rw("cd /work && git apply /patch/x") == "cd /L/vol/work && git apply /patch/x"
    assert rw("--db=/app/x") == "--db=/L/img/x"
    assert rw("echo hi > /dev/termination-log") == "echo hi > /L/t"
    # not a prefix at a boundary: untouched
    assert rw("/application") == "/application"
    assert rw("/srv/app/x") == "/srv/app/x"
    assert rw("http://h:1/app/x") == "http://h:1/app/x"


def test_service_addresses_and_own_ports_are_rewritten() -> None:
    rw = make_rewriter({}, {9100: 40001}, SERVICES)
    for name in ("catalog.ns.svc.cluster.local", "catalog.ns.svc", "catalog", "10.96.0.9"):
        assert rw(f"http://{name}:8080/products") == "http://127.0.0.1:41000/products"
    assert rw("http://catalog:80") == "http://catalog:80"  # another port: not this Service
    assert rw("http://catalog:80801") == "http://catalog:80801"
    assert rw("http://mycatalog:8080") == "http://mycatalog:8080"
    assert rw("--listen 0.0.0.0:9100") == "--listen 127.0.0.1:40001"


def test_expand_vars_and_exit_codes() -> None:
    env = {"A": "1", "B": "two"}
    assert expand_vars("$(A)-$(B)-$(C)", env) == "1-two-$(C)"
    assert expand_vars("$$(A)", env) == "$(A)"
    assert (_exit_code(0), _exit_code(3), _exit_code(-9), _exit_code(-15)) == (0, 3, 137, 143)
