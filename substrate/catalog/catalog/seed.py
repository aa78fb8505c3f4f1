"""Deterministic catalogue generator.

Usage: ``python -m catalog.seed DB_PATH [--products N] [--reviews M] [--seed S]``

The same arguments always produce the same rows, so a regression measured on
one machine can be reproduced on another.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from . import stockdata

DEFAULT_PRODUCTS = 300
DEFAULT_REVIEWS = 180_000
DEFAULT_SEED = 42

SCHEMA = """
CREATE TABLE products (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL,
    category     TEXT    NOT NULL,
    price_cents  INTEGER NOT NULL,
    description  TEXT    NOT NULL
);
-- No index on reviews.product_id: lookups by product scan the table.
CREATE TABLE reviews (
    id             INTEGER PRIMARY KEY,
    product_id     INTEGER NOT NULL REFERENCES products(id),
    author         TEXT    NOT NULL,
    rating         INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
    helpful_votes  INTEGER NOT NULL,
    title          TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    created_at     TEXT    NOT NULL
);
"""

# fmt: off
CATEGORIES = (
    "kitchen", "garden", "outdoor", "office", "toys", "audio", "lighting", "bath", "storage",
    "tools", "pets", "travel",
)
ADJECTIVES = (
    "compact", "deluxe", "classic", "ultra", "eco", "smart", "rugged", "mini", "pro",
    "heritage", "modular", "silent", "folding", "cordless", "vintage",
)
NOUNS = (
    "kettle", "lamp", "shelf", "speaker", "backpack", "drill", "planter", "blender", "chair",
    "tent", "organizer", "headphones", "mat", "bottle",
)
FIRST_NAMES = (
    "ana", "ben", "chloe", "dev", "emil", "farah", "gus", "hana", "ivan", "jo", "kai", "lena",
    "mo", "nia", "omar", "pia", "quinn", "rui", "sam",
)
# fmt: on
TITLES = (
    "Does the job",
    "Great value",
    "Not what I expected",
    "Broke after a month",
    "Would buy again",
    "Solid build",
    "Meh",
    "Exceeded expectations",
    "Returned it",
    "Perfect gift",
    "Too small",
    "Five stars from me",
)
SENTENCES = (
    "Arrived on time and well packaged.",
    "The finish feels cheaper than the photos suggest.",
    "Setup took about ten minutes with the included instructions.",
    "I have used it daily for three weeks without any problems.",
    "Customer support replaced a missing part quickly.",
    "It is louder than I hoped but otherwise fine.",
    "Battery life is shorter than advertised.",
    "My partner liked it so much we ordered a second one.",
    "The colour is slightly different from the listing.",
    "Good for the price, do not expect premium quality.",
    "Works exactly as described.",
    "The handle started to wobble after a few uses.",
)
# Skewed towards positive reviews, like most real catalogues.
RATING_WEIGHTS = (5, 7, 14, 30, 44)


def _products(rng: random.Random, count: int) -> Iterator[tuple[int, str, str, int, str]]:
    for pid in range(1, count + 1):
        name = f"{rng.choice(ADJECTIVES).title()} {rng.choice(NOUNS).title()} {pid:04d}"
        description = " ".join(rng.sample(SENTENCES, 3))
        yield pid, name, rng.choice(CATEGORIES), rng.randint(199, 49_999), description


def _reviews(
    rng: random.Random, count: int, products: int
) -> Iterator[tuple[int, int, str, int, int, str, str, str]]:
    ratings = rng.choices(range(1, 6), weights=RATING_WEIGHTS, k=count)
    for rid in range(1, count + 1):
        n_sentences = rng.randint(1, 4)
        body = " ".join(rng.choice(SENTENCES) for _ in range(n_sentences))
        created = f"20{rng.randint(19, 24)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        yield (
            rid,
            rng.randint(1, products),
            f"{rng.choice(FIRST_NAMES)}{rng.randint(1, 999)}",
            ratings[rid - 1],
            int(rng.expovariate(0.2)),
            rng.choice(TITLES),
            body,
            created,
        )


def build(
    db_path: str | Path,
    *,
    products: int = DEFAULT_PRODUCTS,
    reviews: int = DEFAULT_REVIEWS,
    seed: int = DEFAULT_SEED,
) -> None:
    """Create the schema at ``db_path`` (replacing any file there) and fill it.

    The stock tables (catalog.stockdata) follow, sized by the review count.
    """
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    try:
        # A throw-away bulk load: durability during the build buys nothing.
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.executescript(SCHEMA)
        with conn:
            conn.executemany(
                "INSERT INTO products VALUES (?, ?, ?, ?, ?)", _products(rng, products)
            )
            conn.executemany(
                "INSERT INTO reviews VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                _reviews(rng, reviews, products),
            )
        with conn:
            stockdata.populate(conn, rng, products, stockdata.movement_count(reviews))
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m catalog.seed", description="Build a deterministic catalogue database."
    )
    parser.add_argument("db_path")
    parser.add_argument("--products", type=int, default=DEFAULT_PRODUCTS)
    parser.add_argument("--reviews", type=int, default=DEFAULT_REVIEWS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    if args.products < 1 or args.reviews < 0:
        parser.error("--products must be >= 1 and --reviews >= 0")
    started = time.perf_counter()
    build(args.db_path, products=args.products, reviews=args.reviews, seed=args.seed)
    elapsed = time.perf_counter() - started
    print(
        f"seeded {args.db_path}: {args.products} products, {args.reviews} reviews "
        f"(seed {args.seed}) in {elapsed:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
