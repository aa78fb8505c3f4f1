"""Reading scenarios from disk: `scenarios/<name>/scenario.toml` and the files beside it.

The models are pure (sreforge.api.scenario); this module is where a scenario's files are
read, listed and checked for existence.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from sreforge.api.scenario import Scenario, ScenarioError


def _format_validation(file: Path, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"{file}: {field}: {e['msg']}")
    return "\n".join(lines)


def load_scenario(path: Path | str) -> Scenario:
    """Load and validate a scenario from its directory (or its scenario.toml).

    Raises ScenarioError whose message names the file, the field and the problem.
    """
    path = Path(path)
    directory = path.parent if path.name == "scenario.toml" else path
    file = directory / "scenario.toml"
    if not file.is_file():
        raise ScenarioError(f"{file}: no such file (a scenario is a directory with scenario.toml)")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{file}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{file}: not UTF-8 text: {exc}") from exc
    if "directory" in data:
        raise ScenarioError(f"{file}: directory: not a scenario.toml field")
    try:
        scenario = Scenario.model_validate({**data, "directory": directory.resolve()})
    except ValidationError as exc:
        raise ScenarioError(_format_validation(file, exc)) from exc
    for label, required in (
        ("rules", scenario.rules_path),
        ("regression", scenario.regression_path),
        ("brief", scenario.brief_path),
        ("root cause", scenario.root_cause_path),
    ):
        if not required.is_file():
            raise ScenarioError(f"{file}: {label}: {required.name} is missing in {directory}")
    for i, patch in enumerate(scenario.history_paths):
        if not patch.is_file():
            raise ScenarioError(f"{file}: history.commits.{i}.patch: {patch} is missing")
    return scenario


def discover(root: Path) -> list[Scenario]:
    """Every scenario under `root` (each subdirectory holding a scenario.toml), by name."""
    return [load_scenario(p.parent) for p in sorted(root.glob("*/scenario.toml"))]


def fixes(scenario: Scenario) -> list[Path]:
    """The scenario's known-good patches (`fixes/*.patch`), by name."""
    return sorted((scenario.directory / "fixes").glob("*.patch"))


def decoys(scenario: Scenario) -> list[Path]:
    """The scenario's patches that must not pass (`decoys/*.patch`), by name."""
    return sorted((scenario.directory / "decoys").glob("*.patch"))
