"""The image recipes: every Dockerfile takes its base as the build-arg BASE_IMAGE (users
keep the public base by default; hack/images.sh passes its debootstrap base), names no
image it would have to pull besides that base, and hack/images.sh names one image per
scenario. Building them is tests/integration/kube/test_images.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from sreforge import scenarios

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "images.sh"
# the Python images (the operator, the substrate services, a fetched third-party service)
# and their public base
SOURCE_DOCKERFILE = REPO / "hack" / "images" / "source.Dockerfile"
PYTHON_DOCKERFILES = [
    REPO / "Dockerfile",
    *sorted((REPO / "substrate").glob("*/Dockerfile")),
    SOURCE_DOCKERFILE,
]
PYTHON_BASE = "python:3.11-slim"
# the images only hack/images.sh builds (Redis, PostgreSQL, Prometheus): Debian's own base
HACK_DOCKERFILES = sorted(
    p for p in (REPO / "hack" / "images").glob("*.Dockerfile") if p != SOURCE_DOCKERFILE
)
DEBIAN_BASE = "debian:bookworm-slim"
# the scenarios with images (runtimes has "kube"); a local-only one has none yet
KUBE_SCENARIOS = [s for s in scenarios.discover(REPO / "scenarios") if "kube" in s.runtimes]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def instructions(path: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction: comments dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), " ".join(rest.split())))
    assert not pending, f"{path}: a continuation runs off the end"
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (from its FROM on), in order."""
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(path):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def final_image(path: Path) -> list[tuple[str, str]]:
    """The instructions that make the final image: its stage and the stages it starts FROM."""
    by_name = {s[0][1].split()[-1]: s for s in stages(path) if len(s[0][1].split()) == 3}
    chain = [stages(path)[-1]]
    while (parent := chain[-1][0][1].split()[0]) in by_name:
        chain.append(by_name[parent])
    return [ins for stage in reversed(chain) for ins in stage]


def test_the_recipes_are_all_found() -> None:
    names = {rel(p) for p in PYTHON_DOCKERFILES + HACK_DOCKERFILES}
    assert {
        "Dockerfile",
        "substrate/catalog/Dockerfile",
        "substrate/pricing/Dockerfile",
        "substrate/supplier/Dockerfile",
        "hack/images/redis.Dockerfile",
        "hack/images/postgresql.Dockerfile",
        "hack/images/prometheus.Dockerfile",
        "hack/images/source.Dockerfile",
    } <= names


@pytest.mark.parametrize(
    ("dockerfile", "public_base"),
    [(p, PYTHON_BASE) for p in PYTHON_DOCKERFILES] + [(p, DEBIAN_BASE) for p in HACK_DOCKERFILES],
    ids=lambda v: rel(v) if isinstance(v, Path) else v,
)
def test_every_stage_builds_on_base_image_which_defaults_to_the_public_base(
    dockerfile: Path, public_base: str
) -> None:
    first = instructions(dockerfile)[0]
    assert first == ("ARG", f"BASE_IMAGE={public_base}"), f"{dockerfile}: first line {first}"
    named: set[str] = set()
    for stage in stages(dockerfile):
        words = stage[0][1].split()
        assert words[0] in {"${BASE_IMAGE}", *named}, f"{dockerfile}: FROM {stage[0][1]}"
        if len(words) == 3 and words[1].upper() == "AS":
            named.add(words[2])


@pytest.mark.parametrize("dockerfile", PYTHON_DOCKERFILES + HACK_DOCKERFILES, ids=rel)
def test_no_dockerfile_pulls_a_frontend_image(dockerfile: Path) -> None:
    """`# syntax=docker/dockerfile:1` makes BuildKit pull that image: impossible with no
    registry; the engine's built-in frontend has RUN --mount."""
    text = dockerfile.read_text(encoding="utf-8")
    assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE)


@pytest.mark.parametrize("dockerfile", PYTHON_DOCKERFILES, ids=rel)
def test_python_images_install_into_a_venv_and_run_as_uid_10001(dockerfile: Path) -> None:
    """PEP 668: Debian's python3 refuses `pip install` outside a venv; /opt/venv serves
    both bases. Non-root with a numeric uid (runAsNonRoot can verify it)."""
    final = final_image(dockerfile)
    assert ("ENV", "PATH=/opt/venv/bin:$PATH") in final
    assert any(k == "RUN" and "python3 -m venv /opt/venv" in a for k, a in final)
    users = [a for k, a in final if k == "USER"]
    assert users[-1] == "10001:10001"


@pytest.mark.parametrize(
    "dockerfile",
    [p for p in PYTHON_DOCKERFILES if "SREFORGE_PATCH" in p.read_text(encoding="utf-8")],
    ids=rel,
)
def test_a_regression_patch_lands_after_the_dependency_layers(dockerfile: Path) -> None:
    """A scenario's image differs from the healthy one only in layers after the
    dependencies: a changed patch rebuilds those and reuses the rest."""
    final = stages(dockerfile)[-1]
    head = final[0][1].split()[0]
    runtime = next(s for s in stages(dockerfile) if s[0][1].split()[1:] == ["AS", head])
    assert any(k == "RUN" and "pip install" in a for k, a in runtime)
    assert not any("SREFORGE_PATCH" in a for _, a in runtime)
    patched = [i for i, (k, a) in enumerate(final) if k == "COPY" and "--from=source" in a]
    assert patched, f"{dockerfile}: the final stage does not take the patched source"


def test_every_scenario_service_can_be_built_with_its_regression() -> None:
    fetched = 0
    for sc in KUBE_SCENARIOS:
        dockerfile = REPO / sc.service.source / "Dockerfile"
        if (REPO / sc.service.source / "source.toml").is_file():
            dockerfile = SOURCE_DOCKERFILE  # on the context `sreforge sources context` stages
            fetched += 1
        assert any(ins == ("ARG", 'SREFORGE_PATCH=""') for ins in instructions(dockerfile)), (
            f"{sc.name}: {dockerfile} takes no SREFORGE_PATCH"
        )
    assert fetched >= 8, "the scenarios on fetched third-party services have images"


def run_script(*args: str, prefix: str = "test.invalid/sf-") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SREFORGE_IMAGE_PREFIX": prefix}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False
    )


def test_list_names_a_tag_per_scenario_and_every_image_a_scenario_needs() -> None:
    res = run_script("list", prefix="test.invalid/sf-")
    assert res.returncode == 0, res.stderr
    names = res.stdout.split()
    assert len(names) == len(set(names))
    expected = {"test.invalid/sf-operator:dev", "test.invalid/sf-runner:dev"}
    deps: set[str] = set()
    for sc in KUBE_SCENARIOS:
        svc = sc.service
        expected |= {f"test.invalid/sf-{svc.name}:{sc.name}", f"test.invalid/sf-{svc.name}:healthy"}
        expected |= {f"test.invalid/sf-{up.name}:healthy" for up in svc.upstreams}
        deps |= set(svc.dependencies)
    assert deps == {"redis", "postgresql"}, deps
    expected |= {"test.invalid/sf-redis:7", "test.invalid/sf-postgresql:15"}
    assert expected <= set(names), sorted(expected - set(names))
    assert any(re.fullmatch(r"test\.invalid/sf-prometheus:v3\.\d+\.\d+", n) for n in names)
    assert any(n.startswith("test.invalid/sf-pause:") for n in names)
    # the chart's bundled Prometheus: the same version as the image built here
    values = yaml.safe_load((REPO / "charts" / "sreforge" / "values.yaml").read_text("utf-8"))
    assert f"test.invalid/sf-prometheus:{values['prometheus']['image']['tag']}" in names


def test_script_help_and_unknown_commands() -> None:
    res = run_script("--help")
    assert res.returncode == 0
    for word in ("all", "base", "build", "load", "list", "--address", "SREFORGE_IMAGES_DIR"):
        assert word in res.stdout
    bad = run_script("frobnicate")
    assert bad.returncode == 2
    assert "unknown command" in bad.stderr
    missing = run_script("build", "nosuchservice:healthy")
    assert missing.returncode != 0
    assert "no image test.invalid/sf-nosuchservice:healthy" in missing.stderr
