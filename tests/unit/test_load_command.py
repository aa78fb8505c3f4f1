"""generator_argv, the one command line of ``python -m sreforge.load``: what it builds is
what the generator's own parser reads back."""

from __future__ import annotations

import sys
from pathlib import Path

from sreforge.api.scenario import LoadProfile
from sreforge.load.__main__ import _parser
from sreforge.load.command import generator_argv

PROFILE = LoadProfile(rate=50, path="/items/{id}", id_range=(1, 99), known_answers=5)


def test_the_generator_parses_back_what_the_builder_writes(tmp_path: Path) -> None:
    argv = generator_argv(
        PROFILE,
        "http://127.0.0.1:8080",
        listen="0.0.0.0:9100",
        port_file=tmp_path / "p",
        control_socket=tmp_path / "control.sock",
        seed=7,
    )
    assert argv[:3] == [sys.executable, "-m", "sreforge.load"]
    args = _parser().parse_args(argv[3:])
    assert args.target == "http://127.0.0.1:8080"
    assert LoadProfile.model_validate_json(args.profile_json) == PROFILE
    assert args.listen == ("0.0.0.0", 9100)
    assert args.port_file == tmp_path / "p"
    assert args.control_socket == tmp_path / "control.sock"
    assert args.seed == 7


def test_defaults_listen_on_loopback_and_leave_out_what_is_not_given() -> None:
    argv = generator_argv(PROFILE, "http://svc:8080", python="python")
    assert argv[0] == "python"
    assert "--port-file" not in argv
    assert "--seed" not in argv
    assert "--control-socket" not in argv  # no control surface unless asked for
    args = _parser().parse_args(argv[3:])
    assert args.listen == ("127.0.0.1", 0)
    assert args.port_file is None
    assert args.control_socket is None
    assert args.seed is None
