"""The RCA judge's diagnosis of a graded Submission, written to its `status.diagnosis`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from sreforge import judge
from sreforge.api.resources import SUBMISSION_PLURAL
from sreforge.api.scenario import Scenario
from sreforge.api.verdict import Verdict
from sreforge.runtime.kube.client import Kube


def diagnose(  # noqa: PLR0917 (the Submission, its verdict, its run)
    kube: Kube, ns: str, sub: str, verdict: Verdict, run_id: str, scenario: Scenario, log: Any
) -> None:
    """status.diagnosis by the RCA judge when spec.rca is set and RCA_JUDGE_* configured."""
    if not os.environ.get("RCA_JUDGE_URL") or not os.environ.get("RCA_JUDGE_MODEL"):
        return
    obj = kube.get_submission(ns, sub)
    rca = ((obj or {}).get("spec") or {}).get("rca")
    if not rca:
        return
    agent_model = ((obj or {}).get("spec") or {}).get("agentModel")
    with tempfile.TemporaryDirectory(prefix="sreforge-judge-") as tmp:
        run_dir = Path(tmp)
        (run_dir / "rca.txt").write_text(rca, encoding="utf-8")
        record = {
            "runId": run_id,
            "scenario": {"path": str(scenario.directory)},
            "submission": {"agentModel": agent_model, "rca": "rca.txt"},
            "passed": verdict.passed,
            "score": verdict.score,
        }
        (run_dir / "record.json").write_text(json.dumps(record), encoding="utf-8")
        diagnosis = judge.judge_run(run_dir, log=log.warning)
    if diagnosis is not None:
        kube.patch_status(
            SUBMISSION_PLURAL,
            ns,
            sub,
            {"diagnosis": diagnosis.model_dump(mode="json", by_alias=True)},
        )
