"""`sreforge report RUN_DIR`: a run's timeline.png and a self-contained report.html.

Inputs are what every `sreforge run` leaves behind: record.json (a `RunRecord`: the verdict,
the oracle's samples, timestamps) and metrics.json (Prometheus range queries of the load generator's
client-side series). metrics.json is best-effort: when it is missing or its series are
empty, the request-rate and error panels fall back to the oracle's own samples and the
latency panel says there is no data. The HTML embeds the PNG as a data URI and uses only
inline CSS, so it opens offline and can be attached anywhere.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sreforge.api.observation import AlertSample
from sreforge.api.record import RunRecord

PASS_COLOUR = "#1a7f37"
FAIL_COLOUR = "#cf222e"
UNGRADED_COLOUR = "#9a6700"  # Inconclusive / AlertNeverFired: a harness outcome, not a grade

STATE_COLOURS = {"firing": "#d1242f", "pending": "#f0a020", "inactive": "#2da44e"}
UNKNOWN_COLOUR = "#8c959f"  # the oracle saw no firing set (Prometheus unreachable)

# (timestamps key, label, colour) for the vertical markers, in run order.
MARKERS = (
    ("injected", "injected", "#6e40c9"),
    ("fired", "fired", "#d1242f"),
    ("handedOff", "hand-off", "#0969da"),
    ("redeployed", "redeployed", "#1f883d"),
    ("cleared", "cleared", "#116329"),
)
TIMESTAMP_KEYS = (
    "started",
    "injected",
    "fired",
    "handedOff",
    "submitted",
    "ciFinished",
    "redeployed",
    "cleared",
    "recorded",
)


def _epochs(record: RunRecord) -> dict[str, float | None]:
    """The record's timestamps as unix seconds, by their record.json keys."""
    stamps: dict[str, datetime | None] = record.timestamps.model_dump(by_alias=True)
    return {key: None if t is None else t.timestamp() for key, t in stamps.items()}


def _float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def _series(metrics: dict[str, Any], name: str) -> list[tuple[list[float], list[float]]]:
    """Each result of one range query as (times, values); NaN kept (a gap in the plot)."""
    out = []
    results = metrics.get(name)
    if not isinstance(results, list):
        return []
    for result in results:
        values = result.get("values") if isinstance(result, dict) else None
        if not isinstance(values, list):
            continue
        pts = [(_float(v[0]), _float(v[1])) for v in values if isinstance(v, list) and len(v) == 2]
        pts = [(t, y) for t, y in pts if not math.isnan(t)]
        if pts and any(not math.isnan(y) for _, y in pts):
            out.append(([t for t, _ in pts], [y for _, y in pts]))
    return out


def _load_metrics(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _sample_state(sample: AlertSample, target: str) -> str:
    if sample.firing is None:
        return "unknown"
    if target in sample.firing:
        return "firing"
    if target in sample.pending:
        return "pending"
    return "inactive"


def _verdict_label(record: RunRecord) -> tuple[str, str]:
    if record.passed:
        return "PASSED", PASS_COLOUR
    if not record.graded:
        return record.reason.value.upper(), UNGRADED_COLOUR
    return "FAILED", FAIL_COLOUR


# ---------------------------------------------------------------------------- timeline.png


def _plot_lines(ax: Any, rel: Any, lines: list[tuple[str, str, list[Any]]]) -> bool:
    drawn = False
    for label, colour, series in lines:
        for i, (ts, ys) in enumerate(series):
            ax.plot(
                [rel(t) for t in ts],
                ys,
                color=colour,
                linewidth=1.4,
                label=label if i == 0 else None,
            )
            drawn = True
    return drawn


def _no_data(ax: Any, text: str = "no data") -> None:
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        color="#57606a",
        fontsize=10,
    )


def render_timeline(record: RunRecord, metrics: dict[str, Any], out: Path) -> Path:
    """Draw the four-panel run timeline into `out` (PNG)."""
    timeline = record.timeline
    stamps = _epochs(record)
    origin_candidates = [stamps.get("started")] + [_float(s.t) for s in timeline[:1]]
    origin = next((t for t in origin_candidates if t is not None and not math.isnan(t)), 0.0)

    def rel(t: float) -> float:
        return t - origin

    target = record.scenario.target_alert
    sustain = _float(record.verify.sustain_seconds)
    samples_load = [(s.t, s.load) for s in timeline if s.load is not None]

    fig, axes = plt.subplots(
        4,
        1,
        figsize=(12, 9.5),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 3, 3, 1]},
        constrained_layout=True,
    )
    ax_rate, ax_lat, ax_err, ax_alert = axes

    # Request rate: Prometheus series, else the oracle's own load samples.
    rate_lines = [
        ("target (Prometheus)", "#57606a", _series(metrics, "target_rate")),
        ("achieved (Prometheus)", "#0969da", _series(metrics, "achieved_rate")),
    ]
    if not _plot_lines(ax_rate, rel, rate_lines) and samples_load:
        ts = [t for t, _ in samples_load]
        _plot_lines(
            ax_rate,
            rel,
            [
                (
                    "target (oracle samples)",
                    "#57606a",
                    [(ts, [_float(ld.target_rate) for _, ld in samples_load])],
                ),
                (
                    "achieved (oracle samples)",
                    "#0969da",
                    [(ts, [_float(ld.achieved_rate) for _, ld in samples_load])],
                ),
            ],
        )
    if not ax_rate.lines:
        _no_data(ax_rate)
    ax_rate.set_ylabel("requests/s")
    ax_rate.set_title("Request rate: target vs achieved", loc="left", fontsize=10)

    if not _plot_lines(
        ax_lat, rel, [("p95 (client-side)", "#8250df", _series(metrics, "p95_latency_seconds"))]
    ):
        _no_data(ax_lat, "no latency data (metrics.json missing or empty)")
    ax_lat.set_ylabel("seconds")
    ax_lat.set_title("Client-side p95 latency", loc="left", fontsize=10)

    if not _plot_lines(ax_err, rel, [("error ratio", "#cf222e", _series(metrics, "error_ratio"))]):
        if samples_load:
            ts = [t for t, _ in samples_load]
            ys = [1.0 - _float(ld.success_ratio) for _, ld in samples_load]
            _plot_lines(
                ax_err, rel, [("1 - success ratio (oracle samples)", "#cf222e", [(ts, ys)])]
            )
        else:
            _no_data(ax_err)
    ax_err.set_ylabel("ratio")
    ax_err.set_title("Error ratio", loc="left", fontsize=10)

    # The target alert's state, one band per sample interval.
    seen: set[str] = set()
    for i, sample in enumerate(timeline):
        t0 = _float(sample.t)
        t1 = _float(timeline[i + 1].t) if i + 1 < len(timeline) else t0 + 1.0
        if math.isnan(t0) or math.isnan(t1):
            continue
        state = _sample_state(sample, target)
        ax_alert.axvspan(
            rel(t0),
            rel(t1),
            color=STATE_COLOURS.get(state, UNKNOWN_COLOUR),
            alpha=0.85,
            linewidth=0,
            label=state if state not in seen else None,
        )
        seen.add(state)
    if not timeline:
        _no_data(ax_alert, "no oracle samples")
    ax_alert.set_yticks([])
    ax_alert.set_title(f"{target} state", loc="left", fontsize=10)
    ax_alert.set_xlabel("seconds since start")

    cleared = stamps.get("cleared")
    for ax in axes:
        if cleared is not None and not math.isnan(sustain):
            ax.axvspan(
                rel(cleared),
                rel(cleared + sustain),
                color="#2da44e",
                alpha=0.12 if ax is not ax_alert else 0.0,
                hatch=None if ax is not ax_alert else "//",
                linewidth=0,
                label="sustained window" if ax is ax_rate else None,
            )
        for key, label, colour in MARKERS:
            t = stamps.get(key)
            if t is None:
                continue
            ax.axvline(
                rel(t),
                color=colour,
                linestyle="--",
                linewidth=1.1,
                label=label if ax is ax_rate else None,
            )
        ax.grid(True, alpha=0.3)
    ends = [rel(t) for t in (stamps.get("recorded"),) if t is not None]
    ends += [rel(_float(s.t)) + 1.0 for s in timeline[-1:]]
    ends = [t for t in ends if not math.isnan(t)]
    if ends:
        ax_alert.set_xlim(min(0.0, *ends), max(ends))
    for ax in (ax_rate, ax_lat, ax_err, ax_alert):
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(loc="upper right", fontsize=7, ncol=4 if ax is ax_alert else 2)
    fig.suptitle(record.run_id, fontsize=11)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------- report.html

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1f2328;
background:#ffffff}
main{max-width:1200px;margin:0 auto;padding:0 20px 40px}
.banner{color:#ffffff;padding:28px 24px;margin:0 0 20px}
.banner h1{margin:0;font-size:44px;letter-spacing:2px}
.banner p{margin:6px 0 0;font-size:18px}
h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:14px}
th,td{border:1px solid #d0d7de;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:bold;background:#f6f8fa}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:10px;overflow-x:auto;font-size:12px;
white-space:pre-wrap}
img{max-width:100%;border:1px solid #d0d7de}
.muted{color:#57606a}
"""


def _e(value: Any) -> str:
    """HTML-escaped text. "://" is written as "&#58;//" so that no URL (a CI log's, the load
    target's) appears literally in the page: it stays visibly the same and is never a link."""
    text = html.escape("" if value is None else str(value), quote=True)
    return text.replace("://", "&#58;//")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return str(value)


def _kv_table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _signals_table(record: RunRecord) -> str:
    rows, total, weights = [], 0.0, 0.0
    for name, sig in record.signals.items():
        credit, weight = _float(sig.credit), _float(sig.weight)
        points = credit * weight
        if not math.isnan(points):
            total += points
        if not math.isnan(weight):
            weights += weight
        rows.append(
            f"<tr><td>{_e(name)}</td><td>{_e(_fmt(sig.value))}</td>"
            f"<td class='num'>{_e(_fmt(weight, 2))}</td><td class='num'>{_e(_fmt(credit))}</td>"
            f"<td class='num'>{_e(_fmt(points, 4))}</td><td>{_e(sig.detail)}</td></tr>"
        )
    rows.append(
        f"<tr class='total'><td>total</td><td></td><td class='num'>{_fmt(weights, 2)}</td>"
        f"<td></td><td class='num'>{_fmt(total, 4)}</td>"
        f"<td>score {_e(_fmt(record.score, 4))} vs pass bar "
        f"{_e(_fmt(record.pass_threshold))}</td></tr>"
    )
    head = (
        "<tr><th>signal</th><th>value</th><th>weight</th><th>credit</th>"
        "<th>points (credit&times;weight)</th><th>detail</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _timestamps_table(record: RunRecord) -> str:
    stamps: dict[str, str | None] = record.timestamps.model_dump(mode="json", by_alias=True)
    epochs = _epochs(record)
    started = epochs.get("started")
    keys = [k for k in TIMESTAMP_KEYS if k in stamps]
    keys += [k for k in stamps if k not in TIMESTAMP_KEYS]
    rows = []
    for key in keys:
        t = epochs.get(key)
        offset = f"+{t - started:.1f}s" if t is not None and started is not None else "—"
        rows.append(
            f"<tr><th>{_e(key)}</th><td>{_e(stamps.get(key) or '— (not reached)')}</td>"
            f"<td class='num'>{_e(offset)}</td></tr>"
        )
    head = "<tr><th>event</th><th>time</th><th>since start</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _load_rows(record: RunRecord) -> list[tuple[str, Any]]:
    load = record.load
    rows: list[tuple[str, Any]] = [
        ("target rate (req/s)", load.target_rate),
        ("verify: mean achieved rate (req/s)", load.verify_achieved_rate_mean),
        ("verify: max dropped ratio", load.verify_dropped_ratio_max),
    ]
    gen = load.generator or {}
    for key in ("achieved_rate_total", "scheduled", "completed", "dropped", "max_in_flight"):
        if key in gen:
            rows.append((f"generator: {key}", gen[key]))
    outcomes = gen.get("outcomes")
    if isinstance(outcomes, dict):
        rows.append(("generator: outcomes", ", ".join(f"{k}={v}" for k, v in outcomes.items())))
    routes = gen.get("routes")
    if isinstance(routes, dict):  # the traffic mix, route by route
        for route, counts in sorted(routes.items()):
            if isinstance(counts, dict):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                rows.append((f"route {route}", shown))
    rows += [
        ("prober: min share of good answers (verify)", load.verify_probe_success_min),
        ("prober: mean share of good answers (verify)", load.verify_probe_success_mean),
    ]
    return rows


def _held_rows(record: RunRecord) -> list[tuple[str, Any]]:
    """What the fix was held to after the clear: the window, the drawn soak, restarts."""
    soak = record.soak
    return [
        ("sustained window (s)", record.verify.sustain_seconds),
        (
            "soak (s)",
            None
            if soak is None
            else f"{soak.seconds:g}, drawn from [{soak.range_seconds[0]:g}, "
            f"{soak.range_seconds[1]:g}] (seed {soak.seed[:12]}…)",
        ),
        ("restarts of the patched service", record.restarts),
    ]


def render_html(record: RunRecord, png: bytes | None) -> str:
    label, colour = _verdict_label(record)
    scenario, submission, ci = record.scenario, record.submission, record.ci
    image = (
        f"<img alt='run timeline' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        if png
        else "<p class='muted'>no timeline image</p>"
    )
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(label)} {_e(record.run_id)}</title><style>{CSS}</style></head><body>",
        f"<div class='banner' id='verdict' style='background:{colour}'>",
        f"<h1>{_e(label)}</h1>",
        f"<p>reason <b>{_e(record.reason)}</b> — score {_e(_fmt(record.score, 4))}"
        f" vs pass bar {_e(_fmt(record.pass_threshold))}</p>",
        f"<p>{_e(record.message)}</p></div><main>",
        _kv_table(
            [
                ("run", record.run_id),
                ("scenario", scenario.name),
                ("title", scenario.title),
                ("target alert", scenario.target_alert),
                ("submission", f"{submission.kind}: {submission.source}"),
                ("agent model", submission.agent_model),
                ("files changed", ", ".join(submission.files_changed) or None),
                ("time to clear (s)", record.time_to_clear_seconds),
                ("new alerts", ", ".join(record.new_alerts) or "none"),
            ]
        ),
        "<h2>Verdict</h2>",
        _signals_table(record),
        "<h2>Held to</h2>",
        _kv_table(_held_rows(record)),
        "<h2>Timeline</h2>",
        image,
        "<h2>Timestamps</h2>",
        _timestamps_table(record),
        "<h2>CI gate</h2>",
        _kv_table(
            [
                ("status", ci.status),
                ("reason", ci.reason),
                ("duration (s)", ci.duration_seconds),
            ]
        ),
        f"<pre>{_e(ci.output_tail or '(no output)')}</pre>",
        "<h2>Load</h2>",
        _kv_table(_load_rows(record)),
        "<h2>Wall time (s)</h2>",
        _kv_table(list(record.wall_time_seconds.items())),
    ]
    if record.fault:
        parts += ["<h2>Fault</h2>", f"<pre>{_e(json.dumps(record.fault, indent=2))}</pre>"]
    parts.append(f"<p class='muted'>{_e(record.schema_id)}</p></main></body></html>\n")
    return "".join(parts)


def write_report(run_dir: Path) -> tuple[Path, Path]:
    """Write run_dir/timeline.png and run_dir/report.html; return (png, html) paths.

    Raises FileNotFoundError/ValueError if record.json is missing or not a run record.
    """
    run_dir = Path(run_dir)
    record = RunRecord.model_validate_json((run_dir / "record.json").read_bytes())
    png_path = render_timeline(record, _load_metrics(run_dir), run_dir / "timeline.png")
    html_path = run_dir / "report.html"
    html_path.write_text(render_html(record, png_path.read_bytes()), encoding="utf-8")
    return png_path, html_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory")


def cli(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    if not (run_dir / "record.json").is_file():
        print(f"error: {run_dir / 'record.json'}: no such file", file=sys.stderr)
        return 2
    try:
        png, page = write_report(run_dir)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"timeline {png}\nreport   {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sreforge report", description=__doc__)
    add_arguments(parser)
    return cli(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
