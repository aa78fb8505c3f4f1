"""`judge.judge_record`: the RCA judge over a RunRecord and the RCA's text, no run directory.

The judge's HTTP client against a network double is tests/integration/test_judge.py; here its
one call out (`_ask`) answers from the test, so what is asked and what comes back is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sreforge import judge
from sreforge.api.record import RunRecord

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"
RECORD = ROOT / "tests" / "fixtures" / "runs" / "restore-simplecache" / "record.json"
ENV = {"RCA_JUDGE_URL": "http://127.0.0.1:9/v1", "RCA_JUDGE_MODEL": "judge-model"}
RCA = "The refactor removed the product cache; every page runs the review query (p95 2.3s)."
ANSWER = {
    "root_cause_correct": True,
    "evidence_grounded": True,
    "false_leads": False,
    "rationale": "names the removed cache and cites the latency",
}


def _record(agent_model: str | None = "model-under-test") -> RunRecord:
    """The real record, its scenario path pointed at this checkout's scenario."""
    record = RunRecord.model_validate_json(RECORD.read_bytes())
    return record.model_copy(
        update={
            "scenario": record.scenario.model_copy(update={"path": str(SCENARIO)}),
            "submission": record.submission.model_copy(update={"agent_model": agent_model}),
        }
    )


def test_judges_the_rca_against_the_scenarios_truth(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[list[dict[str, str]]] = []

    async def answer(_config: object, messages: list[dict[str, str]]) -> str:
        asked.append(messages)
        return json.dumps(ANSWER)

    monkeypatch.setattr(judge, "_ask", answer)
    monkeypatch.chdir(tmp_path)
    log: list[str] = []
    diagnosis = judge.judge_record(_record(), RCA, env=ENV, log=log.append)
    assert log == []
    assert diagnosis is not None
    assert diagnosis.run_id == _record().run_id
    assert diagnosis.judge_model == "judge-model"
    assert diagnosis.score == 1.0
    (messages,) = asked
    asked_text = "\n".join(m["content"] for m in messages)
    assert RCA in messages[-1]["content"]
    truth = (SCENARIO / "root_cause.md").read_text(encoding="utf-8").strip()
    assert truth in asked_text
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("rca", "agent_model", "env", "why"),
    [
        (RCA, None, {}, "no judge configured"),
        (RCA, "provider/Judge-Model", ENV, "model under test"),
        (None, None, ENV, "no RCA submitted"),
        (" \n", None, ENV, "RCA text is empty"),
        ("x" * (judge.MAX_RCA_BYTES + 1), None, ENV, "too large"),
    ],
)
def test_a_reason_not_to_judge_is_one_warning(
    monkeypatch: pytest.MonkeyPatch,
    rca: str | None,
    agent_model: str | None,
    env: dict[str, str],
    why: str,
) -> None:
    async def never(_config: object, _messages: object) -> str:
        raise AssertionError("the judge must not be asked")

    monkeypatch.setattr(judge, "_ask", never)
    log: list[str] = []
    assert judge.judge_record(_record(agent_model), rca, env=env, log=log.append) is None
    (line,) = log
    assert line.startswith(judge.WARNING_PREFIX)
    assert why in line


def test_a_missing_truth_is_a_warning_not_an_error() -> None:
    record = _record(None)
    elsewhere = record.model_copy(
        update={"scenario": record.scenario.model_copy(update={"path": "/nonexistent"})}
    )
    log: list[str] = []
    assert judge.judge_record(elsewhere, RCA, env=ENV, log=log.append) is None
    (line,) = log
    assert "cannot read the scenario's truth" in line
