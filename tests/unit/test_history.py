"""A scenario's release history: commits by several authors that together are the
regressed build, the agent's workspace built from them, and the revert-newest case."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sreforge import cli
from sreforge.api.scenario import Scenario, ScenarioError
from sreforge.runtime import ci, sources, workspace
from sreforge.scenarios import decoys, discover, fixes, load_scenario

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = discover(ROOT / "scenarios")
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _trees(scenario: Scenario, tmp: Path) -> tuple[Path, Path]:
    healthy, regressed = tmp / "healthy", tmp / "regressed"
    sources.scenario_trees(scenario, ROOT, healthy, regressed)
    return healthy, regressed


def _prepare(scenario: Scenario, healthy: Path, regressed: Path, ws: Path) -> None:
    workspace.prepare(
        healthy,
        regressed,
        ws,
        service=scenario.service.name,
        regression_patch="",
        history=workspace.history_of(scenario),
    )


def _log(ws: Path) -> list[str]:
    return subprocess.run(
        ["git", "log", "--format=%an <%ae>|%aI|%s"],
        cwd=ws,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


@pytest.mark.parametrize("scenario", CATALOGUE, ids=[s.name for s in CATALOGUE])
def test_the_workspace_history_is_the_scenarios_commits_and_makes_the_regressed_tree(
    scenario: Scenario, tmp_path: Path
) -> None:
    assert scenario.history is not None, "every scenario ships a release history"
    healthy, regressed = _trees(scenario, tmp_path)
    ws = tmp_path / "ws"
    commits = workspace.history_of(scenario)
    revs = workspace.prepare(
        healthy,
        regressed,
        ws,
        service=scenario.service.name,
        regression_patch=scenario.regression_path.read_text("utf-8"),
        history=commits,
        now=NOW,
    )
    log = _log(ws)
    assert len(log) == len(commits) + 1  # the release import, then each commit
    for line, commit in zip(log, reversed(commits), strict=False):
        author, when, subject = line.split("|", 2)
        assert author == f"{commit.author[0]} <{commit.author[1]}>"
        assert datetime.fromisoformat(when) == NOW - commit.age
        assert subject == workspace.commit_message(commit.patch, "x").splitlines()[0]
    assert log[-1].endswith(f"|release: {scenario.service.name} as deployed last week")
    assert len({line.split("|")[0] for line in log}) >= 2, "more than one author"
    assert ci.diff_trees(regressed, ws) == ""  # exactly the build that is running
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ws, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert revs["release"] == head


@pytest.mark.parametrize("scenario", CATALOGUE, ids=[s.name for s in CATALOGUE])
def test_revert_newest_is_a_case_of_the_kind_the_scenario_declares(
    scenario: Scenario, tmp_path: Path
) -> None:
    """fixes/revert-newest.patch when a blind revert of the newest commit mends it,
    decoys/revert-newest.patch when it does not; either way it is exactly that revert."""
    assert scenario.history is not None
    mine = fixes(scenario) if scenario.history.revert_newest_fixes else decoys(scenario)
    other = decoys(scenario) if scenario.history.revert_newest_fixes else fixes(scenario)
    assert "revert-newest.patch" in [p.name for p in mine]
    assert "revert-newest.patch" not in [p.name for p in other]
    revert = next(p for p in mine if p.name == "revert-newest.patch")
    healthy, regressed = _trees(scenario, tmp_path)
    ci.apply_patch(regressed, revert.read_text("utf-8"))
    before_newest = tmp_path / "before-newest"
    ci.copy_tree(healthy, before_newest)
    for commit in workspace.history_of(scenario)[:-1]:
        ci.apply_patch(before_newest, commit.patch)
    assert ci.diff_trees(before_newest, regressed) == ""


def test_at_least_three_scenarios_are_not_mended_by_reverting_the_newest_commit() -> None:
    blind = [s.name for s in CATALOGUE if s.history and not s.history.revert_newest_fixes]
    assert len(blind) >= 3, blind


def _scenario_copy(tmp: Path, name: str = "latency-cache-stampede") -> Path:
    dest = tmp / name
    shutil.copytree(ROOT / "scenarios" / name, dest)
    return dest


def test_a_history_that_does_not_apply_names_the_commit(tmp_path: Path) -> None:
    directory = _scenario_copy(tmp_path)
    newest = directory / "history" / "02-release-1.5.0.patch"
    newest.write_text(newest.read_text().replace('-__version__ = "1.4.0"', '-__version__ = "9"'))
    scenario = load_scenario(directory)
    healthy, regressed = _trees(load_scenario(ROOT / "scenarios" / scenario.name), tmp_path)
    with pytest.raises(ScenarioError, match=r"history commit 2 \(history/02-release-1.5.0.patch\)"):
        _prepare(scenario, healthy, regressed, tmp_path / "ws")


def test_a_history_that_is_not_the_regressed_build_names_the_files(tmp_path: Path) -> None:
    directory = _scenario_copy(tmp_path)
    toml = directory / "scenario.toml"
    text = toml.read_text()
    start = text.index('[[history.commits]]\npatch = "history/02-release-1.5.0.patch"')
    text = text[:start] + text[text.index("\n[difficulty]") :]  # the newest left out
    toml.write_text(text.replace("revert_newest_fixes = false", "revert_newest_fixes = true"))
    scenario = load_scenario(directory)
    healthy, regressed = _trees(scenario, tmp_path)
    with pytest.raises(ScenarioError, match=r"differ in .*catalog/__init__.py.*pyproject.toml"):
        _prepare(scenario, healthy, regressed, tmp_path / "ws")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("age_hours = 4", "age_hours = 400"), r"history: .*oldest first"),
        (('author = "Amara Okafor <amara.okafor@shop.example>"', 'author = "Amara"'), "author"),
        (("history/02-release-1.5.0.patch", "history/03-missing.patch"), "03-missing.patch"),
        # which commits are causes, consistently with what a blind revert does
        (
            ("revert_newest_fixes = false", "revert_newest_fixes = true"),
            "revert_newest_fixes = true, but the causes",
        ),
        (("cause = true\n", ""), "no commit is marked `cause = true`"),
    ],
)
def test_a_bad_history_is_refused_with_the_field(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    directory = _scenario_copy(tmp_path)
    toml = directory / "scenario.toml"
    assert edit[0] in toml.read_text()
    toml.write_text(toml.read_text().replace(*edit))
    with pytest.raises(ScenarioError, match=message) as err:
        load_scenario(directory)
    assert "history" in str(err.value)


def test_scenarios_list_shows_family_substrate_and_category(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["scenarios", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == {s.name for s in CATALOGUE}
    assert rows["compound-cache-and-index"].split()[1:3] == ["compound", "catalog"]
    assert rows["compound-cache-and-index"].endswith(
        "2 causes in 2 commits, under a harmless newer commit"
    )
    assert rows["errors-connection-pool-leak"].endswith("one cause, newest commit")
    assert cli.main(["scenarios", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert all(s["signals"] and s["category"] and s["substrate"] for s in listed)


def test_scenarios_list_writes_a_difficulty_note_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md = tmp_path / "SCENARIOS.md"
    md.write_text("# Scenario validation\n\n## latency-cache-stampede\n\nkept\n")
    assert cli.main(["scenarios", "list", "--markdown", str(md)]) == 0
    capsys.readouterr()
    text = md.read_text()
    assert "## latency-cache-stampede\n\nkept\n" in text  # other sections stay
    catalogue_part, classes_part = text.split("## Catalogue")[1].split("## Decoy classes")
    rows = [ln for ln in catalogue_part.splitlines() if ln.startswith("| ")][1:]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == [s.name for s in CATALOGUE]
    compound = next(r for r in rows if r.startswith("| compound-cache-and-index |"))
    assert "01-delisted-404.patch, 02-drop-page-cache.patch | leaves it |" in compound
    # and the decoy classes by scenario: a count per class, n/a where the service rules
    # one out (pricing: one user-facing route), with why under the table
    rows = [ln for ln in classes_part.splitlines() if ln.startswith("| ")][1:]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == [s.name for s in CATALOGUE]
    storm = next(r for r in rows if r.startswith("| configuration-retry-storm |"))
    assert storm.split(" | ")[2] == "n/a"
    assert "- configuration-retry-storm, fix-one-break-another: pricing serves one" in text


def test_a_regression_that_does_not_apply_is_refused_naming_the_patch(tmp_path: Path) -> None:
    here = tmp_path / "scenario"
    shutil.copytree(ROOT / "scenarios" / "latency-cache-stampede", here)
    regression = here / "regression.patch"
    text = regression.read_text("utf-8")
    # the hunk's removed lines no longer match the healthy tree
    broken = text.replace("\n-", "\n-# not in the tree ", 1)
    assert broken != text
    regression.write_text(broken, encoding="utf-8")
    scenario = load_scenario(here)
    with pytest.raises(sources.SourceError) as err:
        sources.scenario_trees(scenario, ROOT, tmp_path / "healthy", tmp_path / "regressed")
    assert str(regression) in str(err.value)
