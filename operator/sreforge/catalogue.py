"""The scenario catalogue's proof: every reference fix passes, the empty patch and every decoy fail.

One mechanism for `sreforge scenarios validate`, the graded-run tests and SCENARIOS.md:
`cases()` lists what a scenario must show, `row()` turns one real run's record.json into a
table row, `write_markdown()` writes the table.

A decoy may say how it must fail in its header (the text before the first `diff --git`,
which `git apply` ignores) with a line `# expect: Refired|NotCleared`; without one, any
behavioural failure counts. A decoy that ends Inconclusive never counts as failing
properly: that is the harness failing, not the decoy.

Every decoy also names its class (`# class: time-bomb`; one or more of DECOY_CLASSES), and
every scenario has a decoy of each of REQUIRED_CLASSES: the ways a patch can look like a
fix to a weaker oracle. `classes_table()` shows the catalogue's coverage.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from sreforge.api.scenario import RequiredDecoyClass, Scenario
from sreforge.api.verdict import Reason
from sreforge.markdown import remove_section, write_section
from sreforge.scenarios import decoys, fixes
from sreforge.telemetry import control_quiet

EMPTY = "empty"
_EXPECT = re.compile(r"^#\s*expect:\s*(?P<names>[A-Za-z|, ]+)$", re.MULTILINE)
_CLASS = re.compile(r"^#\s*class:(?P<names>.*)$", re.MULTILINE)
# The heading suffix of a scenario's section of cases added since its validation (--only).
ADDED = ": cases added since"
DECOY_CLASSES: dict[str, str] = {
    "sniffing": "(a) the fix is served only to requests that look like the harness's",
    "fix-one-break-another": "(b) the loaded route is fixed and another route broken",
    "gives-way-after-the-window": "(c) holds through the sustained window, then fails",
    "time-bomb": "(d) a correct fix whose process exits (or restarts) after a while",
    "fabricated-answers": "fast answers that are not the service's: made-up or empty content",
    "attacks-the-harness": "the patched service attacks what measures it",
    "games-the-signal": "changes what the service reports, not how it behaves",
    "one-of-two-causes": "mends one cause of a compound incident",
    "blind-revert": "reverts the newest or the most suspicious commit, not the cause",
    "fails-the-gate": "breaks or edits the system's own tests",
    "plausible-wrong-fix": "treats a symptom the way an SRE might, and does not hold",
}
# Every scenario has a decoy of each, or says in scenario.toml ([decoys] not_applicable)
# why its service rules one out.
REQUIRED_CLASSES: tuple[str, ...] = get_args(RequiredDecoyClass)
assert set(REQUIRED_CLASSES) <= set(DECOY_CLASSES)
# Failing for one of these says nothing about the patch.
NOT_A_BEHAVIOURAL_FAILURE = frozenset(
    {Reason.PASSED, Reason.INCONCLUSIVE, Reason.ALERT_NEVER_FIRED}
)


@dataclass(frozen=True)
class Case:
    """One graded run a scenario must show: a patch and the outcome it must get."""

    scenario: Scenario
    patch: Path | None  # None: the empty patch (no fix at all)
    expected: str  # "pass" | "fail"
    control: bool = False  # run the healthy-build control window first
    fast: bool = False  # part of the fast subset

    @property
    def label(self) -> str:
        return EMPTY if self.patch is None else f"{self.patch.parent.name}/{self.patch.name}"

    @property
    def id(self) -> str:
        return f"{self.scenario.name}:{self.label}"

    def expected_reasons(self) -> frozenset[Reason] | None:
        """The reasons a failing case may end with, if its decoy names them."""
        if self.expected == "pass":
            return frozenset({Reason.PASSED})
        if self.patch is None:
            # Redeploying the unchanged build either never clears, or clears only until the
            # fault builds up again (a leak starts over in a fresh process): never holds.
            return frozenset({Reason.NOT_CLEARED, Reason.REFIRED})
        names = _header_names(self.patch, _EXPECT)
        return None if names is None else frozenset(Reason(n) for n in names)

    def patch_file(self, scratch: Path) -> Path:
        """The patch to submit; the empty patch is written into `scratch`."""
        if self.patch is not None:
            return self.patch
        scratch.mkdir(parents=True, exist_ok=True)
        empty = scratch / "empty.patch"
        empty.write_text("", encoding="utf-8")
        return empty


def _header_names(patch: Path, line: re.Pattern[str]) -> list[str] | None:
    """The names (split on `|`, `,` or spaces) on a patch header's `line`; None without one.
    The header is the text before the first `diff --git`, which `git apply` ignores."""
    head = patch.read_text(encoding="utf-8").split("\ndiff --git", 1)[0]
    match = line.search(head)
    if match is None:
        return None
    return [n for n in re.split(r"[|, ]+", match["names"].strip()) if n]


def decoy_classes(patch: Path) -> tuple[str, ...]:
    """The classes a decoy's `# class:` header names; ValueError (naming the file and the
    problem) when it names none or one that is not in DECOY_CLASSES."""
    found = _header_names(patch, _CLASS)
    if found is None:
        return ()
    names = tuple(found)
    unknown = [n for n in names if n not in DECOY_CLASSES]
    if not names or unknown:
        raise ValueError(
            f"{patch}: '# class:' names {', '.join(unknown) or 'nothing'}; "
            f"known classes: {', '.join(DECOY_CLASSES)}"
        )
    return names


def classes_table(scenarios: list[Scenario]) -> str:
    """How many decoys of each class each scenario has (`sreforge scenarios list --markdown`);
    a required class a scenario lacks shows as **0**, one its scenario.toml rules out as
    n/a (why, under the table)."""
    lines = [
        "Written by `sreforge scenarios list --markdown SCENARIOS.md` from each decoy's "
        "`# class:` header. Every scenario must have a decoy of each of the first five "
        "classes, or say in scenario.toml why its service rules one out (a test in the "
        "default suite holds it to that); a decoy may belong to more than one class.",
        "",
        *(f"- **{name}**: {what}" for name, what in DECOY_CLASSES.items()),
        "",
        "| scenario | " + " | ".join(DECOY_CLASSES) + " |",
        "|---|" + "---|" * len(DECOY_CLASSES),
    ]
    ruled_out: list[str] = []
    for s in scenarios:
        counts = dict.fromkeys(DECOY_CLASSES, 0)
        for patch in decoys(s):
            for name in decoy_classes(patch):
                counts[name] += 1
        na = s.decoys.not_applicable
        cells = [
            (f"**{n}**" if name not in na else "n/a")
            if n == 0 and name in REQUIRED_CLASSES
            else str(n)
            for name, n in counts.items()
        ]
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
        ruled_out += [f"- {s.name}, {name}: {why}" for name, why in na.items()]
    if ruled_out:
        lines += ["", "Ruled out by the service's shape:", "", *ruled_out]
    return "\n".join(lines)


def cases(scenario: Scenario) -> list[Case]:
    """Fixes first (the first with the control window), the empty patch, then the decoys.

    The fast subset is the first fix (with its control run), the empty patch and the first
    decoy: together they show the alert fires, stays firing without a fix, clears with a
    real one and not with a plausible wrong one, and stays quiet on the healthy build.
    """
    out = [
        Case(scenario, p, "pass", control=i == 0, fast=i == 0)
        for i, p in enumerate(fixes(scenario))
    ]
    out.append(Case(scenario, None, "fail", fast=True))
    out += [Case(scenario, p, "fail", fast=i == 0) for i, p in enumerate(decoys(scenario))]
    return out


def held_seconds(
    scenario: Scenario,
    sustain_seconds: float | None = None,
    soak_seconds: tuple[float, float] | None = None,
) -> int:
    """A validation's control window: as long as a fix is held, the sustained window and
    the longest soak (the scenario's, unless given), locally and on a cluster."""
    sustain = sustain_seconds or scenario.verify.sustain_seconds
    soak = soak_seconds or scenario.verify.soak_seconds
    return int(sustain + soak[1])


def judged(case: Case, record: dict[str, Any]) -> tuple[str, str | None]:
    """("pass"|"fail", why the outcome does not match the case, or None when it matches)."""
    got = "pass" if record.get("passed") else "fail"
    reason = str(record.get("reason"))
    control = record.get("control") or {}
    if case.control and not control_quiet(control):
        return got, f"control window: the healthy build was not quiet ({control})"
    if got != case.expected:
        return got, f"expected {case.expected}, got {got} ({reason}: {record.get('message')})"
    allowed = case.expected_reasons()
    if case.expected == "fail" and reason in NOT_A_BEHAVIOURAL_FAILURE:
        return got, f"failed only as {reason}: {record.get('message')}"
    if allowed is not None and reason not in allowed:
        expected = "|".join(sorted(allowed))
        return got, f"reason {reason}, expected one of {expected}: {record.get('message')}"
    return got, None


def row(case: Case, record: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The SCENARIOS.md / validate table row of one real run."""
    got, mismatch = judged(case, record)
    stamps = record.get("timestamps") or {}
    fire = _seconds_between(stamps.get("injected"), stamps.get("fired"))
    control = record.get("control") or {}
    return {
        "scenario": case.scenario.name,
        "patch": case.label,
        "expected": case.expected,
        "got": got,
        "score": float(record.get("score") or 0.0),
        "reason": str(record.get("reason")),
        "failing": ",".join(record.get("failingSignals") or []) or "-",
        "fireSeconds": fire,
        "redeployed": stamps.get("redeployed") is not None,
        "controlFired": control.get("targetFired") if case.control else None,
        "controlP95": control.get("p95ByRoute") if case.control else None,
        # the soak drawn for the case (published with its verdict; none if not rolled out)
        "soakSeconds": (record.get("soak") or {}).get("seconds"),
        "seconds": round(seconds, 1),
        "mismatch": mismatch,
    }


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    return round(delta.total_seconds(), 1)


def error_row(case: Case, message: str, seconds: float) -> dict[str, Any]:
    return {
        "scenario": case.scenario.name,
        "patch": case.label,
        "expected": case.expected,
        "got": "error",
        "score": 0.0,
        "reason": "error",
        "failing": message.replace("\n", " ")[:80],
        "fireSeconds": None,
        "redeployed": False,
        "controlFired": None,
        "controlP95": None,
        "soakSeconds": None,
        "seconds": round(seconds, 1),
        "mismatch": message,
    }


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3f}" if key == "score" else f"{value:.1f}"
    return str(value).replace("|", "\\|")


COLUMNS = (
    ("patch", "patch"),
    ("expected", "expected"),
    ("got", "got"),
    ("score", "score"),
    ("reason", "reason"),
    ("failing", "failing signals"),
    ("fireSeconds", "fired after (s)"),
    ("controlFired", "control fired"),
    ("soakSeconds", "soak (s)"),
    ("seconds", "run (s)"),
)


PREAMBLE = """# Scenario validation

Every reference fix must pass; the empty patch and every decoy must fail for a behavioural
reason (never Inconclusive), the one a decoy's `# expect:` header names when it names one.
Each row is one real graded case: a real Prometheus, the real service builds, open-model
load on 127.0.0.1. A scenario's cases run on one warm session: the environment is set up
and injected once, the control window runs first, and each case is handed off, graded and
restored in turn, the next one handed off only after the alert fired again on the restored
regressed build. *fired after* is the time from the regressed build's swap (the injection,
or the restore before a later case) to the target alert firing; *control fired* is whether
the target alert fired on the healthy build under the same load during the control window
(it must not; the control window lasts as long as a fix is held, the window plus the
soak's upper bound, and no page may fire and the healthy build may not restart either);
under the table, the healthy build's highest p95 per route in the control window, the
load's and the prober's, shows how far below each latency page it sat (a quiet control is
no proof of headroom); *soak (s)* is the length of the hidden soak after the window drawn
for the case (published with its verdict; a decoy that fails earlier is not held to all
of it); *run (s)* is the case's own time (the first case's includes the setup);
*failing signals* are those that earned less than full credit (time_to_clear is partial on
every clear that is not instant, so a passing fix lists it too).
Each scenario's section is rewritten by `sreforge scenarios validate NAME --markdown
SCENARIOS.md`; decoys added since are graded with `--only decoys/x.patch` into a section of
their own under it ("NAME: cases added since"), which the next full validation replaces.
The run times depend on the machine and on what else it runs.
"""


def section(
    rows: list[dict[str, Any]], command: str, when: str, total_seconds: float | None = None
) -> str:
    """The body of one scenario's section: its table and mismatches."""
    bad = [r for r in rows if r["mismatch"]]
    took = "" if total_seconds is None else f", {total_seconds / 60:.1f} min in all"
    lines = [
        f"`{command}` ({when}): {len(rows)} runs{took}, {len(bad)} mismatches.",
        "",
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_cell(key, r[key]) for key, _ in COLUMNS) + " |")
    headroom = next((r["controlP95"] for r in rows if r.get("controlP95")), None)
    if headroom:
        lines += ["", headroom_line(headroom)]
    if bad:
        lines += ["", "Mismatches:", ""]
        lines += [f"- {r['patch']}: {r['mismatch']}" for r in bad]
    return "\n".join(lines)


def headroom_line(p95: dict[str, dict[str, float]]) -> str:
    """The healthy build's highest p95 per route in the control window, the load's and the
    prober's: how far below each latency page it sat (a quiet control proves no headroom)."""
    load, probe = p95.get("load") or {}, p95.get("probe") or {}

    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    parts = [
        f"{route} {cell(load.get(route))} / {cell(probe.get(route))}"
        for route in sorted({*load, *probe})
    ]
    return (
        "Healthy build in the control window, highest p95 per route in seconds (the load's "
        f"10 s windows / the prober's 15 s ones): {'; '.join(parts) or 'none readable'}."
    )


def when() -> str:
    """When and on what a validation ran: run times mean little without it."""
    load = os.getloadavg()[0]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{stamp}, {os.cpu_count()} CPUs, 1-minute load average {load:.1f} at the end"


def difficulty_table(scenarios: list[Scenario]) -> str:
    """A difficulty note per scenario, for reading a leaderboard by category: its family and
    substrate, where the causes sit in its history, what a blind revert of the newest
    commit does, and the signals an SRE would use (`sreforge scenarios list --markdown`)."""
    lines = [
        "Written by `sreforge scenarios list --markdown SCENARIOS.md` from each scenario.toml "
        "(`[history]`, `[difficulty]`); harness-internal, like root_cause.md.",
        "",
        "| scenario | family | substrate | category | cause commits | revert newest | signals |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scenarios:
        h = s.history
        causes = (
            ", ".join(c.patch.removeprefix("history/") for c in h.commits if c.cause) if h else "-"
        )
        revert = "-" if h is None else ("mends it" if h.revert_newest_fixes else "leaves it")
        signals = "; ".join(s.difficulty.signals) if s.difficulty else "-"
        lines.append(
            f"| {s.name} | {s.family} | {Path(s.service.source).name} | "
            f"{h.category if h else '-'} | {causes} | {revert} | {signals.replace('|', '/')} |"
        )
    return "\n".join(lines)


def write_markdown(
    path: Path,
    rows: list[dict[str, Any]],
    command: str,
    when: str,
    total_seconds: float | None = None,
    *,
    runtime: str | None = None,
    added: bool = False,
) -> None:
    """Rewrite the section of every scenario in `rows`, keeping the other scenarios' sections
    (`total_seconds`: how long the validation of one scenario took, when rows hold one).
    `runtime`: rows of another runtime than the local one, in sections of their own
    (`## <scenario> <runtime>`). `added`: cases added since the scenario's validation
    (`--only`), in a section of their own under it, which its next full validation drops."""
    for name in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == name]
        body = section(mine, command, when, total_seconds)
        heading = f"## {name}" if runtime is None else f"## {name} {runtime}"
        if added:
            write_section(path, f"{heading}{ADDED}", body, preamble=PREAMBLE, after=heading)
            continue
        write_section(path, heading, body, preamble=PREAMBLE)
        if runtime is None:
            remove_section(path, f"{heading}{ADDED}")
