"""BENCHMARKS.md is shared by several scripts: each replaces only its own section."""

from __future__ import annotations

from sreforge.markdown import write_section

__all__ = ["write_section"]
