"""Campaign statistics: pass@1, pass^k and Wilson's interval, against hand-computed values."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sreforge.api.campaign import Campaign, Trial, pass_hat_k, summarise, wilson


def test_pass_hat_k_matches_the_combinatorial_definition() -> None:
    # 3 of 4 trials passed: the chance two drawn without replacement both passed is 3/6
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 3, 1) == pytest.approx(0.75)  # pass^1 is pass@1
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(3, 2, 3) == 0.0  # with n = k, one failure is enough
    assert pass_hat_k(2, 2, 3) is None  # not enough trials to say


def test_wilson_interval_known_values() -> None:
    # 8 of 10: the textbook Wilson 95% interval is about (0.490, 0.943)
    lo, hi = wilson(10, 8) or (0, 0)
    assert lo == pytest.approx(0.4902, abs=1e-3)
    assert hi == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 0) is None
    assert wilson(5, 5) is not None
    assert wilson(5, 5)[1] == 1.0  # type: ignore[index]
    assert wilson(5, 0)[0] == 0.0  # type: ignore[index]


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_wilson_contains_the_point_estimate(nc: tuple[int, int]) -> None:
    n, c = nc
    lo, hi = wilson(n, c) or (1.0, 0.0)
    assert 0.0 <= lo <= c / n + 1e-4
    assert c / n - 1e-4 <= hi <= 1.0


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_hat_k_falls_with_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
    assert values[0] == pytest.approx(c / n)
    assert all(a is not None and b is not None and a >= b for a, b in itertools.pairwise(values))


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_hat_k(2, 3, 1)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        wilson(2, -1)


def trial(sub: str, i: int, passed: bool | None, scenario: str = "s") -> Trial:
    reason = {True: "Passed", False: "NotCleared", None: "Inconclusive"}[passed]
    return Trial(
        scenario=scenario, submitter=sub, trial=i, run_id=f"r{i}", passed=passed, reason=reason
    )


def test_summary_per_scenario_and_submitter_leaves_inconclusive_out() -> None:
    results = [
        trial("fix", 1, True),
        trial("fix", 2, True),
        trial("fix", 3, None),  # the harness's fault: not a trial of the fix
        trial("empty", 1, False),
        trial("empty", 2, False),
        trial("empty", 3, False),
        trial("fix", 1, False, scenario="other"),
    ]
    rows = {(r.scenario, r.submitter): r for r in summarise(results, k=3)}
    fix = rows[("s", "fix")]
    assert (fix.trials, fix.graded, fix.passed, fix.inconclusive) == (3, 2, 2, 1)
    assert fix.pass_at_1 == 1.0
    assert fix.k == 2  # only two graded trials: pass^k is given for k = 2, and says so
    assert fix.pass_hat_k == 1.0
    empty = rows[("s", "empty")]
    assert (empty.pass_at_1, empty.pass_hat_k, empty.k) == (0.0, 0.0, 3)
    assert empty.interval95 is not None
    assert empty.interval95[0] == 0.0
    assert math.isclose(rows[("other", "fix")].pass_at_1 or 0.0, 0.0)


def test_campaign_json_round_trip_uses_camel_case() -> None:
    c = Campaign(
        campaign_id="c1",
        trials=2,
        started="2026-12-03T12:00:00+00:00",
        results=[trial("fix", 1, True)],
    )
    c.summary = summarise(c.results, k=2)
    wire = c.model_dump(mode="json", by_alias=True)
    assert wire["schema"] == "sreforge.campaign.v1"
    assert wire["summary"][0]["passAt1"] == 1.0
    assert Campaign.model_validate(wire) == c
