"""The agent's workspace: the regressed tree as a git repository with a deploy history.

A real on-call engineer opens the service's repository and finds the release that is
running now on top of the one that ran before. The hand-off gives the agent the same: the
healthy tree committed as the previous release, then the release's commits. A scenario
with a `[history]` has a series of them, by several authors, the regression among
harmless ones (api.scenario.History); one without gets a single commit, with the message
`regression.patch` carries in its header (what its author would have written, not the
root cause). Either way the repository's tree is exactly the regressed build's, or the
workspace is refused. `git log` and `git show` of it are the MCP server's deploy history.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sreforge.api.scenario import Scenario, ScenarioError
from sreforge.runtime import ci

# Who committed what: two teammates, the previous release a few days before the latest.
BASELINE_AUTHOR = ("Priya Raman", "priya.raman@shop.example")
RELEASE_AUTHOR = ("Jonas Weber", "jonas.weber@shop.example")
BASELINE_MESSAGE = "release: {service} as deployed last week\n"
FALLBACK_MESSAGE = "{service}: update\n"
BASELINE_AGE = timedelta(days=6, hours=3)


@dataclass(frozen=True)
class Commit:
    """A commit of the release: its patch (the `#` header is the message), its author
    (name, email) and its age at the hand-off."""

    patch: str
    author: tuple[str, str]
    age: timedelta
    name: str = ""  # where the patch came from, for messages


def history_of(scenario: Scenario) -> list[Commit]:
    """The scenario's release history as commits, oldest first ([] when it has none)."""
    if scenario.history is None:
        return []
    commits = []
    for spec, path in zip(scenario.history.commits, scenario.history_paths, strict=True):
        name, _, email = spec.author.partition(" <")
        commits.append(
            Commit(
                patch=path.read_text("utf-8"),
                author=(name, email.removesuffix(">")),
                age=timedelta(hours=spec.age_hours),
                name=spec.patch,
            )
        )
    return commits


def commit_message(patch: str, service: str) -> str:
    """The commit message in a patch's leading `#` header (`expect:` and `class:` lines,
    the catalogue's, dropped)."""
    lines: list[str] = []
    for line in patch.splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].removeprefix(" ")
        if text.startswith(("expect:", "class:")):
            continue
        lines.append(text)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n" if lines else FALLBACK_MESSAGE.format(service=service)


def _git(tree: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**_clean_env(), **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {tree}: {done.stderr.strip()}")
    return done.stdout


def _clean_env() -> dict[str, str]:
    """No inherited git identity or config: the history is the scenario's, not this host's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def _commit(tree: Path, message: str, author: tuple[str, str], when: datetime) -> None:
    name, email = author
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S+0000")
    _git(tree, "add", "-A")
    _git(
        tree,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        message,
        env={
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": stamp,
        },
    )


def prepare(
    healthy: Path,
    regressed: Path,
    workspace: Path,
    *,
    service: str,
    regression_patch: str,
    history: Sequence[Commit] = (),
    now: datetime | None = None,
) -> dict[str, str]:
    """Make `workspace` the regressed tree as a repository: the previous release, then the
    release's commits (`history`, or the regression as one). Returns the short commit ids:
    {"baseline": ..., "release": ...} (the release is the newest commit).

    Raises ScenarioError naming the commit when a history patch does not apply, or when
    the history does not make exactly the regressed tree."""
    now = now or datetime.now(tz=UTC)
    ci.copy_tree(healthy, workspace)
    _git(workspace, "init", "-q")
    oldest = max((c.age for c in history), default=timedelta(0))
    _commit(
        workspace,
        BASELINE_MESSAGE.format(service=service),
        BASELINE_AUTHOR,
        now - max(BASELINE_AGE, oldest + timedelta(days=1)),
    )
    baseline = _git(workspace, "rev-parse", "--short", "HEAD").strip()
    if history:
        for i, commit in enumerate(history):
            try:
                ci.apply_patch(workspace, commit.patch)
            except ci.PatchRejected as exc:
                raise ScenarioError(
                    f"history commit {i + 1} ({commit.name or 'unnamed'}) does not apply "
                    f"on the ones before it: {exc}"
                ) from exc
            _commit(
                workspace, commit_message(commit.patch, service), commit.author, now - commit.age
            )
        left = ci.diff_trees(regressed, workspace)
        if left.strip():
            changed = sorted(
                {line.split()[-1] for line in left.splitlines() if line.startswith("diff --git")}
            )
            raise ScenarioError(
                "the history does not make the regressed tree (healthy + regression.patch): "
                f"they differ in {', '.join(changed)}"
            )
    else:
        _replace_tree(workspace, regressed)
        _commit(
            workspace,
            commit_message(regression_patch, service),
            RELEASE_AUTHOR,
            now - timedelta(minutes=47),
        )
    release = _git(workspace, "rev-parse", "--short", "HEAD").strip()
    return {"baseline": baseline, "release": release}


def _replace_tree(workspace: Path, tree: Path) -> None:
    """The workspace's files become `tree`'s; .git stays."""
    for entry in workspace.iterdir():
        if entry.name == ".git":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in tree.iterdir():
        target = workspace / entry.name
        if entry.is_dir() and not entry.is_symlink():
            ci.copy_tree(entry, target)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
