"""catalog: a small product-catalogue web service (aiohttp + SQLite)."""

__version__ = "1.4.0"
