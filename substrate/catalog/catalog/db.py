"""Data layer: product lookups over the SQLite catalogue."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

TOP_REVIEWS = 3

_PRODUCT_SQL = "SELECT id, name, category, price_cents FROM products WHERE id = ?"
_SUMMARY_SQL = "SELECT COUNT(*), AVG(rating) FROM reviews WHERE product_id = ?"
_TOP_REVIEWS_SQL = """
SELECT id, author, rating, title, body, helpful_votes, created_at
FROM reviews
WHERE product_id = ?
ORDER BY helpful_votes DESC, id ASC
LIMIT ?
"""


class ProductRepository:
    """Read-only access to products and their review summaries."""

    def __init__(self, db_path: str | Path) -> None:
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"catalogue database not found: {path}")
        # Read-only: the service never writes the catalogue.
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self._conn.row_factory = sqlite3.Row

    def get_product(self, product_id: int) -> dict[str, Any] | None:
        """Return the product with its rating, review count and top reviews, or None."""
        row = self._conn.execute(_PRODUCT_SQL, (product_id,)).fetchone()
        if row is None:
            return None
        count, avg = self._conn.execute(_SUMMARY_SQL, (product_id,)).fetchone()
        top = self._conn.execute(_TOP_REVIEWS_SQL, (product_id, TOP_REVIEWS)).fetchall()
        return {
            "id": row["id"],
            "name": row["name"],
            "category": row["category"],
            "price_cents": row["price_cents"],
            "rating": round(avg, 2) if avg is not None else 0.0,
            "review_count": count,
            "top_reviews": [dict(r) for r in top],
        }

    def close(self) -> None:
        self._conn.close()
