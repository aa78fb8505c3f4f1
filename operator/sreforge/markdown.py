"""Markdown files several writers share (BENCHMARKS.md, SCENARIOS.md): each owns a section."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, heading: str, body: str, preamble: str = "# Benchmarks\n") -> None:
    """Replace the `heading` section (up to the next `## ` heading) or append it.

    A missing file starts with `preamble`. The write is atomic (a temporary file renamed).
    """
    text = path.read_text(encoding="utf-8") if path.exists() else preamble
    lines = text.splitlines(keepends=True)
    section = f"{heading}\n\n{body.rstrip()}\n\n"
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == heading), None)
    if start is None:
        if lines and not text.endswith("\n"):
            lines[-1] += "\n"
        if lines and lines[-1].strip():
            lines.append("\n")
        new = [*lines, section]
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        new = [*lines[:start], section, *lines[end:]]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(new).rstrip("\n") + "\n", encoding="utf-8")
    tmp.replace(path)
