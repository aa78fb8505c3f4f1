"""Markdown files several writers share (BENCHMARKS.md, SCENARIOS.md): each owns a section."""

from __future__ import annotations

from pathlib import Path


def write_section(
    path: Path,
    heading: str,
    body: str,
    preamble: str = "# Benchmarks\n",
    *,
    after: str | None = None,
) -> None:
    """Replace the `heading` section (up to the next `## ` heading) or add it: right after
    the section `after` when there is one, else at the end.

    A missing file starts with `preamble`. The write is atomic (a temporary file renamed).
    """
    text = path.read_text(encoding="utf-8") if path.exists() else preamble
    lines = text.splitlines(keepends=True)
    if lines and not text.endswith("\n"):
        lines[-1] += "\n"
    section = f"{heading}\n\n{body.rstrip()}\n\n"
    start, end = _span(lines, heading)
    if start is None:
        above, end = _span(lines, after) if after else (None, len(lines))
        if above is None and lines and lines[-1].strip():
            lines.append("\n")
            end = len(lines)
        new = [*lines[:end], section, *lines[end:]]
    else:
        new = [*lines[:start], section, *lines[end:]]
    _write(path, new)


def remove_section(path: Path, heading: str) -> None:
    """Drop the `heading` section, if the file has one."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start, end = _span(lines, heading)
    if start is not None:
        _write(path, [*lines[:start], *lines[end:]])


def _span(lines: list[str], heading: str) -> tuple[int | None, int]:
    """(first line, line after the last) of the `heading` section; (None, len) if absent."""
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == heading), None)
    if start is None:
        return None, len(lines)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, end


def _write(path: Path, new: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(new).rstrip("\n") + "\n", encoding="utf-8")
    tmp.replace(path)
