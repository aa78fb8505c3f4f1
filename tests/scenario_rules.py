"""The scenarios' alert rules as data: their PromQL selectors, and promtool tests derived
from each scenario's own rules_test.yml.

On a Prometheus shared by Incidents of different scenarios (the chart's, which loads every
bundled scenario's rules), each target carries its pod's scenario as the label `scenario`
and every selector of a scenario's rules matches ``scenario=~"<its name>|"``: its own
Incidents' series, or series of no scenario (local runs, one Prometheus per run). Used by
tests/unit/test_rules_scope.py (Debian's promtool) and test_install.py (the chart's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SCENARIOS_DIR = REPO / "scenarios"
BUNDLED = sorted(p.parent.name for p in SCENARIOS_DIR.glob("*/rules.yml"))

# words that are not metric names where PromQL allows an identifier
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
# a parenthesised label list follows these (never selectors)
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# aggregation operators, which may be followed by their by/without clause
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*')


def scenario_matcher(name: str) -> str:
    """What every selector of scenario `name`'s rules carries."""
    return f'scenario=~"{name}|"'


def _quoted_end(text: str, i: int) -> int:
    """The index after the string literal that starts at text[i]."""
    quote = text[i]
    j = i + 1
    while text[j] != quote:
        j += 2 if text[j] == "\\" and quote != "`" else 1
    return j + 1


def _block_end(text: str, i: int, close: str) -> int:
    """The index after the `close` that ends the block opened at text[i] (strings skipped;
    parentheses nest)."""
    opener, depth, j = text[i], 0, i
    while j < len(text):
        c = text[j]
        if c in "\"'`":
            j = _quoted_end(text, j)
            continue
        if c == opener:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError(f"unbalanced {opener!r} at {i} in {text!r}")


def selectors(expr: str) -> list[str]:
    """Every vector selector of a PromQL expression as written: ``name``, ``name{...}`` or
    ``{...}`` (function and aggregation names, label lists of by/without/on/ignoring/group_*,
    range and subquery brackets, strings, numbers and keywords are not selectors)."""
    out: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c == "#":  # a comment to the end of the line
            i = expr.find("\n", i) if "\n" in expr[i:] else n
        elif c in "\"'`":
            i = _quoted_end(expr, i)
        elif c == "[":
            i = _block_end(expr, i, "]")
        elif c == "{":
            end = _block_end(expr, i, "}")
            out.append(expr[i:end])
            i = end
        elif c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            m = re.compile(r"[0-9A-Za-z_.]+").match(expr, i)
            assert m is not None
            i = m.end()
        elif m := _IDENT.match(expr, i):
            word, i = m.group(), m.end()
            rest = expr[i:].lstrip()
            following = rest[:1]
            if word.lower() in _LABEL_LISTS:
                if following == "(":
                    i = _block_end(expr, n - len(rest), ")")
            elif word.lower() == "offset":
                m2 = re.compile(r"\s*-?[0-9A-Za-z_.]+").match(expr, i)
                i = m2.end() if m2 else i
            elif (
                word.lower() in _KEYWORDS
                or following == "("
                or (word in _AGGREGATIONS and re.match(r"(by|without)\b", rest))
            ):
                pass  # a keyword, or a function or aggregation's name
            elif following == "{":
                start = n - len(rest)
                end = _block_end(expr, start, "}")
                out.append(word + expr[start:end])
                i = end
            else:
                out.append(word)
        else:
            i += 1
    return out


def matchers(selector: str) -> list[tuple[str, str, str]]:
    """A selector's label matchers as (label, operator, quoted value)."""
    if "{" not in selector:
        return []
    body = selector[selector.index("{") + 1 : -1]
    found: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None:
            raise ValueError(f"cannot read the matchers of {selector!r} at {body[pos:]!r}")
        found.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError(f"expected ',' in {selector!r} at {body[pos:]!r}")
            pos += 1
    return found


def rule_exprs(rules_file: Path) -> list[tuple[str, str]]:
    """(the rule's name, its expression) of every alerting and recording rule of a file."""
    doc = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    return [
        (rule.get("alert") or rule.get("record"), rule["expr"])
        for group in doc["groups"]
        for rule in group["rules"]
    ]


def alert_names(rules_file: Path) -> list[str]:
    doc = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


def with_label(series: str, label: str, value: str) -> str:
    """A promtool input series (``name{...}``, ``name`` or ``{...}``) with one more label."""
    text = series.strip()
    pair = f'{label}="{value}"'
    if not text.endswith("}"):
        return f"{text}{{{pair}}}"
    body = text[text.index("{") + 1 : -1]
    return f"{text[:-1]}{',' if body.strip() else ''}{pair}}}"


def relabelled_test(scenario: str, labels: list[str]) -> dict[str, Any]:
    """`scenario`'s rules_test.yml run once per value in `labels`, every input series of it
    labelled ``scenario="<value>"``. For its own name every expectation stays as written
    (its rules aggregate the label away); for any other, no alert of its rules fires at any
    of the test's evaluation times. promql_expr_test cases are left out (they test series,
    not alerts)."""
    directory = SCENARIOS_DIR / scenario
    original = yaml.safe_load((directory / "rules_test.yml").read_text(encoding="utf-8"))
    rule_files = [str((directory / f).resolve()) for f in original["rule_files"]]
    alerts = sorted({a for f in rule_files for a in alert_names(Path(f))})
    tests: list[dict[str, Any]] = []
    for value in labels:
        for group in original["tests"]:
            case = {
                k: v for k, v in group.items() if k not in ("alert_rule_test", "promql_expr_test")
            }
            case["input_series"] = [
                {**s, "series": with_label(s["series"], "scenario", value)}
                for s in group.get("input_series") or []
            ]
            if value == scenario:
                case["alert_rule_test"] = group.get("alert_rule_test") or []
            else:
                times = sorted(
                    {t["eval_time"] for t in group.get("alert_rule_test") or []}, key=_seconds
                )
                case["alert_rule_test"] = [
                    {"eval_time": t, "alertname": a, "exp_alerts": []}
                    for t in times
                    for a in alerts
                ]
            tests.append(case)
    return {**original, "rule_files": rule_files, "tests": tests}


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(duration)):
        total += float(amount) * units[unit]
    return total


def write_relabelled_test(scenario: str, labels: list[str], directory: Path) -> Path:
    path = directory / f"{scenario}-relabelled_test.yml"
    path.write_text(yaml.safe_dump(relabelled_test(scenario, labels), sort_keys=False))
    return path
