"""Hostile input, property-based (hypothesis): every bad input gets a clear refusal.

- scenario.toml: wrong types, out-of-range numbers, unknown fields, missing required fields,
  non-UTF-8 bytes, broken TOML -> ScenarioError naming the file and the field, never any
  other exception.
- Incident and Submission specs (sreforge.api.resources) -> pydantic ValidationError naming
  the field (the same refusals against the real kube-apiserver:
  tests/integration/kube/test_crd_refusals.py).
- Patches through the CI gate: `../` paths, absolute paths, symlinks, binary content,
  oversize, protected paths (also spelled C-quoted or with another -p1 prefix), malformed
  diffs, shell metacharacters in file names -> CIResult REJECTED with the reason, and the
  pristine tree byte-identical afterwards. Patch application never reaches a shell.

Reproducible: `derandomize=True`, no example database, a fixed max_examples per test.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.hostile_values import (
    INCIDENT,
    LETTERS,
    NOT_A,
    SUBMISSION,
    bad_spec,
    not_matching,
    out_of,
    reproducible,
)
from tests.reliability_cases import case

from sreforge.api import CIStatus
from sreforge.api.resources import IncidentSpec, SubmissionSpec
from sreforge.api.scenario import ScenarioError
from sreforge.runtime import ci
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"


# ================================================================ scenario.toml
BASE_SCENARIO: dict[str, Any] = json.loads(
    json.dumps(tomllib.loads((SCENARIO / "scenario.toml").read_text()))
)

# path -> (kind, lower, upper) of every field the mutations target
SCENARIO_FIELDS: dict[tuple[str, ...], tuple[str, float | None, float | None]] = {
    ("name",): ("str", None, None),
    ("title",): ("str", None, None),
    ("family",): ("str", None, None),
    ("target_alert",): ("str", None, None),
    ("rules",): ("str", None, None),
    ("protected",): ("list", None, None),
    ("service",): ("table", None, None),
    ("service", "name"): ("str", None, None),
    ("service", "command"): ("list", None, None),
    ("service", "test_command"): ("list", None, None),
    ("service", "test_timeout_seconds"): ("int", 1, 86_400),
    ("service", "deploy_timeout_seconds"): ("int", 1, 86_400),
    ("service", "dependencies"): ("list", None, None),
    ("load",): ("table", None, None),
    ("load", "rate"): ("int", 1, 20_000),
    ("load", "max_in_flight"): ("int", 1, 100_000),
    ("load", "timeout_ms"): ("int", 10, 120_000),
    ("load", "expect_status"): ("int", 100, 599),
    ("load", "expect_json_id"): ("bool", None, None),
    ("load", "id_range"): ("list", None, None),
    ("verify",): ("table", None, None),
    ("verify", "pass_threshold"): ("float", 0.0, 1.0),
    ("verify", "fire_timeout_seconds"): ("int", 1, 86_400),
    ("verify", "sustain_seconds"): ("int", 1, 86_400),
    ("verify", "min_success_ratio"): ("float", 0.0, 1.0),
    ("verify", "sample_interval_seconds"): ("float", None, 30.0),
    ("verify", "weights", "ci_green"): ("float", 0.0, 1.0),
}
PATTERNS = {
    ("name",): r"^[a-z][a-z0-9-]*$",
    ("target_alert",): r"^[A-Za-z_][A-Za-z0-9_]*$",
    ("service", "name"): r"^[a-z][a-z0-9-]*$",
    ("load", "path"): r"^/",
    ("service", "health_path"): r"^/",
}
REQUIRED = [
    ("name",),
    ("title",),
    ("family",),
    ("target_alert",),
    ("service",),
    ("load",),
    ("service", "name"),
    ("service", "source"),
    ("service", "command"),
    ("service", "test_command"),
    ("load", "rate"),
]
TABLES = [(), ("service",), ("load",), ("verify",), ("verify", "weights")]


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return (
            "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        )
    if isinstance(v, str):
        # a JSON string is a TOML basic string, but for DEL, which TOML wants escaped
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """A tiny TOML writer for scenario dicts (scalars and arrays first, then sub-tables)."""
    scalars = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items() if not _is_table(v)]
    out = ""
    if prefix:
        out += "[" + ".".join(json.dumps(p) for p in prefix) + "]\n"
    out += "".join(line + "\n" for line in scalars)
    for k, v in data.items():
        if _is_table(v):
            out += "\n" + to_toml(v, (*prefix, k))
    return out


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) and bool(v)


def mutated(path: tuple[str, ...], value: Any, *, delete: bool = False) -> dict[str, Any]:
    data = json.loads(json.dumps(BASE_SCENARIO))
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if delete:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return data


@st.composite
def bad_scenario(draw: st.DrawFn) -> tuple[str, dict[str, Any], str]:
    """(class, scenario dict, the field the error must name)."""
    kind = draw(st.sampled_from(["wrong type", "out of range", "unknown field", "missing"]))
    if kind == "wrong type":
        path = draw(st.sampled_from(sorted(SCENARIO_FIELDS)))
        value = draw(NOT_A[SCENARIO_FIELDS[path][0]])
        return kind, mutated(path, value), ".".join(path)
    if kind == "out of range":
        ranged = {**{p: f for p, f in SCENARIO_FIELDS.items() if f[1] is not None or f[2]}}
        choices = sorted(ranged) + sorted(PATTERNS)
        path = draw(st.sampled_from(choices))
        if path in PATTERNS:
            value: Any = draw(not_matching(PATTERNS[path]))
        else:
            k, lo, hi = SCENARIO_FIELDS[path]
            value = draw(out_of(lo, hi, integer=k == "int"))
        return kind, mutated(path, value), ".".join(path)
    if kind == "unknown field":
        table = draw(st.sampled_from(TABLES))
        name = draw(LETTERS.filter(lambda s: s != "x"))
        return kind, mutated((*table, f"{name}_unknown"), 1), ".".join((*table, f"{name}_unknown"))
    path = draw(st.sampled_from(REQUIRED))
    return kind, mutated(path, None, delete=True), ".".join(path)


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of latency-cache-stampede whose scenario.toml each example rewrites."""
    d = tmp_path_factory.mktemp("scenario") / "hostile"
    shutil.copytree(SCENARIO, d)
    return d


def test_scenario_writer_round_trips(scenario_dir: Path) -> None:
    (scenario_dir / "scenario.toml").write_text(to_toml(BASE_SCENARIO), encoding="utf-8")
    assert load_scenario(scenario_dir).name == "latency-cache-stampede"


@reproducible(300)
@given(bad=bad_scenario())
def test_invalid_scenario_toml_names_the_file_and_field(
    scenario_dir: Path, bad: tuple[str, dict[str, Any], str]
) -> None:
    kind, data, field = bad
    with case(f"scenario.toml: {kind}"):
        file = scenario_dir / "scenario.toml"
        file.write_text(to_toml(data), encoding="utf-8")
        with pytest.raises(ScenarioError) as info:
            load_scenario(scenario_dir)
        message = str(info.value)
        assert str(file) in message, message
        assert field in message, (field, message)


@reproducible(60)
@given(
    pos=st.integers(0, 1200),
    junk=st.binary(min_size=1, max_size=4).map(lambda b: b"\xff" + b),
)
def test_non_utf8_scenario_toml_names_the_file(scenario_dir: Path, pos: int, junk: bytes) -> None:
    with case("scenario.toml: non-UTF-8"):
        raw = (SCENARIO / "scenario.toml").read_bytes()
        pos = min(pos, len(raw))
        file = scenario_dir / "scenario.toml"
        file.write_bytes(raw[:pos] + junk + raw[pos:])
        with pytest.raises(ScenarioError) as info:
            load_scenario(scenario_dir)
        assert str(file) in str(info.value)
        assert "not UTF-8" in str(info.value)


BREAKERS = [
    '"unterminated',
    "[service\n",
    "= 3\n",
    "dup = 1\ndup = 2",  # a duplicate key, in whichever table it lands
    "[load]\n",  # a duplicate table
    "x = [1, 2\n",
    "y = 1979-13-45\n",
    "z = {a = 1,,}\n",
]


@reproducible(60)
@given(line=st.integers(0, 60), breaker=st.sampled_from(BREAKERS))
def test_broken_toml_names_the_file(scenario_dir: Path, line: int, breaker: str) -> None:
    with case("scenario.toml: bad TOML"):
        lines = (SCENARIO / "scenario.toml").read_text().splitlines(keepends=True)
        # at a line start outside any multi-line value (the file has none)
        lines.insert(min(line, len(lines)), breaker + "\n")
        file = scenario_dir / "scenario.toml"
        file.write_text("".join(lines), encoding="utf-8")
        with pytest.raises(ScenarioError) as info:
            load_scenario(scenario_dir)
        assert str(file) in str(info.value)
        assert "not valid TOML" in str(info.value)


# ================================================================ Incident / Submission specs
MODELS = {"Incident": IncidentSpec, "Submission": SubmissionSpec}


@pytest.mark.parametrize("kind", sorted(MODELS))
@reproducible(200)
@given(data=st.data())
def test_invalid_spec_names_the_field(kind: str, data: st.DataObject) -> None:
    cls, spec, field = data.draw(bad_spec(kind.lower()))
    with case(f"{kind} spec: {cls}"):
        with pytest.raises(ValidationError) as info:
            MODELS[kind].model_validate(spec)
        located = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
        assert any(loc.startswith(field) for loc in located), (field, located)


def test_the_example_specs_are_valid() -> None:
    # the base every mutation starts from must itself be accepted
    IncidentSpec.model_validate(INCIDENT)
    SubmissionSpec.model_validate(SUBMISSION)


# ================================================================ patches through the CI gate
PROTECTED = ["tests", "app/seed.py"]
GOOD = (
    "diff --git a/app/main.py b/app/main.py\n"
    "--- a/app/main.py\n"
    "+++ b/app/main.py\n"
    "@@ -1 +1 @@\n"
    "-x = 1\n"
    "+x = 2\n"
)


def tree_hash(root: Path) -> str:
    """One digest over every path, file mode and byte under root (symlinks not followed)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        h.update(f"{p.relative_to(root)}\0{st_.st_mode}\0".encode())
        if p.is_symlink():
            h.update(str(p.readlink()).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gate") / "pristine"
    (root / "app").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "app" / "main.py").write_text("x = 1\n")
    (root / "app" / "seed.py").write_text("ROWS = 3\n")
    (root / "tests" / "test_main.py").write_text(
        "from app.main import x\n\n\ndef test_x():\n    assert x in (1, 2)\n"
    )
    return root


def file_diff(old: str, new: str, body: str = "@@ -1 +1 @@\n-x = 1\n+x = 2\n") -> str:
    return f"--- {old}\n+++ {new}\n{body}"


SEGMENT = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
SHELL_CHARS = "$`;|&<>()*?!{}[]~#'\" "


@st.composite
def hostile_patch(draw: st.DrawFn) -> tuple[str, str, str]:
    """(class, patch, a word the rejection reason must hold)."""
    kind = draw(
        st.sampled_from(
            [
                "../ paths",
                "absolute paths",
                "symlinks",
                "binary content",
                "protected paths and tests",
                "malformed diffs",
                "shell metacharacters in file names",
            ]
        )
    )
    segs = draw(st.lists(SEGMENT, min_size=1, max_size=3))
    if kind == "../ paths":
        ups = draw(st.integers(1, 4))
        at = draw(st.integers(0, len(segs)))
        path = "/".join([*segs[:at], *[".."] * ups, *segs[at:]])
        side = draw(st.sampled_from(["old", "new", "both", "rename"]))
        if side == "rename":
            patch = (
                f"diff --git a/app/main.py b/{path}\nsimilarity index 100%\n"
                f"rename from app/main.py\nrename to {path}\n"
            )
        else:
            old = f"a/{path}" if side in ("old", "both") else "a/app/main.py"
            new = f"b/{path}" if side in ("new", "both") else "b/app/main.py"
            patch = file_diff(old, new)
        return kind, patch, "escapes"
    if kind == "absolute paths":
        path = "/" + "/".join(segs)
        side = draw(st.sampled_from(["old", "new"]))
        patch = file_diff(path, "b/app/main.py") if side == "old" else file_diff("a/x", path)
        return kind, patch, "absolute"
    if kind == "symlinks":
        form = draw(st.sampled_from(["new file mode", "new mode", "index"]))
        name = "/".join(segs)
        if form == "new file mode":
            head = f"diff --git a/{name} b/{name}\nnew file mode 120000\n--- /dev/null\n"
            return kind, head + f"+++ b/{name}\n@@ -0,0 +1 @@\n+/etc/passwd\n", "symlink"
        if form == "new mode":
            head = "diff --git a/app/main.py b/app/main.py\nold mode 100644\nnew mode 120000\n"
            return kind, head, "symlink"
        head = f"diff --git a/{name} b/{name}\nindex 0000000..1111111 120000\n"
        return kind, head + f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-a\n+/etc\n", "symlink"
    if kind == "binary content":
        form = draw(st.sampled_from(["git binary", "binary files", "nul"]))
        if form == "git binary":
            return (
                kind,
                "diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 3\nKcmZ?\n",
                "binary",
            )
        if form == "binary files":
            return kind, "diff --git a/x b/x\nBinary files a/x and b/x differ\n", "binary"
        at = draw(st.integers(0, len(GOOD)))
        return kind, GOOD[:at] + "\x00" + GOOD[at:], "NUL"
    if kind == "protected paths and tests":
        target = draw(st.sampled_from(["tests/test_main.py", "app/seed.py", "tests/new_test.py"]))
        spelling = draw(st.sampled_from(["plain", "quoted", "prefix", "dot", "git header"]))
        if spelling == "quoted":
            return kind, file_diff(f'"a/{target}"', f'"b/{target}"'), "file name"
        if spelling == "prefix":
            pre = draw(SEGMENT)
            return kind, file_diff(f"{pre}/{target}", f"{pre}/{target}"), "protected"
        if spelling == "dot":
            return kind, file_diff(f"a/./{target}", f"b/./{target}"), "protected"
        if spelling == "git header":
            return (
                kind,
                f"diff --git a/{target} b/{target}\n" + file_diff(f"a/{target}", f"b/{target}"),
                "protected",
            )
        return kind, file_diff(f"a/{target}", f"b/{target}"), "protected"
    if kind == "malformed diffs":
        form = draw(st.sampled_from(["prose", "no hunk", "bad counts", "garbage hunk"]))
        if form == "prose":  # (a blank patch is the valid empty submission, not prose)
            prose = st.text(alphabet="abc xyz.\n", min_size=1, max_size=80).filter(str.strip)
            return kind, draw(prose), "diff"
        if form == "no hunk":
            return kind, "--- a/app/main.py\n+++ b/app/main.py\n", "patch"
        if form == "bad counts":
            n = draw(st.integers(2, 9))
            return (
                kind,
                file_diff("a/app/main.py", "b/app/main.py", f"@@ -1 +1,{n} @@\n+x\n"),
                ("patch"),
            )
        junk = draw(st.text(alphabet="#%^=~", min_size=1, max_size=10))
        return (
            kind,
            file_diff("a/app/main.py", "b/app/main.py", f"@@ -1 +1 @@\n{junk}\n"),
            ("patch"),
        )
    # shell metacharacters
    meta = draw(st.text(alphabet=SHELL_CHARS, min_size=1, max_size=3))
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    name = draw(
        st.sampled_from(
            [
                f"$(touch {marker})",
                f";touch {marker}",
                f"`touch {marker}`",
                f"a{meta}b",
                f"x|touch {marker}",
            ]
        )
    )
    patch = (
        f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
        "@@ -0,0 +1 @@\n+hello\n"
    )
    return kind, patch, "file name"


def gate(pristine: Path, workdir: Path, patch: str) -> tuple[Any, Path | None]:
    return ci.run_gate(
        pristine=pristine,
        workdir=workdir,
        patch=patch,
        protected=PROTECTED,
        test_command=["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        test_paths=["tests"],
        timeout=60,
    )


def _markers(patch: str) -> Iterator[Path]:
    for m in re.finditer(r"/tmp/pwned-[0-9a-f]{32}", patch):
        yield Path(m.group(0))


@reproducible(250)
@given(bad=hostile_patch())
def test_hostile_patches_are_rejected_and_leave_the_tree_untouched(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory, bad: tuple[str, str, str]
) -> None:
    kind, patch, why = bad
    with case(f"patch: {kind}") as c:
        before = tree_hash(pristine)
        result, deployed = gate(pristine, tmp_path_factory.mktemp("ci") / "work", patch)
        c.lost = int(tree_hash(pristine) != before) + sum(m.exists() for m in _markers(patch))
        assert c.lost == 0, "the pristine tree changed or a shell ran"
        assert result.status is CIStatus.REJECTED, (kind, patch, result)
        assert why in result.reason, (why, result.reason)
        assert deployed is None


def test_oversize_patch_is_rejected_at_the_documented_limit(pristine: Path, tmp_path: Path) -> None:
    head = GOOD.replace("@@ -1 +1 @@", "@@ -1 +1,2 @@") + "+# "
    at_limit = head + "y" * (ci.MAX_PATCH_BYTES - len(head) - 1) + "\n"
    assert len(at_limit.encode()) == ci.MAX_PATCH_BYTES
    over = at_limit.replace("+# y", "+# yy", 1)
    for patch, status in ((at_limit, CIStatus.GREEN), (over, CIStatus.REJECTED)):
        with case("patch: oversize (> MAX_PATCH_BYTES)") as c:
            before = tree_hash(pristine)
            result, _ = gate(pristine, tmp_path / f"w{len(patch)}", patch)
            c.lost = int(tree_hash(pristine) != before)
            assert c.lost == 0
            assert result.status is status, result.reason
            if status is CIStatus.REJECTED:
                assert "larger than the 1048576 byte limit" in result.reason, result


def test_patch_with_unencodable_text_is_rejected(pristine: Path, tmp_path: Path) -> None:
    # A lone surrogate is what a JSON "\ud800" in a Submission's inline patch decodes to.
    with case("patch: not encodable as UTF-8") as c:
        before = tree_hash(pristine)
        result, _ = gate(pristine, tmp_path / "w", GOOD.replace("x = 2", "x = '\ud800'"))
        c.lost = int(tree_hash(pristine) != before)
        assert c.lost == 0
        assert result.status is CIStatus.REJECTED
        assert "UTF-8" in result.reason


@pytest.mark.parametrize(
    "template", ["$(touch {m})", ";touch {m}", "`touch {m}`", "x|touch {m}", "&& touch {m}"]
)
def test_patch_application_never_passes_file_names_to_a_shell(
    tmp_path: Path, template: str
) -> None:
    """apply_patch itself (below the gate's name vetting) treats a file name as data."""
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    name = template.format(m=marker)
    tree = tmp_path / "tree"
    tree.mkdir()
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    patch = (
        f"diff --git {quoted[0]}a/{quoted[1:]} {quoted[0]}b/{quoted[1:]}\n"
        f"new file mode 100644\n--- /dev/null\n+++ {quoted[0]}b/{quoted[1:]}\n"
        "@@ -0,0 +1 @@\n+hello\n"
    )
    with case("patch: shell metacharacters reach no shell") as c:
        ci.apply_patch(tree, patch)
        c.lost = int(marker.exists())  # a shell's side effect
        assert not marker.exists(), f"a shell ran: {marker}"
        assert (tree / name).read_text() == "hello\n"  # the name was written, as data
