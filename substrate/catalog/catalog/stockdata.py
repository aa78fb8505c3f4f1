"""Warehouse stock tables of the catalogue: the snapshot, restocks and the movements ledger.

Filled by :func:`catalog.seed.build` after the products and reviews, from the same random
generator, so the same seed arguments always give the same rows.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator

WAREHOUSES = ("ams", "fra", "lis", "waw")
# Movements per review: the ledger grows with the catalogue (small test catalogues stay small).
MOVEMENTS_PER_REVIEW = 2.25
SOLD_OUT_SHARE = 0.25  # products with nothing on hand in any warehouse
# The snapshot is written by the nightly warehouse sync; seeded catalogues carry a fixed stamp.
SNAPSHOT_TIME = "2025-06-30T23:58:00Z"

SCHEMA = """
-- The per-warehouse snapshot the service answers from (primary key: product, warehouse).
CREATE TABLE stock (
    product_id  INTEGER NOT NULL REFERENCES products(id),
    warehouse   TEXT    NOT NULL,
    on_hand     INTEGER NOT NULL CHECK (on_hand >= 0),
    updated_at  TEXT    NOT NULL,
    PRIMARY KEY (product_id, warehouse)
) WITHOUT ROWID;
-- Scheduled inbound deliveries of sold-out products.
CREATE TABLE restocks (
    product_id  INTEGER NOT NULL REFERENCES products(id),
    warehouse   TEXT    NOT NULL,
    eta         TEXT    NOT NULL,
    PRIMARY KEY (product_id, warehouse)
) WITHOUT ROWID;
-- The warehouse feed's append-only ledger (audit history; no index on product_id).
CREATE TABLE stock_movements (
    id          INTEGER PRIMARY KEY,
    product_id  INTEGER NOT NULL REFERENCES products(id),
    warehouse   TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('receipt', 'sale', 'return', 'adjust', 'delist')),
    quantity    INTEGER NOT NULL,
    reference   TEXT    NOT NULL,
    at          TEXT    NOT NULL
);
"""

_KINDS = ("receipt", "sale", "sale", "sale", "return", "adjust")


def movement_count(reviews: int) -> int:
    """How many ledger rows a catalogue with ``reviews`` reviews gets."""
    return round(reviews * MOVEMENTS_PER_REVIEW)


def _stock(
    rng: random.Random, products: int
) -> tuple[list[tuple[int, str, int, str]], list[tuple[int, str, str]]]:
    stock: list[tuple[int, str, int, str]] = []
    restocks: list[tuple[int, str, str]] = []
    for pid in range(1, products + 1):
        sold_out = rng.random() < SOLD_OUT_SHARE
        for wh in WAREHOUSES:
            on_hand = 0 if sold_out else rng.choice((0, rng.randint(1, 250)))
            stock.append((pid, wh, on_hand, SNAPSHOT_TIME))
        if sold_out:
            wh = rng.choice(WAREHOUSES)
            restocks.append((pid, wh, f"2025-07-{rng.randint(1, 28):02d}"))
    return stock, restocks


def _movements(
    rng: random.Random, count: int, products: int
) -> Iterator[tuple[int, int, str, str, int, str, str]]:
    for mid in range(1, count + 1):
        at = (
            f"20{rng.randint(19, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
        )
        yield (
            mid,
            rng.randint(1, products),
            rng.choice(WAREHOUSES),
            rng.choice(_KINDS),
            rng.randint(1, 20),
            f"PO-{rng.randint(1, 99_999):05d}",
            at,
        )


def populate(conn: sqlite3.Connection, rng: random.Random, products: int, movements: int) -> None:
    """Create the stock tables in ``conn`` and fill them (the caller commits)."""
    conn.executescript(SCHEMA)
    stock, restocks = _stock(rng, products)
    conn.executemany("INSERT INTO stock VALUES (?, ?, ?, ?)", stock)
    conn.executemany("INSERT INTO restocks VALUES (?, ?, ?)", restocks)
    conn.executemany(
        "INSERT INTO stock_movements VALUES (?, ?, ?, ?, ?, ?, ?)",
        _movements(rng, movements, products),
    )
