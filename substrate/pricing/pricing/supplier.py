"""The supplier client: timeouts, retries and backoff from `pricing.config`."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import aiohttp

from .config import SupplierClientConfig

log = logging.getLogger("pricing.supplier")

RETRYABLE_STATUS = frozenset({502, 503, 504})


class SupplierError(Exception):
    """The supplier could not give a quote (after the allowed attempts)."""


class NotFound(SupplierError):
    """The supplier does not know this SKU."""


class SupplierClient:
    def __init__(
        self, base_url: str, config: SupplierClientConfig, session: aiohttp.ClientSession
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.config = config
        self.session = session
        self.attempts = 0  # attempts made, for the metrics

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based): full jitter, capped."""
        c = self.config
        return random.uniform(0, min(c.backoff_max_seconds, c.backoff_base_seconds * 2**attempt))

    async def _once(self, sku: int) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_seconds)
        async with self.session.get(f"{self.base_url}/quotes/{sku}", timeout=timeout) as resp:
            if resp.status == 404 or resp.status == 400:
                raise NotFound(f"supplier has no sku {sku}")
            if resp.status in RETRYABLE_STATUS:
                raise SupplierError(f"supplier answered {resp.status}")
            if resp.status != 200:
                raise NotFound(f"supplier answered {resp.status} for sku {sku}")
            doc: dict[str, Any] = await resp.json()
            return doc

    async def quote(self, sku: int) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(self.config.max_attempts):
            if attempt:
                await asyncio.sleep(self.backoff(attempt))
            self.attempts += 1
            try:
                return await self._once(sku)
            except NotFound:
                raise
            except (SupplierError, aiohttp.ClientError, TimeoutError) as exc:
                last = exc
                log.debug("supplier attempt %d for sku %d failed: %r", attempt + 1, sku, exc)
        raise SupplierError(f"no quote for sku {sku}: {last!r}")
