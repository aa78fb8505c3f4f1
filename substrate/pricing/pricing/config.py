"""How the pricing service talks to the supplier. Reviewed values; change with care."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SupplierClientConfig:
    # A quote that needs a warehouse availability check takes about a second at the
    # supplier; the timeout must cover it, or those SKUs can never be priced.
    timeout_seconds: float = 2.0
    # One retry for a transient failure (connection reset, 502/503/504, timeout).
    max_attempts: int = 2
    # Exponential backoff with full jitter between attempts: base * 2**attempt, capped.
    backoff_base_seconds: float = 0.1
    backoff_max_seconds: float = 1.0


SUPPLIER = SupplierClientConfig()

# Shop price = supplier unit cost * (1 + markup), rounded to the cent.
MARKUP = 0.35
