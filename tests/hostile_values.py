"""Invalid values and invalid Incident/Submission specs, as hypothesis strategies.

Shared by tests/unit/test_hostile_input.py (pydantic models) and
tests/integration/kube/test_crd_refusals.py (the real kube-apiserver with the CRDs).
Each strategy knows which field it broke, so a test can demand the error names it.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = Path(__file__).resolve().parent.parent / "manifests" / "examples"


def reproducible(n: int) -> Any:
    """Hypothesis settings of every property here: derandomized, n examples, no deadline."""
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# ================================================================ shared value strategies
LETTERS = st.from_regex(r"x[a-z]{0,8}", fullmatch=True)  # never a number, bool or inf/nan
SCALAR_NOT_STR = st.one_of(
    st.integers(-(10**6), 10**6), st.floats(allow_nan=False, width=32), st.booleans()
)
TABLE = st.dictionaries(LETTERS, st.integers(0, 9), min_size=1, max_size=2)
LIST = st.lists(st.integers(0, 9), min_size=1, max_size=3)

# what a value of each kind is never coerced from
NOT_A = {
    "int": st.one_of(LETTERS, LIST, TABLE),
    "float": st.one_of(LETTERS, LIST, TABLE),
    "str": st.one_of(SCALAR_NOT_STR, LIST, TABLE),
    "list": st.one_of(SCALAR_NOT_STR, LETTERS, TABLE),
    "bool": st.one_of(LETTERS, LIST, TABLE, st.integers(2, 10**6)),
    "table": st.one_of(SCALAR_NOT_STR, LETTERS, LIST),
}


def out_of(lo: float | None, hi: float | None, *, integer: bool) -> st.SearchStrategy[Any]:
    """Numbers outside [lo, hi]."""
    parts: list[st.SearchStrategy[Any]] = []
    num = st.integers if integer else st.floats
    if lo is not None:
        below = lo - 1 if integer else math.nextafter(lo, -math.inf)
        parts.append(num(max_value=below, min_value=below - 10**9))  # type: ignore[operator]
    if hi is not None:
        above = hi + 1 if integer else math.nextafter(hi, math.inf)
        parts.append(num(min_value=above, max_value=above + 10**9))  # type: ignore[operator]
    return st.one_of(parts)


def not_matching(pattern: str) -> st.SearchStrategy[str]:
    # pydantic and the apiserver search the pattern (it carries its own anchors)
    return st.text(max_size=12).filter(lambda s: re.search(pattern, s) is None)


# ================================================================ Incident / Submission specs
def example_spec(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())["spec"]
    return spec


INCIDENT = example_spec("incident.yaml")
SUBMISSION = example_spec("submission.yaml")

# camelCase path -> (kind, lower, upper), as the CRD spells them
INCIDENT_FIELDS: dict[tuple[str, ...], tuple[str, float | None, float | None]] = {
    ("scenario",): ("str", None, None),
    ("targetNamespace",): ("str", None, None),
    ("targetDeployment",): ("str", None, None),
    ("prometheusURL",): ("str", None, None),
    ("load",): ("table", None, None),
    ("load", "rate"): ("int", 1, 20_000),
    ("load", "durationSeconds"): ("int", 1, 86_400),
    ("load", "maxInFlight"): ("int", 1, 100_000),
    ("verify",): ("table", None, None),
    ("verify", "sustainSeconds"): ("int", 1, 86_400),
    ("verify", "fireTimeoutSeconds"): ("int", 1, 86_400),
    ("verify", "clearBudgetSeconds"): ("int", 1, 86_400),
    ("verify", "passThresholdPercent"): ("int", 0, 100),
}
INCIDENT_PATTERNS = {
    ("scenario",): r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    ("targetNamespace",): r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    ("prometheusURL",): r"^https?://",
    ("loadRunner",): r"^(k6|builtin)$",
}
SUBMISSION_FIELDS: dict[tuple[str, ...], tuple[str, float | None, float | None]] = {
    ("incidentRef",): ("table", None, None),
    ("incidentRef", "name"): ("str", None, None),
    ("patch",): ("table", None, None),
    ("patch", "inline"): ("str", None, None),
    ("rca",): ("str", None, None),
    ("agentModel",): ("str", None, None),
}
SUBMISSION_PATTERNS = {
    ("patch", "configMapKeyRef", "key"): r"^[-._a-zA-Z0-9]+$",
}


def set_path(spec: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(spec))
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return data


def drop_path(spec: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    data = json.loads(json.dumps(spec))
    node = data
    for key in path[:-1]:
        node = node[key]
    node.pop(path[-1])
    return data


@st.composite
def bad_spec(draw: st.DrawFn, which: str) -> tuple[str, dict[str, Any], str]:
    """(class, an invalid Incident or Submission spec, the camelCase field it must name)."""
    if which == "incident":
        base, fields, patterns = INCIDENT, INCIDENT_FIELDS, INCIDENT_PATTERNS
        required: list[tuple[str, ...]] = [("scenario",)]
        tables: list[tuple[str, ...]] = [(), ("load",), ("verify",)]
    else:
        base, fields, patterns = SUBMISSION, SUBMISSION_FIELDS, SUBMISSION_PATTERNS
        required = [("incidentRef",), ("patch",), ("incidentRef", "name")]
        tables = [(), ("incidentRef",)]
    kind = draw(st.sampled_from(["wrong type", "out of range", "unknown field", "missing"]))
    if kind == "wrong type":
        path = draw(st.sampled_from(sorted(fields)))
        value = draw(NOT_A[fields[path][0]])
        return kind, set_path(base, path, value), ".".join(path)
    if kind == "out of range":
        ranged = sorted(p for p, f in fields.items() if f[1] is not None) + sorted(patterns)
        if not ranged or which == "submission":
            path = draw(st.sampled_from(sorted(patterns)))
            return kind, _with_configmap_key(draw(not_matching(patterns[path]))), ".".join(path)
        path = draw(st.sampled_from(ranged))
        if path in patterns:
            value: Any = draw(not_matching(patterns[path]))
        else:
            _k, lo, hi = fields[path]
            value = draw(out_of(lo, hi, integer=True))
        return kind, set_path(base, path, value), ".".join(path)
    if kind == "unknown field":
        table = draw(st.sampled_from(tables))
        name = draw(LETTERS) + "Unknown"
        return kind, set_path(base, (*table, name), 1), ".".join((*table, name))
    path = draw(st.sampled_from(required))
    return kind, drop_path(base, path), ".".join(path)


def _with_configmap_key(key: str) -> dict[str, Any]:
    spec = json.loads(json.dumps(SUBMISSION))
    spec["patch"] = {"configMapKeyRef": {"name": "fix", "key": key}}
    return spec
