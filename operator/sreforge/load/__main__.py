"""``python -m sreforge.load``: run one load profile (or its prober), serving its metrics.

    python -m sreforge.load --target http://127.0.0.1:8080 \\
        --profile-json '{"rate": 100, "duration_seconds": 60, "path": "/items/{id}"}' \\
        --listen 127.0.0.1:0 --port-file /tmp/load.port [--seed 1] \\
        [--control-socket /run/harness/load.sock] [--ids-seed 7] [--series probe]

``--series probe`` makes it the independent prober: the profile's mix at its
``probe_rate``, series ``sreforge_probe_*`` instead of ``sreforge_load_*``. Give the load
and its prober the same ``--ids-seed``: they then agree on which ids are popular.

The TCP listener serves ``GET /metrics`` and ``GET /healthz`` only. ``--control-socket``
adds a Unix socket (mode 0600, at a path that must not exist yet) serving ``POST /target``
and ``GET /stats``; without it nothing can re-point the load or read its counters.

Binds the metrics server and the control socket first (port 0 = ephemeral), then writes
the bound port to ``--port-file`` atomically (a temporary file renamed over it) so a reader
never sees a partial number and both are ready once it exists, then runs the load. Exits 0
when the duration ends or on SIGTERM/SIGINT, 2 on bad arguments or what cannot be bound.
Prints one start line and one summary line (JSON) to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from sreforge.api.scenario import LoadProfile
from sreforge.load.generator import LoadGenerator, TargetError
from sreforge.load.metrics import LOAD_PREFIX, PROBE_PREFIX, LoadMetrics
from sreforge.load.server import start_control, start_server

PROG = "sreforge-load"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port)."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"--listen must be HOST:PORT, got {value!r}")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    return host, int(port_text)


def write_port_file(path: Path, port: int) -> None:
    """Write ``port`` and a newline to ``path`` atomically (tmp in the same dir + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="ascii") as f:
        f.write(f"{port}\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sreforge.load", description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="http://HOST:PORT of the service")
    p.add_argument("--profile-json", required=True, help="a LoadProfile as JSON")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 0), help="HOST:PORT")
    p.add_argument("--port-file", type=Path, help="where to write the bound metrics port")
    p.add_argument(
        "--control-socket",
        type=Path,
        help="a Unix socket (created 0600) serving POST /target and GET /stats; none if unset",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the random draws")
    p.add_argument(
        "--ids-seed",
        type=int,
        default=None,
        help="seed of which ids are popular (the --seed if unset); shared with the prober",
    )
    p.add_argument(
        "--series",
        choices=("load", "probe"),
        default="load",
        help="load: the profile's rate, sreforge_load_*; probe: its probe_rate, sreforge_probe_*",
    )
    p.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="keep serving /metrics this many seconds after the load ends (SIGTERM ends it)",
    )
    return p


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


async def _amain(args: argparse.Namespace, profile: LoadProfile) -> int:
    prefix = LOAD_PREFIX
    if args.series == "probe":
        profile, prefix = profile.probe(), PROBE_PREFIX
    metrics = LoadMetrics(routes=[r.label for r in profile.mix()], prefix=prefix)
    gen = LoadGenerator(
        profile, args.target, seed=args.seed, ids_seed=args.ids_seed, metrics=metrics
    )
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def on_signal() -> None:
        gen.stop()
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    host, port = args.listen
    try:
        async with contextlib.AsyncExitStack() as servers:
            runner, bound = await start_server(gen, host, port)
            servers.push_async_callback(runner.cleanup)
            if args.control_socket is not None:
                try:
                    control = await start_control(gen, args.control_socket)
                except OSError as exc:
                    _say(f"cannot create the control socket {args.control_socket}: {exc}")
                    return 2
                servers.push_async_callback(control.cleanup)
            if args.port_file is not None:
                write_port_file(args.port_file, bound)
            _say(
                f"start target={gen.target} rate={profile.rate}/s "
                f"max_in_flight={profile.max_in_flight} duration={profile.duration_seconds}s "
                f"routes={len(gen.mix)} series={prefix}_* metrics=http://{host}:{bound}/metrics "
                f"control={args.control_socket or 'none'} pid={os.getpid()}"
            )
            summary = await gen.run()
            if args.linger > 0 and not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=args.linger)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    _say("summary " + json.dumps(summary, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s %(message)s")
    try:
        profile = LoadProfile.model_validate_json(args.profile_json)
    except ValidationError as exc:
        _say(f"bad --profile-json: {exc}")
        return 2
    try:
        return asyncio.run(_amain(args, profile))
    except TargetError as exc:
        _say(f"bad --target: {exc}")
        return 2
    except OSError as exc:
        _say(f"cannot listen on {args.listen[0]}:{args.listen[1]}: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
