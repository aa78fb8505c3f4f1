"""A third-party service under test, fetched rather than committed: `substrate/<name>/source.toml`.

The service's source is a release sdist from PyPI, pinned by version and by the sha256 of
the file; what it runs with is a pinned requirements file beside source.toml, installed
into a virtual environment of its own. Pure model: sreforge.runtime.sources fetches.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# Exact pins only: `name==version`, one per line (comments and blank lines allowed).
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")


class SourceSpec(BaseModel):
    """What to fetch, how to check it, and what it needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")]
    version: Annotated[str, Field(pattern=r"^[0-9][0-9A-Za-z.+-]*$")]
    license: Annotated[str, Field(min_length=1)]
    url: Annotated[str, Field(pattern=r"^https://[^\s]+\.tar\.gz$")]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    # the project's own test suite, inside the unpacked tree (checked at fetch)
    tests: Annotated[str, Field(pattern=r"^[^/][^\s]*$")] = "tests"
    requirements: str = "requirements.txt"
    # Pinned requirements that publish no wheel for their pinned version, built from their
    # sdist (everything else is installed from wheels only, so no other package's build
    # code runs): each must name a pin of the requirements file.
    sdists: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]] = Field(
        default_factory=list
    )
    # the deployment's own files (its config, its data loader), copied onto the release's
    # tree: what a team that runs the service keeps beside it (committed: ours, not theirs)
    overlay: str | None = None

    @field_validator("url")
    @classmethod
    def _url_names_the_release(cls, url: str, info: ValidationInfo) -> str:
        name, version = info.data.get("name"), info.data.get("version")
        if name and version:
            names = {f"{name}-{version}.tar.gz", f"{name.replace('-', '_')}-{version}.tar.gz"}
            if url.rsplit("/", 1)[-1] not in names:
                raise ValueError(
                    f"url must end with /{name}-{version}.tar.gz (this version's sdist)"
                )
        return url

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def pinned_lines(requirements: str) -> list[str]:
    """The requirement lines of a requirements file, without comments and blank lines."""
    lines = (raw.split("#", 1)[0].strip() for raw in requirements.splitlines())
    return [line for line in lines if line]


def pinned_names(requirements: str) -> set[str]:
    """The normalised names (PEP 503) the pins of a requirements file name."""
    return {
        normalise(line.split("==", 1)[0].split("[", 1)[0])
        for line in pinned_lines(requirements)
        if _PIN.match(line)
    }


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unpinned(requirements: str) -> list[str]:
    """The lines of a requirements file that are not an exact `name==version` pin."""
    return [line for line in pinned_lines(requirements) if not _PIN.match(line)]
