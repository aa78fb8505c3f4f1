"""The package's one error hierarchy: what SREForge raises on purpose is a `SreforgeError`.

Pure and import-free, so that every layer may raise one and an edge (the kopf handlers, the
CLI) may catch the whole family in one clause. Programming errors stay builtin exceptions.
"""

from __future__ import annotations


class SreforgeError(Exception):
    """Base of the errors SREForge raises on purpose; the message is for a person."""
