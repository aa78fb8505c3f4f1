"""A real Prometheus (Debian's `prometheus`) per run, with file-based service discovery.

The file_sd target files play the part of a Kubernetes Service's endpoints: the runtime
rewrites them when it swaps a process, and Prometheus picks the change up at once.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from sreforge.runtime.process import Managed, ProcessError, free_port

SCRAPE_INTERVAL = "1s"


def prometheus_binary() -> str:
    found = os.environ.get("SREFORGE_PROMETHEUS") or shutil.which("prometheus")
    if not found:
        raise ProcessError(
            "prometheus not found: install Debian's package (`apt-get install prometheus`) "
            "or set SREFORGE_PROMETHEUS to the binary"
        )
    return found


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class PrometheusServer:
    """Prometheus on 127.0.0.1 with the scenario's rules and one file_sd job per target."""

    def __init__(
        self,
        workdir: Path,
        rule_files: list[Path],
        jobs: list[str],
        flags: tuple[str, ...] = (),
    ) -> None:
        """`flags`: more command-line flags (a run's own Prometheus takes none)."""
        self.workdir = workdir
        self.jobs = jobs
        self.flags = flags
        workdir.mkdir(parents=True, exist_ok=True)
        rules_dir = workdir / "rules"
        rules_dir.mkdir(exist_ok=True)
        copied = []
        for i, rule in enumerate(rule_files):
            dest = rules_dir / f"{i}-{rule.name}"
            shutil.copyfile(rule, dest)
            copied.append(str(dest))
        for job in jobs:
            self.set_targets(job, [])
        config = {
            "global": {
                "scrape_interval": SCRAPE_INTERVAL,
                "scrape_timeout": "900ms",
                "evaluation_interval": SCRAPE_INTERVAL,
            },
            "rule_files": copied,
            "scrape_configs": [
                {
                    "job_name": job,
                    "file_sd_configs": [{"files": [str(self._sd(job))], "refresh_interval": "1s"}],
                }
                for job in jobs
            ],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.proc: Managed | None = None
        self.port = 0

    def _sd(self, job: str) -> Path:
        return self.workdir / f"targets-{job}.json"

    def set_targets(self, job: str, addresses: list[str]) -> None:
        """Point a job at these host:port addresses (an endpoints update)."""
        self.set_target_groups(job, [{"targets": addresses, "labels": {}}])

    def set_target_groups(self, job: str, groups: list[dict[str, Any]]) -> None:
        """Replace a job's file_sd target groups (``targets`` + ``labels`` each; a
        ``job`` or ``__metrics_path__`` label of a group overrides the job's own)."""
        _write_atomic(self._sd(job), json.dumps(groups))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        binary = prometheus_binary()
        for _attempt in range(3):
            self.port = free_port()
            self.proc = Managed(
                "prometheus",
                [
                    binary,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                    "--log.level=warn",
                    *self.flags,
                ],
                log_path=self.workdir / "prometheus.log",
            )
            try:
                self.proc.wait_http(f"{self.url}/-/ready", timeout)
                return
            except ProcessError:
                if self.proc.alive():
                    raise
                self.proc.stop()  # most likely the port was taken meanwhile: try another
        raise ProcessError(f"prometheus would not start; see {self.workdir / 'prometheus.log'}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
