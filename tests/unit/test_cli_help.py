"""Every command's --help renders: argparse formats help strings with %, so a stray
percent sign ("95% intervals") crashed `sreforge --help` with a TypeError."""

from __future__ import annotations

import argparse

import pytest

from sreforge.cli import build_parser


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_command_renders_its_help() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) > 10  # the subcommands were found
    for prog, parser in parsers:
        text = parser.format_help()
        assert text.startswith("usage: "), prog


def test_the_top_level_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "campaign", "scenarios", "sources"):
        assert command in out
