"""What an agent is handed never holds the harness-internal root cause, decoys or fixes.

The agent here is a real subprocess (tests/agents/inventory_agent.py, a scripted stand-in,
not an AI) started by the local runtime's own hand-off (`LocalRun._obtain_submission`,
the code `sreforge run --agent` uses) with the real regressed workspace and brief; it lists
its workspace recursively with every file's text. The full-loop version of this check
runs inside tests/integration/test_faults.py (load generator death), which hands off the
same way during a graded run.

Scope: the workspace, the brief and the SREFORGE_* environment. That the agent can reach
nothing else (the repository, the run directory, the harness's processes) is
tests/integration/test_agent_sandbox.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability_cases import case
from tests.runs import AGENTS, inventory_from_log

from sreforge.runtime.local import LocalRun, RunOptions
from sreforge.scenarios import fixes, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
AGENT = AGENTS / "inventory_agent.py"


def _internal_sentences() -> list[str]:
    """Sentences of every scenario's root_cause.md that would betray it if seen."""
    found = []
    for rc in SCENARIOS.glob("*/root_cause.md"):
        text = " ".join(rc.read_text(encoding="utf-8").split())
        found += [s.strip() for s in text.replace("- ", ". ").split(". ") if len(s.strip()) > 40]
    return found


def _internal_names() -> set[str]:
    names = {"root_cause.md", "decoys", "fixes"}
    for d in SCENARIOS.iterdir():
        names |= {p.name for p in d.glob("decoys/*.patch")}
        names |= {p.name for p in d.glob("fixes/*.patch")}
    return names


def assert_nothing_internal(seen: dict[str, object]) -> None:
    """`seen` is inventory_agent.py's record: workspace listing, brief, environment."""
    workspace = seen["workspace"]
    assert isinstance(workspace, dict)
    assert workspace, "the agent saw an empty workspace"
    names = _internal_names()
    leaked = [p for p in workspace if set(Path(p.rstrip("/")).parts) & names]
    assert not leaked, leaked
    texts = [*workspace.values(), seen["brief"], json.dumps(seen["env"])]
    sentences = _internal_sentences()
    assert sentences, "no root-cause sentences to look for"
    for sentence in sentences:
        for text in texts:
            assert isinstance(text, str)
            assert " ".join(text.split()).find(sentence) < 0, sentence
    for text in texts:
        assert isinstance(text, str)
        assert "harness-internal" not in text
        # the soak's range and length are the harness's: never in the hand-off
        assert "soak" not in text.lower()
    env = seen["env"]
    assert isinstance(env, dict)
    assert not any(str(SCENARIOS) in str(v) for v in env.values()), env


def test_agent_workspace_and_brief_hold_nothing_harness_internal(tmp_path: Path) -> None:
    with case("security: agent workspace and brief hold nothing internal"):
        scenario = load_scenario(SCENARIOS / "latency-cache-stampede")
        fix = fixes(scenario)[0]
        run = LocalRun(
            scenario,
            ROOT,
            RunOptions(
                runs_dir=tmp_path / "runs",
                agent=f"python3 {AGENT} {fix}",
                agent_shares=[AGENTS, fix],
                live=False,
                progress=lambda _line: None,
            ),
        )
        run.env.prepare_trees()
        (run.dir / "logs").mkdir()  # made by the first process a full run starts
        run._obtain_submission()
        seen = inventory_from_log(run.dir)
        assert_nothing_internal(seen)
        # the agent did see the real thing: the regressed source and the brief
        assert "catalog/db.py" in seen["workspace"]
        assert seen["brief"] == scenario.brief_path.read_text(encoding="utf-8")
        # ... and its edit became the submission, without the inventory or rca.txt in it
        patch = (run.dir / "submission.patch").read_text(encoding="utf-8")
        assert "catalog/db.py" in patch
        assert "rca.txt" not in patch
