"""Harness-owned load: an open-model constant-arrival-rate generator and its k6 rendering.

* :class:`LoadGenerator` runs a :class:`~sreforge.api.scenario.LoadProfile` in-process;
  :func:`start_server` serves its ``/metrics``, ``/stats``, ``POST /target``, ``/healthz``.
* ``python -m sreforge.load`` runs both as a process (:func:`generator_argv` is its command
  line); :class:`GeneratorProcess` starts one.
* :mod:`sreforge.load.k6` renders k6 scripts and Kubernetes Jobs for clusters.
"""

from sreforge.load.command import generator_argv
from sreforge.load.generator import LATE_DROP_SECONDS, LoadGenerator, TargetError, normalize_target
from sreforge.load.metrics import OUTCOMES, LoadMetrics, Outcome
from sreforge.load.process import GeneratorProcess, read_port_file
from sreforge.load.server import build_app, start_server

__all__ = [
    "LATE_DROP_SECONDS",
    "OUTCOMES",
    "GeneratorProcess",
    "LoadGenerator",
    "LoadMetrics",
    "Outcome",
    "TargetError",
    "build_app",
    "generator_argv",
    "normalize_target",
    "read_port_file",
    "start_server",
]
