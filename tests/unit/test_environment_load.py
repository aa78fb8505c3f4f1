"""An environment's load runs as long as the environment."""

from __future__ import annotations

from pathlib import Path

from sreforge.runtime import environment
from sreforge.scenarios import discover

ROOT = Path(__file__).resolve().parents[2]


def test_an_environments_load_outlives_any_session() -> None:
    """A warm session of many cases with their soaks outlasts the profile's 30 minutes:
    the environment's load and prober run until the harness stops them."""
    for scenario in discover(ROOT / "scenarios"):
        load = environment.environment_load(scenario)
        assert load.duration_seconds == environment.LOAD_LIFETIME_SECONDS >= 12 * 3600
        assert load.model_dump(exclude={"duration_seconds"}) == scenario.load.model_dump(
            exclude={"duration_seconds"}
        )
