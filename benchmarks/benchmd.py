"""BENCHMARKS.md is shared by several scripts: each replaces only its own section."""

from __future__ import annotations

from pathlib import Path

from sreforge.markdown import write_section

__all__ = ["publish", "write_section"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def publish(heading: str, lines: list[str], *, write: bool = True) -> None:
    """Print a section's body and, unless told not to, put it in BENCHMARKS.md."""
    body = "\n".join(lines)
    print(body)
    if write:
        write_section(BENCHMARKS, heading, body)
