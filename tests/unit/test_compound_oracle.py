"""The compound oracle: sub-oracles behind one contract, weighted into one Verdict.

v1 weighs mitigate alone: the Verdict is exactly the mitigation sub-oracle's own answer
(property-tested on random observation timelines). A diagnose sub-oracle joins by
configuration alone, and stays off by default.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.hostile_values import reproducible

from sreforge import oracle
from sreforge.api import AlertSample, CIResult, CIStatus, LoadStats, Reason, SignalName, VerifySpec
from sreforge.api.diagnosis import Diagnosis, diagnosis_score
from sreforge.api.scenario import OracleWeights, Weights
from sreforge.oracle import DiagnosisOracle, MitigationOracle, SubVerdict, VerifyObservations

ROOT = Path(__file__).resolve().parents[2]
TARGET = "CatalogLatencyHigh"
OTHERS = ("CatalogErrorRateHigh", "CatalogDown")
T0 = 1_000.0
GOOD = LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.0, success_ratio=1.0)
LOADS = [
    GOOD,
    GOOD,
    GOOD,
    GOOD,
    None,
    LoadStats(target_rate=50, achieved_rate=20, dropped_ratio=0.0, success_ratio=1.0),
    LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.3, success_ratio=1.0),
    LoadStats(target_rate=50, achieved_rate=50, dropped_ratio=0.0, success_ratio=None),
    LoadStats(target_rate=0, achieved_rate=0, dropped_ratio=0.0, success_ratio=1.0),
]
VERIFY = VerifySpec(sustain_seconds=30, clear_budget_seconds=60)
MIXED = VERIFY.model_copy(update={"oracles": OracleWeights(mitigate=0.8, diagnose=0.2)})


def diagnosis(
    root_cause: bool = True, evidence: bool = False, false_leads: bool = False
) -> Diagnosis:
    answer = {
        "root_cause_correct": root_cause,
        "evidence_grounded": evidence,
        "false_leads": false_leads,
    }
    return Diagnosis(
        **answer,
        rationale="Names the removed cache.",
        score=diagnosis_score(**answer),
        judge_model="judge-1",
        judged_at="2025-01-31T12:00:00Z",
        run_id="r1",
    )


def sample(t: float, firing: Collection[str] | None = (), **kw: Any) -> AlertSample:
    return AlertSample.model_validate(
        {
            "t": T0 + t,
            "firing": None if firing is None else frozenset(firing),
            "target_series_present": True,
            "service_up": True,
            "load": GOOD,
            **kw,
        }
    )


def clean_fix(d: Diagnosis | None = None, ci: CIStatus = CIStatus.GREEN) -> VerifyObservations:
    """Cleared 12 s after the redeploy and held: the mitigation alone scores 0.98."""
    return VerifyObservations(
        target_alert=TARGET,
        ci=CIResult(status=ci, reason="ok"),
        redeployed_at=T0,
        active_before_redeploy=frozenset({TARGET}),
        samples=[sample(t, {TARGET} if t < 12 else set()) for t in range(44)],
        diagnosis=d,
    )


# ---------------------------------------------------------------- random timelines
# What one sample may say, besides its time and whether the target alert is still firing
# from before the fix: mostly clear, sometimes a refire, Prometheus unreachable, the service
# or series gone, or the load not delivered; other alerts firing or pending now and then.
KINDS: list[dict[str, Any]] = [
    *[{}] * 30,
    {"firing": {TARGET}},
    {"firing": None},
    {"service_up": False},
    {"target_series_present": False},
    *({"load": load} for load in LOADS[4:]),
    {"firing": {OTHERS[0]}},
    {"firing": set(OTHERS)},
    {"pending": frozenset({OTHERS[1]})},
]
CONTENTION = [
    {},
    {"outside_cpu": 0.05, "cpu_wait": 0.1},
    {"outside_cpu": 0.6, "cpu_wait": 1.5},
    {"outside_cpu": 0.25, "cpu_wait": 0.5},  # at the bars: not starved
    {"outside_cpu": 0.9, "cpu_wait": 0.2},
]


@st.composite
def timelines(draw: st.DrawFn) -> VerifyObservations:
    """A run's observations: a target alert that may clear, flap, vanish or go unobserved,
    other alerts, load that may not be delivered, holes, and contention."""
    start = -draw(st.sampled_from([0.0, 0.0, 3.0, 10.0]))
    clear_at = draw(st.sampled_from([0.0, 5.0, 5.0, 12.0, 12.0, 40.0, 500.0]))
    length = draw(st.sampled_from([0, 5, *range(20, 101)]))
    steps = draw(
        st.lists(
            st.sampled_from([1.0] * 30 + [0.5, 2.0, 7.0, 15.0]), min_size=length, max_size=length
        )
    )
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=len(steps), max_size=len(steps)))
    contention = draw(st.sampled_from(CONTENTION))
    samples, t = [], start
    for step, kind in zip(steps, kinds, strict=True):
        t += step
        firing = kind.get("firing", set())
        if firing is not None and t < clear_at:
            firing = {*firing, TARGET}
        samples.append(sample(t, **{**kind, "firing": firing}, **contention))
    return VerifyObservations(
        target_alert=TARGET,
        ci=CIResult(
            status=draw(st.sampled_from([CIStatus.GREEN] * 9 + list(CIStatus))), reason="ci said"
        ),
        redeployed_at=draw(st.sampled_from([T0] * 7 + [None])),
        active_before_redeploy=frozenset(
            draw(st.sets(st.sampled_from((TARGET, *OTHERS)), max_size=3))
        ),
        samples=draw(st.permutations(samples)) if draw(st.booleans()) else samples,
    )


@st.composite
def verify_specs(draw: st.DrawFn) -> VerifySpec:
    """Random windows, bar and mitigation weights; the default oracles (mitigate alone)."""
    parts = [draw(st.integers(1, 20)) for _ in range(5)]
    names = list(Weights.model_fields)
    weights = Weights(**{n: p / sum(parts) for n, p in zip(names, parts, strict=True)})
    return VerifySpec(
        pass_threshold=draw(st.sampled_from([0.0, 0.5, 0.85, 0.9, 1.0])),
        sustain_seconds=draw(st.integers(1, 45)),
        clear_budget_seconds=draw(st.integers(1, 90)),
        sample_interval_seconds=draw(st.sampled_from([1.0, 1.0, 3.0, 0.5])),
        weights=weights if draw(st.booleans()) else Weights(),
    )


@reproducible(400)
@given(obs=timelines(), verify=verify_specs())
def test_the_v1_compound_is_the_mitigation_sub_oracle_alone(
    obs: VerifyObservations, verify: VerifySpec
) -> None:
    assert [o.name for _, o in oracle.configured(verify)] == ["mitigate"]
    own = MitigationOracle(verify).evaluate(obs)
    v = oracle.evaluate(obs, verify)
    # its signals, weights bit for bit, its score and what it saw of the fix
    assert v.signals == own.signals
    assert v.score == own.score
    assert (v.time_to_clear_seconds, v.cleared_at, v.new_alerts) == (
        own.time_to_clear_seconds,
        own.cleared_at,
        own.new_alerts,
    )
    assert v.pass_threshold == verify.pass_threshold
    # its own reason and message: an objection, else the pass bar on its own score
    if own.reason is None and own.score >= verify.pass_threshold:
        assert (v.passed, v.reason, v.message) == (True, Reason.PASSED, own.message)
        return
    assert not v.passed
    reason = own.reason or own.shortfall
    assert reason is not None
    message = (
        own.message
        if own.reason
        else f"score {own.score:.3f} is below the pass bar {verify.pass_threshold:.2f}"
    )
    if reason in oracle.BEHAVIOURAL_FAILURES and own.excuse:
        assert v.reason is Reason.INCONCLUSIVE
        assert v.message == f"{reason.value} while {own.excuse} [{message}]"
    else:
        assert (v.reason, v.message) == (reason, message)


@reproducible(200)
@given(
    obs=timelines(),
    weight=st.sampled_from([0.5, 0.7, 0.8, 0.95]),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_a_weighted_compound_sums_its_sub_oracles(
    obs: VerifyObservations, weight: float, flags: tuple[bool, bool, bool]
) -> None:
    verify = VERIFY.model_copy(
        update={"oracles": OracleWeights(mitigate=weight, diagnose=1 - weight)}
    )
    obs = obs.model_copy(update={"diagnosis": diagnosis(*flags)})
    mit = MitigationOracle(verify).evaluate(obs)
    diag = DiagnosisOracle().evaluate(obs)
    v = oracle.evaluate(obs, verify)
    assert [s.name for s in v.signals] == [s.name for s in (*mit.signals, *diag.signals)]
    assert v.score == round(sum(s.points for s in v.signals), 4)
    assert v.score == pytest.approx(weight * mit.score + (1 - weight) * diag.score, abs=1e-4)
    assert sum(s.weight for s in v.signals) == pytest.approx(1.0)
    if mit.reason is not None:  # the gate's objection stands whatever the diagnosis
        assert not v.passed
        assert v.reason in {mit.reason, Reason.INCONCLUSIVE}
    assert v.passed == (mit.reason is None and v.score >= verify.pass_threshold)


# ---------------------------------------------------------------- the contract, shown
def test_a_diagnose_sub_oracle_joins_by_configuration_alone() -> None:
    # mitigation 0.98 (as in test_oracle), diagnosis 0.7 (root cause, no evidence, no leads)
    v = oracle.evaluate(clean_fix(diagnosis()), MIXED)
    assert v.passed
    assert v.reason is Reason.PASSED
    assert v.score == pytest.approx(0.8 * 0.98 + 0.2 * 0.7)
    assert v.signal(SignalName.ROOT_CAUSE_CORRECT).value is True
    assert v.signal(SignalName.ROOT_CAUSE_CORRECT).weight == pytest.approx(0.2 * 0.6)
    assert v.signal(SignalName.EVIDENCE_GROUNDED).credit == 0.0
    assert v.signal(SignalName.NO_FALSE_LEADS).points == pytest.approx(0.2 * 0.1)
    assert v.signal(SignalName.CI_GREEN).weight == pytest.approx(0.8 * 0.25)
    assert v.message == "the fix held under load; the RCA judge (judge-1) scored the diagnosis 0.7"
    assert v.failing_signals == ["time_to_clear", "evidence_grounded"]
    # the mitigation's own answer does not depend on who else is weighed
    assert MitigationOracle(MIXED).evaluate(clean_fix()) == MitigationOracle(VERIFY).evaluate(
        clean_fix()
    )


def test_a_poor_diagnosis_costs_its_weight_and_the_bar_decides() -> None:
    v = oracle.evaluate(clean_fix(diagnosis(False, False, True)), MIXED)
    assert v.score == pytest.approx(0.8 * 0.98)
    assert not v.passed
    assert v.reason is Reason.NOT_CLEARED  # the mitigation's shortfall: the bar was missed
    assert v.message == "score 0.784 is below the pass bar 0.85"


def test_the_gate_objects_first_and_no_diagnosis_is_inconclusive() -> None:
    red = oracle.evaluate(clean_fix(diagnosis(), ci=CIStatus.RED), MIXED)
    assert (red.passed, red.reason) == (False, Reason.CI_RED)
    missing = oracle.evaluate(clean_fix(None), MIXED)
    assert (missing.passed, missing.reason) == (False, Reason.INCONCLUSIVE)
    assert "RCA judge did not grade" in missing.message
    assert missing.signal(SignalName.ROOT_CAUSE_CORRECT).value is None


def test_diagnosis_is_off_by_default_and_never_inside_the_verdict() -> None:
    assert VerifySpec().oracles == OracleWeights(mitigate=1.0, diagnose=0.0)
    judged = oracle.evaluate(clean_fix(diagnosis(False, False, True)), VERIFY)
    assert judged == oracle.evaluate(clean_fix(None), VERIFY)
    assert {s.name for s in judged.signals} == {
        SignalName.CI_GREEN,
        SignalName.ALERT_CLEARED,
        SignalName.SUSTAINED_CLEAR,
        SignalName.TIME_TO_CLEAR,
        SignalName.NO_NEW_ALERTS,
    }
    assert judged.score == pytest.approx(0.98)


@pytest.mark.parametrize("flags", [(a, b, c) for a in (1, 0) for b in (1, 0) for c in (1, 0)])
def test_the_diagnose_sub_oracle_scores_as_the_diagnosis_does(flags: tuple[int, ...]) -> None:
    d = diagnosis(*map(bool, flags))
    own = DiagnosisOracle().evaluate(clean_fix(d))
    assert own.reason is None
    assert own.score == d.score
    assert sum(s.weight for s in own.signals) == pytest.approx(1.0)


def test_the_registry_and_the_configuration_name_the_same_sub_oracles() -> None:
    assert list(oracle.ORACLES) == list(OracleWeights.model_fields)
    made = [make(MIXED) for make in oracle.ORACLES.values()]
    assert [o.name for o in made] == list(oracle.ORACLES)
    names = [s.name for o in made for s in o.evaluate(clean_fix(diagnosis())).signals]
    assert len(names) == len(set(names)) == len(SignalName)


def test_never_fired_scores_nothing_and_reads_as_in_v1() -> None:
    v = oracle.never_fired(VERIFY, TARGET, 121.4)
    assert (v.passed, v.reason, v.score) == (False, Reason.ALERT_NEVER_FIRED, 0.0)
    assert v.message == f"{TARGET} did not fire within 121s of the injection"
    assert [(s.name.value, s.value, s.credit, s.weight, s.detail) for s in v.signals] == [
        ("ci_green", False, 0.0, 0.25, ""),
        ("alert_cleared", False, 0.0, 0.35, ""),
        ("sustained_clear", False, 0.0, 0.20, ""),
        ("time_to_clear", None, 0.0, 0.10, ""),
        ("no_new_alerts", False, 0.0, 0.10, "not observed"),
    ]
    assert (v.time_to_clear_seconds, v.cleared_at, v.new_alerts) == (None, None, [])
    assert oracle.never_fired(MIXED, TARGET, 121.4).reason is Reason.ALERT_NEVER_FIRED


def test_combine_refuses_an_empty_unbalanced_or_clashing_compound() -> None:
    mit = MitigationOracle(VERIFY).evaluate(clean_fix())
    twin = SubVerdict(oracle="twin", signals=mit.signals[:1])
    with pytest.raises(ValueError, match="at least one"):
        oracle.combine([], 0.85)
    with pytest.raises(ValueError, match=r"sum to 1\.0, they sum to 0\.9000"):
        oracle.combine([(0.9, mit)], 0.85)
    with pytest.raises(ValueError, match="share a signal name"):
        oracle.combine([(0.5, mit), (0.5, twin)], 0.85)


# ---------------------------------------------------------------- purity
# hashlib and hmac: pure functions of their inputs (the soak draw, oracle.soak)
PURE_IMPORTS = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "hashlib",
    "hmac",
    "typing",
    "pydantic",
}


def test_the_oracle_package_imports_nothing_that_does_io() -> None:
    """An allow-list: the standard library's pure modules, pydantic and sreforge's pure
    layers (api, oracle). No file, network, process or clock access can come in."""
    files = sorted((ROOT / "operator/sreforge/oracle").glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "contract.py", "compound.py"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                pure = top in PURE_IMPORTS or module.startswith(("sreforge.api", "sreforge.oracle"))
                assert pure, f"{path.name} imports {module}"
