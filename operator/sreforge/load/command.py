"""The one command line of ``python -m sreforge.load``, wherever the generator is started:
as a local child process, in a cluster Job, by a test or a benchmark."""

from __future__ import annotations

import sys
from pathlib import Path

from sreforge.api.scenario import LoadProfile


def generator_argv(
    profile: LoadProfile,
    target: str,
    *,
    listen: str = "127.0.0.1:0",
    port_file: Path | str | None = None,
    control_socket: Path | str | None = None,
    seed: int | None = None,
    ids_seed: int | None = None,
    probe: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """The argv that runs ``profile`` against ``target``, serving its metrics on ``listen``
    (HOST:PORT, port 0 for any) and writing the bound port to ``port_file`` if given.

    ``control_socket``: the Unix socket (a path in a directory only the caller can enter)
    that serves ``POST /target`` and ``GET /stats``; without it nothing can re-point or
    read the run. ``probe``: run the profile's prober instead (its ``probe_rate``, series
    ``sreforge_probe_*``); give it the load's ``ids_seed``. ``python`` is the interpreter:
    this one by default, ``"python"`` in a container image.
    """
    argv = [
        python,
        "-m",
        "sreforge.load",
        "--target",
        target,
        "--profile-json",
        profile.model_dump_json(),
        "--listen",
        listen,
    ]
    if port_file is not None:
        argv += ["--port-file", str(port_file)]
    if control_socket is not None:
        argv += ["--control-socket", str(control_socket)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if ids_seed is not None:
        argv += ["--ids-seed", str(ids_seed)]
    if probe:
        argv += ["--series", "probe"]
    return argv
