"""The run report (timeline.png + report.html) of real runs, rendered in headless Chromium.

Two real graded runs of latency-cache-stampede, checked in under tests/fixtures/runs (their
record.json and metrics.json as `sreforge run` wrote them): the reference fix (passes,
recorded before record.json had schemaName/schemaVersion) and the break-tests decoy (fails
fast at the CI gate, so it has no redeploy and no clear). Their reports must be
self-contained, carry the verdict, and render as a real page in a browser.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pytest

from sreforge import report

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "runs"
RECORDED = {"pass": "restore-simplecache", "fail": "break-tests"}
CHROMIUM = "/usr/bin/chromium"
SIGNALS = ("ci_green", "alert_cleared", "sustained_clear", "time_to_clear", "no_new_alerts")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of the recorded run directories (the report is written into them)."""
    base = tmp_path_factory.mktemp("report-runs")
    out = {}
    for kind, name in RECORDED.items():
        out[kind] = base / kind
        shutil.copytree(FIXTURES / name, out[kind])
    return out


def _record(run_dir: Path) -> dict[str, Any]:
    data = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _cli(run_dir: Path) -> int:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    return report.cli(parser.parse_args([str(run_dir)]))


@pytest.fixture(scope="module")
def rendered(runs: dict[str, Path]) -> dict[str, tuple[Path, Path]]:
    return {kind: report.write_report(d) for kind, d in runs.items()}


def test_runs_have_the_expected_verdicts(runs: dict[str, Path]) -> None:
    good, bad = _record(runs["pass"]), _record(runs["fail"])
    assert good["passed"] is True, good["message"]
    assert bad["passed"] is False
    assert bad["reason"] == "CIRed"
    assert bad["timestamps"]["redeployed"] is None
    assert "schemaVersion" not in good  # written before the key existed: it still loads
    assert bad["schemaVersion"] == 1


@pytest.mark.parametrize("kind", ["pass", "fail"])
def test_report_files_are_self_contained(
    rendered: dict[str, tuple[Path, Path]], runs: dict[str, Path], kind: str
) -> None:
    png, page = rendered[kind]
    assert png == runs[kind] / "timeline.png"
    assert page == runs[kind] / "report.html"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text
    assert "https://" not in text
    assert "data:image/png;base64," in text
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", text)
    record = _record(runs[kind])
    assert ("PASSED" if kind == "pass" else "FAILED") in text
    assert str(record["reason"]) in text
    for name in SIGNALS:
        assert name in text
    assert f"{record['score']:.4f}" in text


def test_ci_output_is_escaped(
    rendered: dict[str, tuple[Path, Path]], runs: dict[str, Path]
) -> None:
    tail = _record(runs["fail"])["ci"]["outputTail"]
    assert "FAILED" in tail
    text = rendered["fail"][1].read_text(encoding="utf-8")
    if "<" in tail or ">" in tail:
        assert "&lt;" in text or "&gt;" in text
    assert "<function" not in text  # the pytest repr in the tail, escaped


def test_cli_exit_codes(runs: dict[str, Path], tmp_path: Path) -> None:
    assert _cli(runs["fail"]) == 0
    assert _cli(tmp_path) == 2  # no record.json


def test_robust_to_missing_metrics(runs: dict[str, Path], tmp_path: Path) -> None:
    for kind in ("pass", "fail"):
        d = tmp_path / kind
        d.mkdir()
        shutil.copy(runs[kind] / "record.json", d / "record.json")  # no metrics.json
        png, page = report.write_report(d)
        assert png.stat().st_size > 10_000
        assert ("PASSED" if kind == "pass" else "FAILED") in page.read_text(encoding="utf-8")
    d = tmp_path / "empty-series"
    d.mkdir()
    record = _record(runs["fail"])
    record["timeline"] = []
    (d / "record.json").write_text(json.dumps(record), encoding="utf-8")
    (d / "metrics.json").write_text(
        json.dumps({"target_rate": [], "p95_latency_seconds": [{"metric": {}, "values": []}]}),
        encoding="utf-8",
    )
    report.write_report(d)


def test_renders_prometheus_series(runs: dict[str, Path], tmp_path: Path) -> None:
    """metrics.json with data (NaN included) is drawn instead of the oracle-sample fallback."""
    record = _record(runs["pass"])
    t0 = record["timeline"][0]["t"]
    ts = [t0 + i for i in range(40)]

    def series(f: Any) -> list[dict[str, Any]]:
        return [{"metric": {}, "values": [[t, f(i)] for i, t in enumerate(ts)]}]

    metrics = {
        "target_rate": series(lambda _i: "50"),
        "achieved_rate": series(lambda i: str(min(50, 20 + i))),
        "p95_latency_seconds": series(lambda i: "NaN" if i < 3 else str(2.0 if i < 20 else 0.05)),
        "error_ratio": series(lambda i: "NaN" if i == 5 else str(0.5 if i < 20 else 0.0)),
    }
    (tmp_path / "record.json").write_text(json.dumps(record), encoding="utf-8")
    (tmp_path / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    png, _ = report.write_report(tmp_path)
    fallback = tmp_path / "fallback"
    fallback.mkdir()
    shutil.copy(tmp_path / "record.json", fallback / "record.json")
    png2, _ = report.write_report(fallback)
    assert png.read_bytes() != png2.read_bytes()


def _hex(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)


def _fraction(pixels: np.ndarray, colour: str, tol: float = 6.0) -> float:
    close = np.all(np.abs(pixels - _hex(colour)) <= tol, axis=-1)
    return float(close.mean())


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
@pytest.mark.parametrize("kind", ["pass", "fail"])
def test_report_renders_in_chromium(
    rendered: dict[str, tuple[Path, Path]], tmp_path: Path, kind: str
) -> None:
    page = rendered[kind][1]
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                "--window-size=1280,2000",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            timeout=180,
            check=False,
        )
    assert shot.is_file()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(shot)
    assert img.shape[0] >= 1000
    assert img.shape[1] >= 1000
    pixels = np.round(img[..., :3] * 255.0)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100  # not blank
    ours, other = (
        (report.PASS_COLOUR, report.FAIL_COLOUR)
        if kind == "pass"
        else (report.FAIL_COLOUR, report.PASS_COLOUR)
    )
    assert _fraction(pixels, ours) > 0.02  # the verdict banner is there, in its colour
    assert _fraction(pixels, other) < 0.005


def test_the_report_shows_what_the_fix_was_held_to(runs: dict[str, Path], tmp_path: Path) -> None:
    """The drawn soak (published with the verdict), restarts, the prober's view and the
    traffic mix route by route: a record that has them shows them."""
    run = tmp_path / "held"
    shutil.copytree(runs["pass"], run)
    data = _record(run)
    data["soak"] = {"rangeSeconds": [240, 420], "seconds": 287.4, "seed": "ab" * 32}
    data["restarts"] = 0
    data["load"]["verifyProbeSuccessMin"] = 0.97
    data["load"]["generator"]["routes"] = {"/products/{id}": {"success": 900, "invalid": 3}}
    (run / "record.json").write_text(json.dumps(data), encoding="utf-8")
    _, html = report.write_report(run)
    text = re.sub(r"<[^>]+>", " ", html.read_text(encoding="utf-8"))
    assert "287.4, drawn from [240, 420] (seed abababababab…)" in text
    assert re.search(r"restarts of the patched service\s+0", text)
    assert re.search(r"route /products/\{id\}\s+invalid=3, success=900", text)
    assert re.search(r"prober: min share of good answers \(verify\)\s+0\.97", text)
