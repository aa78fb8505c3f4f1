from __future__ import annotations

import sqlite3

import pytest

from catalog import seed
from catalog.db import ProductRepository


def test_repository_unknown_id_is_none(db_path):
    repo = ProductRepository(db_path)
    try:
        assert repo.get_product(10_000) is None
    finally:
        repo.close()


def test_product_without_reviews(tmp_path):
    path = tmp_path / "empty.db"
    seed.build(path, products=2, reviews=0, seed=1)
    repo = ProductRepository(path)
    try:
        product = repo.get_product(2)
    finally:
        repo.close()
    assert product is not None
    assert product["review_count"] == 0
    assert product["rating"] == 0.0
    assert product["top_reviews"] == []


def test_missing_database_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        ProductRepository(tmp_path / "absent.db")


def test_seed_is_deterministic(tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    seed.build(a, products=5, reviews=50, seed=3)
    seed.build(b, products=5, reviews=50, seed=3)

    def dump(path):
        conn = sqlite3.connect(path)
        try:
            return (
                conn.execute("SELECT * FROM products ORDER BY id").fetchall(),
                conn.execute("SELECT * FROM reviews ORDER BY id").fetchall(),
            )
        finally:
            conn.close()

    assert dump(a) == dump(b)
    products, reviews = dump(a)
    assert len(products) == 5
    assert len(reviews) == 50
    assert {r[1] for r in reviews} <= {p[0] for p in products}


def test_seed_cli(tmp_path):
    path = tmp_path / "cli.db"
    assert seed.main([str(path), "--products", "4", "--reviews", "10", "--seed", "9"]) == 0
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM products").fetchone() == (4,)
        assert conn.execute("SELECT COUNT(*) FROM reviews").fetchone() == (10,)
    finally:
        conn.close()
