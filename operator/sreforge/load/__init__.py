"""Harness-owned load: an open-model constant-arrival-rate generator and its k6 rendering.

* :class:`LoadGenerator` runs a :class:`~sreforge.api.scenario.LoadProfile` in-process;
  :func:`start_server` serves its ``/metrics`` and a bare ``/healthz`` over TCP, and
  :func:`start_control` its control surface (``POST /target``, ``GET /stats``) on a Unix
  socket only, which :func:`control_request` (and :func:`set_target`, :func:`read_stats`)
  reach.
* ``python -m sreforge.load`` runs both as a process (:func:`generator_argv` is its command
  line); :class:`GeneratorProcess` starts one.
* :mod:`sreforge.load.k6` renders k6 scripts and Kubernetes Jobs for clusters.
"""

from sreforge.load.command import generator_argv
from sreforge.load.control import ControlError, control_request, read_stats, set_target
from sreforge.load.generator import LATE_DROP_SECONDS, LoadGenerator, TargetError, normalize_target
from sreforge.load.metrics import OUTCOMES, LoadMetrics, Outcome
from sreforge.load.process import GeneratorProcess, read_port_file
from sreforge.load.server import (
    build_control_app,
    build_metrics_app,
    start_control,
    start_server,
)

__all__ = [
    "LATE_DROP_SECONDS",
    "OUTCOMES",
    "ControlError",
    "GeneratorProcess",
    "LoadGenerator",
    "LoadMetrics",
    "Outcome",
    "TargetError",
    "build_control_app",
    "build_metrics_app",
    "control_request",
    "generator_argv",
    "normalize_target",
    "read_port_file",
    "read_stats",
    "set_target",
    "start_control",
    "start_server",
]
