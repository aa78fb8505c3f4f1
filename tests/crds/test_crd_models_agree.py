"""The CRDs under crds/ and the pydantic models of sreforge.api.resources agree.

Walks the CRD's openAPIV3Schema and the model's JSON schema side by side:
the same properties, types, required lists, enums, ranges, patterns and
defaults. Also: the chart's and the kustomize base's CRD copies are byte-
identical to crds/, printer columns point at fields that exist, and the
example resources validate against the models.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from sreforge.api import resources
from sreforge.api.resources import (
    IncidentSpec,
    IncidentStatus,
    SubmissionSpec,
    SubmissionStatus,
)
from sreforge.api.verdict import Reason

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
CRD_FILES = ("incidents.sreforge.dev.yaml", "submissions.sreforge.dev.yaml")
COPIES = (REPO / "charts" / "sreforge" / "crds", REPO / "manifests" / "crds")
EXAMPLES = REPO / "manifests" / "examples"
# JSON-schema keywords whose values must be equal on both sides when either has them
CONSTRAINTS = ("minimum", "maximum", "minLength", "maxLength", "pattern")
MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "Incident": (IncidentSpec, IncidentStatus),
    "Submission": (SubmissionSpec, SubmissionStatus),
}


def load_crd(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRD_DIR / name).read_text())


def crd_by_kind(kind: str) -> dict[str, Any]:
    for name in CRD_FILES:
        crd = load_crd(name)
        if crd["spec"]["names"]["kind"] == kind:
            return crd
    raise KeyError(kind)


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


class _ModelSchema:
    """A model's JSON schema with $ref resolved and Optional (anyOf [X, null]) unwrapped."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.root = model.model_json_schema(by_alias=True, mode="validation")
        self.defs: dict[str, Any] = self.root.get("$defs", {})

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) == 1:
                rest = {k: v for k, v in node.items() if k != "anyOf"}
                node = {**rest, **options[0]}
        if "$ref" in node:
            target = self.defs[node.pop("$ref").rsplit("/", 1)[-1]]
            node = {**target, **node}
        return node


def compare(crd: dict[str, Any], model: _ModelSchema, node: dict[str, Any], path: str) -> list[str]:
    """Every disagreement between a CRD schema node and a model schema node, as a message."""
    m = model.resolve(node)
    errors: list[str] = []
    if crd.get("x-kubernetes-preserve-unknown-fields") and "properties" not in crd:
        # free-form on purpose: the model side must be free-form too
        if "type" not in crd:
            if "anyOf" not in m and m.get("type") not in (None, "object"):
                errors.append(f"{path}: CRD is untyped free-form, model is {m.get('type')}")
        elif m.get("type") != "object" or m.get("properties"):
            errors.append(f"{path}: CRD is a free-form object, model is {m}")
        return errors
    if "anyOf" in m:
        return [f"{path}: model is a union {m['anyOf']}, CRD is {crd.get('type')}"]
    if crd.get("type") != m.get("type"):
        return [f"{path}: type {crd.get('type')!r} in CRD, {m.get('type')!r} in model"]
    if (crd.get("format") == "date-time") != (m.get("format") == "date-time"):
        errors.append(f"{path}: date-time format in only one of CRD and model")
    if set(crd.get("enum", [])) != set(m.get("enum", [])):
        errors.append(f"{path}: enum {crd.get('enum')} in CRD, {m.get('enum')} in model")
    for key in CONSTRAINTS:
        if crd.get(key) != m.get(key):
            errors.append(f"{path}: {key} {crd.get(key)!r} in CRD, {m.get(key)!r} in model")
    model_default = m.get("default")
    has_default = "default" in crd or model_default not in (None, "", [])
    if has_default and crd.get("default") != model_default:
        errors.append(f"{path}: default {crd.get('default')!r} in CRD, {model_default!r}")
    if crd.get("type") == "object":
        errors += _compare_object(crd, model, m, path)
    if crd.get("type") == "array":
        errors += compare(crd["items"], model, m["items"], f"{path}[]")
    return errors


def _compare_object(
    crd: dict[str, Any], model: _ModelSchema, m: dict[str, Any], path: str
) -> list[str]:
    errors: list[str] = []
    if "additionalProperties" in crd:
        extra = m.get("additionalProperties")
        if not isinstance(extra, dict):
            return [f"{path}: a map in the CRD, not in the model"]
        return compare(crd["additionalProperties"], model, extra, f"{path}{{}}")
    crd_props, m_props = crd.get("properties", {}), m.get("properties", {})
    for name in sorted(set(crd_props) - set(m_props)):
        errors.append(f"{path}.{name}: in the CRD, not in the model")
    for name in sorted(set(m_props) - set(crd_props)):
        errors.append(f"{path}.{name}: in the model, not in the CRD")
    if set(crd.get("required", [])) != set(m.get("required", [])):
        errors.append(f"{path}: required {crd.get('required')} in CRD, {m.get('required')}")
    for name in sorted(set(crd_props) & set(m_props)):
        errors += compare(crd_props[name], model, m_props[name], f"{path}.{name}")
    return errors


def disagreements(kind: str, part: str, schema: dict[str, Any] | None = None) -> list[str]:
    spec_model, status_model = MODELS[kind]
    model = spec_model if part == "spec" else status_model
    crd_node = (schema or root_schema(crd_by_kind(kind)))["properties"][part]
    ms = _ModelSchema(model)
    return compare(crd_node, ms, ms.root, f"{kind}.{part}")


# ---------------------------------------------------------------- agreement
@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("part", ["spec", "status"])
def test_model_and_crd_schema_agree(kind: str, part: str) -> None:
    assert disagreements(kind, part) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda s: s["properties"]["spec"]["properties"].pop("targetDeployment"), "not in the CRD"),
        (
            lambda s: s["properties"]["spec"]["properties"].update(extra={"type": "string"}),
            "not in the model",
        ),
        (
            lambda s: s["properties"]["spec"]["properties"]["load"]["properties"]["rate"].update(
                maximum=10
            ),
            "maximum 10",
        ),
        (lambda s: s["properties"]["spec"]["properties"]["loadRunner"].update(enum=["k6"]), "enum"),
        (lambda s: s["properties"]["spec"].update(required=[]), "required"),
        (
            lambda s: s["properties"]["spec"]["properties"]["loadRunner"].update(default="k6"),
            "default",
        ),
    ],
)
def test_comparison_catches_a_drifted_crd(mutate: Any, expected: str) -> None:
    schema = copy.deepcopy(root_schema(crd_by_kind("Incident")))
    mutate(schema)
    errors = disagreements("Incident", "spec", schema)
    assert errors
    assert any(expected in e for e in errors), errors


def test_status_reason_enums_are_the_verdict_reasons() -> None:
    for kind, field in (("Submission", ["reason"]), ("Incident", ["verdict", "reason"])):
        node = root_schema(crd_by_kind(kind))["properties"]["status"]
        for name in field:
            node = node["properties"][name]
        assert node["enum"] == [r.value for r in Reason], kind


# ---------------------------------------------------------------- CRD shape
@pytest.mark.parametrize("name", CRD_FILES)
def test_crd_shape(name: str) -> None:
    crd = load_crd(name)
    spec = crd["spec"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{resources.GROUP}"
    assert name == f"{crd['metadata']['name']}.yaml"
    assert spec["group"] == resources.GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["categories"] == ["sreforge"]
    (version,) = spec["versions"]
    assert version["name"] == resources.VERSION
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "conditions"
    ]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


def test_short_names() -> None:
    assert crd_by_kind("Incident")["spec"]["names"]["shortNames"] == ["inc"]
    assert crd_by_kind("Submission")["spec"]["names"]["shortNames"] == ["sub"]


def _schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node = schema
    # a filter such as [?(@.type=="Verified")] selects list items: keep only the []
    for part in re.sub(r"\[\?\(.*?\)\]", "[]", json_path).lstrip(".").split("."):
        name = part.split("[", 1)[0]
        if name == "metadata":
            return {"type": "object"}
        node = node.get("properties", {}).get(name) or {}
        if "[" in part:
            node = node.get("items", {})
        if not node:
            return None
    return node


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        ("Incident", ["Phase", "Scenario", "Alert", "Score", "Passed", "Age", "Message"]),
        ("Submission", ["Incident", "Passed", "Score", "Reason", "Age", "Message"]),
    ],
)
def test_printer_columns_point_at_fields_that_exist(kind: str, columns: list[str]) -> None:
    (version,) = crd_by_kind(kind)["spec"]["versions"]
    printed = version["additionalPrinterColumns"]
    assert [c["name"] for c in printed] == columns
    schema = version["schema"]["openAPIV3Schema"]
    for col in printed:
        target = _schema_at(schema, col["jsonPath"])
        assert target is not None, col
        if col["type"] not in ("date",) and "[?(" not in col["jsonPath"]:
            assert target["type"] == col["type"], col
    message = next(c for c in printed if c["name"] == "Message")
    assert message["priority"] == 1
    assert all(c.get("priority", 0) == 0 for c in printed if c["name"] != "Message")


def test_patch_one_of_is_a_cel_rule() -> None:
    patch = root_schema(crd_by_kind("Submission"))["properties"]["spec"]["properties"]["patch"]
    (rule,) = patch["x-kubernetes-validations"]
    assert rule["rule"] == "has(self.inline) != has(self.configMapKeyRef)"
    assert "exactly one" in rule["message"]
    assert patch["properties"]["inline"]["maxLength"] == resources.MAX_INLINE_PATCH


# ---------------------------------------------------------------- copies
@pytest.mark.parametrize("copy_dir", COPIES, ids=lambda p: str(p.relative_to(REPO)))
@pytest.mark.parametrize("name", CRD_FILES)
def test_crd_copies_are_byte_identical(copy_dir: Path, name: str) -> None:
    assert (copy_dir / name).read_bytes() == (CRD_DIR / name).read_bytes(), (
        f"{copy_dir / name} differs from crds/{name}; copy it: cp crds/{name} {copy_dir}/"
    )


@pytest.mark.parametrize("copy_dir", COPIES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_stale_crd_copies(copy_dir: Path) -> None:
    assert sorted(p.name for p in copy_dir.glob("*.yaml")) == sorted(CRD_FILES)


# ---------------------------------------------------------------- examples
def _example_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_examples_validate_against_the_models() -> None:
    docs = _example_docs()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["Incident", "Submission"]
    for doc in docs:
        assert doc["apiVersion"] == resources.API_VERSION
        spec_model, _ = MODELS[doc["kind"]]
        parsed = spec_model.model_validate(doc["spec"])
        # the wire form round-trips: aliases are the CRD's field names
        assert parsed.model_dump(by_alias=True, exclude_none=True) == {
            **(
                {
                    "loadRunner": "builtin",
                    "targetTimeoutSeconds": 600,
                    "automountServiceAccountToken": False,
                }
                if doc["kind"] == "Incident"
                else {}
            ),
            **doc["spec"],
        }


def test_models_refuse_what_the_server_refuses() -> None:
    with pytest.raises(ValidationError, match="scenario"):
        IncidentSpec.model_validate({})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        IncidentSpec.model_validate({"scenario": "s", "load": {"rate": 0}})
    with pytest.raises(ValidationError, match="loadRunner"):
        IncidentSpec.model_validate({"scenario": "s", "loadRunner": "locust"})
    with pytest.raises(ValidationError, match="extra"):
        IncidentSpec.model_validate({"scenario": "s", "bogus": 1})
    both = {"inline": "x", "configMapKeyRef": {"name": "c", "key": "k"}}
    for patch in (both, {}):
        with pytest.raises(ValidationError, match="exactly one of inline or configMapKeyRef"):
            SubmissionSpec.model_validate({"incidentRef": {"name": "i"}, "patch": patch})


def test_status_round_trips_with_camel_case() -> None:
    raw = {
        "observedGeneration": 2,
        "phase": "AwaitingSubmission",
        "alert": "CatalogLatencyHigh",
        "runId": "r-1",
        "firedTime": "2025-01-02T03:04:05Z",
        "verdict": {"passed": True, "score": 0.9, "reason": "Passed", "submission": "fix-1"},
        "loop": {"step": "verify", "nested": {"any": [1, 2]}},
        "conditions": [
            {
                "type": "AlertFiring",
                "status": "True",
                "reason": "Fired",
                "message": "CatalogLatencyHigh is firing.",
                "lastTransitionTime": "2025-01-02T03:04:05Z",
            }
        ],
    }
    status = IncidentStatus.model_validate(raw)
    assert status.run_id == "r-1"
    assert status.verdict is not None
    assert status.verdict.reason is Reason.PASSED
    firing = status.condition("AlertFiring")
    assert firing is not None
    assert firing.status == "True"
    dumped = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["conditions"][0]["lastTransitionTime"] == "2025-01-02T03:04:05Z"
    assert dumped["loop"] == raw["loop"]
    sub = SubmissionStatus.model_validate(
        {"signals": {"ci_green": {"value": True, "credit": 1, "weight": 0.25}}, "ciFeedback": "ok"}
    )
    assert sub.signals is not None
    assert sub.signals["ci_green"].value is True
    assert sub.ci_feedback == "ok"
