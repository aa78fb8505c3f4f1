"""How long each scenario's full validation took: an earlier SCENARIOS.md against this one.

Each scenario's section of SCENARIOS.md lists its cases with their run times. Before warm
sessions every case was a cold `sreforge run` and the section's time is the sum of its
rows; a warm session's section says its own total ("N min in all", which also counts the
one setup). Writes the `## Validation time` section of SCENARIOS.md:

    python benchmarks/validation_times.py --before 5599154   # a commit with the cold table
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
from sreforge.markdown import write_section  # noqa: E402

HEADING = "## Validation time"
TOTAL = re.compile(r"(\d+) runs, ([\d.]+) min in all")


def sections(text: str) -> dict[str, str]:
    out = {}
    for chunk in text.split("\n## ")[1:]:
        name, _, body = chunk.partition("\n")
        out[name.strip()] = body
    return out


def minutes(body: str) -> tuple[int, float] | None:
    """(cases, minutes) of one section: its stated total, else the sum of its rows; None
    for a section validated with --fast or --only (a subset, not the full validation)."""
    command = next((ln for ln in body.splitlines() if ln.strip()), "")
    if "--fast" in command or "--only" in command:
        return None
    if match := TOTAL.search(body):
        return int(match[1]), float(match[2])
    rows = [ln for ln in body.splitlines() if ln.startswith("| ") and "| patch |" not in ln]
    if not rows:
        return None
    return len(rows), sum(float(r.split("|")[-2]) for r in rows) / 60


def cases(body: str) -> list[dict[str, str]]:
    """The rows of a section's table, each a dict by column name."""
    lines = [ln for ln in body.splitlines() if ln.startswith("| ")]
    if not lines or "| patch |" not in lines[0]:
        return []
    names = [c.strip() for c in lines[0].strip("|").split("|")]
    return [
        dict(zip(names, (c.strip() for c in ln.strip("|").split("|")), strict=True))
        for ln in lines[1:]
    ]


def soak_cost(after: dict[str, str]) -> list[str]:
    """What the hidden soak costs a validation, from the local sections as they are now.

    A passing case sits through its window and the whole drawn soak; a failing one ends at
    its failure (most before the soak). The first row of a section also carries the one
    setup and the control window, so it is left out of the per-case means."""
    out = [
        "| scenario | cases | passed | pass: run (s) | of it soak (s) | fail: run (s) "
        "| soaks / section time |",
        "|---|---|---|---|---|---|---|",
    ]
    totals = {"pass_run": 0.0, "pass_soak": 0.0, "passes": 0, "fail_run": 0.0, "fails": 0}
    soaked = spent = 0.0
    for name in sorted(after):
        body = after[name]
        rows = cases(body)
        if " on " in name or not rows or "soak (s)" not in rows[0]:
            continue
        total = minutes(body)
        if total is None:
            continue
        passed = [r for r in rows if r["got"] == "pass"]
        later = rows[1:]
        p = [r for r in later if r["got"] == "pass"]
        f = [r for r in later if r["got"] != "pass"]
        p_run = sum(float(r["run (s)"]) for r in p)
        p_soak = sum(float(r["soak (s)"]) for r in p)
        f_run = sum(float(r["run (s)"]) for r in f)
        section_soak = sum(float(r["soak (s)"]) for r in passed)
        soaked += section_soak
        spent += 60 * total[1]
        totals["pass_run"] += p_run
        totals["pass_soak"] += p_soak
        totals["passes"] += len(p)
        totals["fail_run"] += f_run
        totals["fails"] += len(f)
        out.append(
            f"| {name} | {len(rows)} | {len(passed)} "
            f"| {p_run / len(p) if p else 0:.0f} | {p_soak / len(p) if p else 0:.0f} "
            f"| {f_run / len(f) if f else 0:.0f} | {section_soak / (60 * total[1]):.0%} |"
        )
    if totals["passes"] and totals["fails"]:
        out.append(
            f"| all | | | {totals['pass_run'] / totals['passes']:.0f} "
            f"| {totals['pass_soak'] / totals['passes']:.0f} "
            f"| {totals['fail_run'] / totals['fails']:.0f} | {soaked / spent:.0%} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="a commit whose SCENARIOS.md is the cold one")
    args = ap.parse_args()
    old = subprocess.run(
        ["git", "show", f"{args.before}:SCENARIOS.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = ROOT / "SCENARIOS.md"
    before, after = sections(old), sections(path.read_text(encoding="utf-8"))
    lines = [
        f"`python benchmarks/validation_times.py --before {args.before}`: each scenario's full "
        f"validation (`sreforge scenarios validate NAME`) as SCENARIOS.md at {args.before} "
        "recorded it (cold: one `sreforge run` per case, the time is the sum of its rows) "
        "and as it is now (one warm session per scenario, its own total with the setup). "
        "Both on this 2-CPU machine; run times depend on what else it ran. A section "
        "validated again since grades more cases (the decoys added since) and a passing case "
        "sits through the hidden soak after its window (4 to 7 minutes by default), which "
        "the cold runs at the earlier commit did not have: compare minutes per case with "
        "that in mind, and the total ratio only between sections of the same kind. A "
        "section last validated with --fast (a subset) is left out.",
        "",
        "| scenario | cases before | minutes before | cases now | minutes now | ratio "
        "| min/case before | min/case now |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sums = [0.0, 0.0]
    for name in sorted(set(before) & set(after)):
        b, a = minutes(before[name]), minutes(after[name])
        if b is None or a is None:
            continue
        sums[0] += b[1]
        sums[1] += a[1]
        lines.append(
            f"| {name} | {b[0]} | {b[1]:.1f} | {a[0]} | {a[1]:.1f} | {a[1] / b[1]:.2f} "
            f"| {b[1] / b[0]:.2f} | {a[1] / a[0]:.2f} |"
        )
    if sums[0]:
        lines.append(f"| all | | {sums[0]:.1f} | | {sums[1]:.1f} | {sums[1] / sums[0]:.2f} | | |")
    lines += [
        "",
        "What the hidden soak costs, from the sections as they are now: a passing case sits "
        "through its sustained window and then the whole soak drawn for it (240-420 s by "
        "default), the load running; a failing case ends when it fails, mostly before the "
        "soak begins. *pass: run* and *fail: run* are the mean run times of a case, the "
        "first row of each section left out (it carries the one setup and the control "
        "window, which lasts the window plus the soak's upper bound); *soaks / section "
        "time*: the soaks of the passing cases as a share of the section's whole time.",
        "",
        *soak_cost(after),
    ]
    body = "\n".join(lines)
    print(body)
    write_section(path, HEADING, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
