"""What the catalogue proof asks of each scenario, and how a run's record is judged."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sreforge import catalogue
from sreforge.api.scenario import Scenario
from sreforge.api.verdict import Reason
from sreforge.runtime import sources
from sreforge.scenarios import decoys, discover, fixes, load_scenario

ROOT = Path(__file__).resolve().parents[2]
STAMPEDE = load_scenario(ROOT / "scenarios" / "latency-cache-stampede")


def test_cases_fixes_then_empty_then_decoys_with_the_fast_subset_marked() -> None:
    cs = catalogue.cases(STAMPEDE)
    assert [c.expected for c in cs] == ["pass"] * len(fixes(STAMPEDE)) + ["fail"] * (
        1 + len(decoys(STAMPEDE))
    )
    assert [c.label for c in cs if c.fast] == [
        f"fixes/{fixes(STAMPEDE)[0].name}",
        "empty",
        f"decoys/{decoys(STAMPEDE)[0].name}",
    ]
    assert [c.control for c in cs].count(True) == 1
    assert cs[0].control


def test_decoy_header_names_the_reasons_it_must_fail_with() -> None:
    by_name = {c.label: c for c in catalogue.cases(STAMPEDE)}
    assert by_name["decoys/warm-once-read-through.patch"].expected_reasons() == {
        Reason.REFIRED,
        Reason.NOT_CLEARED,
    }
    assert by_name["decoys/break-tests.patch"].expected_reasons() == {Reason.CI_RED}
    assert by_name["empty"].expected_reasons() == {Reason.NOT_CLEARED, Reason.REFIRED}


def test_decoy_without_header_accepts_any_behavioural_failure(tmp_path: Path) -> None:
    patch = tmp_path / "d.patch"
    patch.write_text("# tweak\n\ndiff --git a/x b/x\n")
    case = catalogue.Case(STAMPEDE, patch, "fail")
    assert case.expected_reasons() is None
    assert catalogue.judged(case, {"passed": False, "reason": "Refired"}) == ("fail", None)


def record(passed: bool, reason: str, control: bool | None = None) -> dict[str, object]:
    out: dict[str, object] = {"passed": passed, "reason": reason, "message": "m"}
    if control is not None:
        out["control"] = {"seconds": 15, "targetFired": control, "pagesFired": [], "restarts": 0}
    return out


@pytest.mark.parametrize(
    ("label", "rec", "problem"),
    [
        ("fix", record(True, "Passed", control=False), None),
        ("fix", record(False, "NotCleared", control=False), "expected pass"),
        ("fix", record(True, "Passed", control=True), "control window"),
        ("fix", record(True, "Passed"), "control window"),  # a control that never ran
        # the healthy build must hold as long as a fix is held: no page, no restart
        (
            "fix",
            {**record(True, "Passed"), "control": {"targetFired": False, "pagesFired": ["P"]}},
            "not quiet",
        ),
        (
            "fix",
            {**record(True, "Passed"), "control": {"targetFired": False, "restarts": 1}},
            "not quiet",
        ),
        (  # restarts that could not be read are no proof of none
            "fix",
            {**record(True, "Passed"), "control": {"targetFired": False, "restarts": None}},
            "not quiet",
        ),
        ("warm-once-read-through", record(False, "Refired"), None),
        ("warm-once-read-through", record(False, "CIRed"), "reason CIRed"),
        ("warm-once-read-through", record(False, "Inconclusive"), "failed only as Inconclusive"),
        ("warm-once-read-through", record(True, "Passed"), "expected fail"),
        ("empty", record(False, "AlertNeverFired"), "failed only as AlertNeverFired"),
    ],
)
def test_judged_names_every_mismatch(
    label: str, rec: dict[str, object], problem: str | None
) -> None:
    cs = {c.label.split("/")[-1].removesuffix(".patch"): c for c in catalogue.cases(STAMPEDE)}
    case = cs[fixes(STAMPEDE)[0].stem] if label == "fix" else cs[label]
    _, mismatch = catalogue.judged(case, rec)
    if problem is None:
        assert mismatch is None
    else:
        assert mismatch is not None
        assert problem in mismatch


def test_a_reason_mismatch_says_what_the_verdict_said() -> None:
    """A decoy that fails for a reason its header does not list is read from the table
    alone: the mismatch carries the verdict's message (on a cluster, the Verified
    condition's), as the other mismatches do."""
    case = next(
        c for c in catalogue.cases(STAMPEDE) if c.label == "decoys/warm-once-read-through.patch"
    )
    said = "sustained_clear: probe-failing at +16.0s, in the 30s window"
    _, mismatch = catalogue.judged(case, {"passed": False, "reason": "CIRed", "message": said})
    assert mismatch is not None
    assert mismatch.startswith("reason CIRed, expected one of ")
    assert mismatch.endswith(said)


def test_markdown_sections_per_scenario_keep_the_others(tmp_path: Path) -> None:
    cs = catalogue.cases(STAMPEDE)
    good = catalogue.row(
        cs[0],
        {
            "passed": True,
            "reason": "Passed",
            "score": 0.97,
            "control": {"seconds": 15, "targetFired": False, "restarts": 0},
            "timestamps": {
                "injected": "2026-12-02T20:03:46+00:00",
                "fired": "2026-12-02T20:03:54.5+00:00",
                "redeployed": "2026-12-02T20:03:57+00:00",
            },
        },
        80.0,
    )
    bad = catalogue.error_row(cs[-1], "service did not start", 3.0)
    assert good["fireSeconds"] == 8.5
    assert good["controlFired"] is False
    md = tmp_path / "SCENARIOS.md"
    other = {**good, "scenario": "other-scenario"}
    catalogue.write_markdown(md, [other], "cmd-1", "then")
    catalogue.write_markdown(md, [good, bad], "cmd-2", "now")
    text = md.read_text()
    assert text.startswith("# Scenario validation")
    mine = text.split("## latency-cache-stampede")[1]
    assert "`cmd-2` (now): 2 runs, 1 mismatches." in mine
    assert mine.count("\n| fixes/") + mine.count("\n| decoys/") == 2
    assert "| 8.5 |" in mine
    assert "service did not start" in mine.split("Mismatches:")[1]
    assert "`cmd-1` (then): 1 runs, 0 mismatches." in text.split("## other-scenario")[1]
    catalogue.write_markdown(md, [good], "cmd-3", "later")  # rewriting keeps one section
    assert md.read_text().count("## latency-cache-stampede") == 1


def test_added_cases_get_a_section_under_the_scenarios_until_its_next_full_validation(
    tmp_path: Path,
) -> None:
    cs = catalogue.cases(STAMPEDE)
    full = catalogue.error_row(cs[0], "x", 1.0)
    new = catalogue.error_row(cs[-1], "y", 2.0)
    other = {**full, "scenario": "other-scenario"}
    md = tmp_path / "SCENARIOS.md"
    catalogue.write_markdown(md, [full], "full-1", "then")
    catalogue.write_markdown(md, [other], "other", "then")
    catalogue.write_markdown(md, [new], "only-1", "now", added=True)
    heads = [ln for ln in md.read_text().splitlines() if ln.startswith("## ")]
    added = f"## latency-cache-stampede{catalogue.ADDED}"
    # right under the scenario's own section, not after the other scenario's
    assert heads == ["## latency-cache-stampede", added, "## other-scenario"]
    assert "`only-1` (now): 1 runs" in md.read_text().split(added)[1]
    catalogue.write_markdown(md, [new], "only-2", "later", added=True)
    assert md.read_text().count(added) == 1
    assert "`only-2`" in md.read_text()
    assert "`only-1`" not in md.read_text()
    # the next full validation grades every case: the added section goes
    catalogue.write_markdown(md, [full, new], "full-2", "last")
    heads = [ln for ln in md.read_text().splitlines() if ln.startswith("## ")]
    assert heads == ["## latency-cache-stampede", "## other-scenario"]


CATALOGUE = discover(ROOT / "scenarios")


@pytest.mark.parametrize("scenario", CATALOGUE, ids=[s.name for s in CATALOGUE])
def test_every_scenario_has_a_decoy_of_every_required_class(scenario: Scenario) -> None:
    """Issue "Grading that cannot be gamed": sniffing, fix one and break another, gives way
    after the window, time bomb and fabricated answers, in every scenario; every decoy
    names its class (one the catalogue knows)."""
    have: set[str] = set()
    for patch in decoys(scenario):
        names = catalogue.decoy_classes(patch)
        assert names, f"{patch}: no '# class:' line in its header"
        have.update(names)
    ruled_out = scenario.decoys.not_applicable
    assert not (have & set(ruled_out)), f"{scenario.name}: a class it rules out has a decoy"
    missing = [c for c in catalogue.REQUIRED_CLASSES if c not in have | set(ruled_out)]
    assert not missing, f"{scenario.name} has no decoy of class {', '.join(missing)}"


def test_a_decoy_naming_an_unknown_class_is_refused_with_file_and_names(tmp_path: Path) -> None:
    patch = tmp_path / "d.patch"
    patch.write_text("# tweak\n#\n# class: sniffing, sneaky\n\ndiff --git a/x b/x\n")
    with pytest.raises(ValueError, match=r"d\.patch: '# class:' names sneaky; known classes"):
        catalogue.decoy_classes(patch)
    patch.write_text("# tweak\n# class:\n\ndiff --git a/x b/x\n# class: time-bomb\n")
    with pytest.raises(ValueError, match="names nothing"):  # the header's line, not the diff's
        catalogue.decoy_classes(patch)


def test_validate_only_an_unknown_case_is_refused_naming_the_cases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sreforge import cli  # noqa: PLC0415

    code = cli.main(["scenarios", "validate", "latency-cache-stampede", "--only", "nope"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR
    assert "--only nope: no such case of latency-cache-stampede" in err
    assert "decoys/warm-once-read-through.patch" in err
    code = cli.main(
        ["scenarios", "validate", "latency-cache-stampede", "--only", "empty", "--runtime", "kube"]
    )
    assert code == cli.EXIT_ERROR
    assert "--only grades local cases" in capsys.readouterr().err


def test_the_control_windows_p95_per_route_is_printed_under_the_table(tmp_path: Path) -> None:
    cs = catalogue.cases(STAMPEDE)
    control = {
        "seconds": 480,
        "targetFired": False,
        "p95ByRoute": {"load": {"product": 0.048, "search": 0.21}, "probe": {"product": 0.05}},
    }
    first = catalogue.row(cs[0], {"passed": True, "reason": "Passed", "control": control}, 1.0)
    # only the case that ran the control carries it
    later = catalogue.row(cs[1], {"passed": True, "reason": "Passed", "control": control}, 1.0)
    assert first["controlP95"] == control["p95ByRoute"]
    assert later["controlP95"] is None
    md = tmp_path / "SCENARIOS.md"
    catalogue.write_markdown(md, [first, later], "cmd", "now")
    line = next(x for x in md.read_text().splitlines() if x.startswith("Healthy build"))
    assert line.endswith("product 0.048 / 0.050; search 0.210 / -.")
    # an older record without the figures writes the table alone
    old = {**first, "controlP95": None}
    catalogue.write_markdown(md, [old], "cmd", "now")
    assert "Healthy build" not in md.read_text()


@pytest.mark.parametrize("scenario", CATALOGUE, ids=[s.name for s in CATALOGUE])
def test_every_patch_applies_to_the_regressed_tree(scenario: Scenario, tmp_path: Path) -> None:
    """A fix or decoy that no longer applies would fail as PatchRejected and prove nothing."""
    tree = tmp_path / "tree"
    sources.copy_healthy(scenario.source_path(ROOT), tree)  # a fetched service's too
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    subprocess.run(["git", "apply", str(scenario.regression_path)], cwd=tree, env=env, check=True)
    assert len(fixes(scenario)) >= 2
    assert len(decoys(scenario)) >= 3
    for patch in fixes(scenario) + decoys(scenario):
        res = subprocess.run(
            ["git", "apply", "--check", str(patch)],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, f"{patch}: {res.stderr}"
