"""[load] as a traffic mix: the single-route form still reads, a bad mix is refused with its
file, field and problem; ids follow a seeded Zipf popularity; request bodies fill in ids."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from sreforge.api import ScenarioError
from sreforge.api.scenario import LoadProfile, Route
from sreforge.load.generator import request_body, request_path
from sreforge.load.popularity import Popularity
from sreforge.runtime.kube.config import INCIDENT_LABEL, SCENARIO_LABEL, OperatorConfig
from sreforge.runtime.kube.render import render_load
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "scenarios" / "latency-cache-stampede"  # [[load.routes]]
SINGLE = ROOT / "scenarios" / "configuration-retry-storm"  # the single `path` form


def test_the_single_path_form_is_a_mix_of_one_route() -> None:
    load = load_scenario(SINGLE).load
    assert not load.routes
    [route] = load.mix()
    assert (route.path, route.method, route.label) == ("/prices/{id}", "GET", "/prices/{id}")
    assert route.id_range == load.id_range
    assert route.known_answers == load.known_answers > 0
    assert route.expect_json_id


def test_a_mix_resolves_each_routes_id_range_and_keeps_its_weights() -> None:
    load = load_scenario(MIXED).load
    mix = load.mix()
    assert [(r.label, r.weight) for r in mix] == [("product", 5), ("stock", 1)]
    assert all(r.id_range == (1, 300) and r.known_answers == 300 for r in mix)
    # the prober: the same mix and answers, at its own low rate
    probe = load.probe()
    assert probe.rate == load.probe_rate < load.rate
    assert probe.mix() == mix


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        ('path = "/products/{id}"\n', 'path = "products"\n', "load.routes.0.path", "pattern"),
        ("weight = 5\n", "weight = 0\n", "load.routes.0.weight", "greater than or equal to 1"),
        ('name = "stock"\n', 'name = "product"\n', "load", "route names"),
        ('name = "product"\n', 'name = "pro duct"\n', "load.routes.0.name", "pattern"),
        (
            "weight = 5\n",
            'weight = 5\nmethod = "GET"\nbody = { id = "{id}" }\n',
            "load.routes.0",
            "sends no body",
        ),
        ("weight = 5\n", "weight = 5\nid_range = [9, 1]\n", "load.routes.0", "low <= high"),
        ("weight = 5\n", 'weight = 5\nmethod = "BREW"\n', "load.routes.0.method", "Input should"),
        ("weight = 5\n", "weight = 5\nsurprise = 1\n", "load.routes.0.surprise", "Extra inputs"),
        ("timeout_ms = 2000\n", 'timeout_ms = 2000\npath = "/x/{id}"\n', "load", "not both"),
        ("timeout_ms = 2000\n", "timeout_ms = 2000\nzipf_exponent = 0\n", "load.zipf_exponent", ""),
        ("timeout_ms = 2000\n", 'timeout_ms = 2000\npopularity = "hot"\n', "load.popularity", ""),
    ],
)
def test_an_invalid_mix_names_file_field_problem(
    tmp_path: Path, old: str, new: str, field: str, problem: str
) -> None:
    d = tmp_path / "s"
    shutil.copytree(MIXED, d)
    toml = d / "scenario.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(text.replace(old, new, 1))
    with pytest.raises(ScenarioError) as err:
        load_scenario(d)
    msg = str(err.value)
    assert str(toml) in msg
    assert f"{field}: " in msg or f"{field}\n" in msg or msg.endswith(field), msg
    assert problem in msg


def test_zipf_draws_follow_the_law_and_the_layout_is_the_seeds() -> None:
    pop = Popularity(1, 300, seed=7)
    rng = random.Random(1)
    counts = Counter(pop.draw(rng) for _ in range(60_000))
    harmonic = sum(1 / k for k in range(1, 301))
    for rank in (1, 2, 10):
        share = counts[pop.id_of(rank)] / 60_000
        assert share == pytest.approx((1 / rank) / harmonic, rel=0.15), rank
    assert pop.top(3) == [pop.id_of(1), pop.id_of(2), pop.id_of(3)]
    assert sorted(pop.id_of(r) for r in range(1, 301)) == list(range(1, 301))  # a permutation
    # the load and the prober, given one seed, agree on which ids are popular; another
    # run's seed scatters them elsewhere
    assert Popularity(1, 300, seed=7).top(10) == pop.top(10)
    assert Popularity(1, 300, seed=8).top(10) != pop.top(10)


def test_a_million_ids_cost_no_table_and_uniform_spreads_its_known_ids() -> None:
    pop = Popularity(1, 1_000_000, exponent=0.8, seed=3)
    rng = random.Random(2)
    ids = [pop.draw(rng) for _ in range(5000)]
    assert all(1 <= i <= 1_000_000 for i in ids)
    assert len(set(ids)) > 3500  # a long tail: most lookups are of ids asked for once
    uniform = Popularity(1, 100, kind="uniform", seed=3)
    assert uniform.top(20) == list(range(1, 101, 5))
    assert uniform.top(500) == list(range(1, 101))


def test_request_paths_and_bodies_fill_in_the_id() -> None:
    post = Route(path="/orders/{id}", method="POST")
    assert request_body(post, 7) == b'{"id":7}'
    templ = Route(path="/carts/{id}/items", method="PUT", body={"sku": "{id}", "note": "n-{id}"})
    assert request_body(templ, 12) == b'{"sku":12,"note":"n-12"}'
    assert request_body(Route(path="/p/{id}"), 3) is None
    assert request_path(Route(path="/p/{id}?v={id}"), 3) == "/p/3?v=3"
    assert request_path(Route(path="/a b/{id}"), 3) == "/a%20b/3"


def test_a_profile_round_trips_through_its_json() -> None:
    load = load_scenario(MIXED).load
    assert LoadProfile.model_validate_json(load.model_dump_json()) == load


def test_a_k6_load_without_a_prometheus_is_refused_naming_the_field() -> None:
    incident = {
        "metadata": {"name": "inc", "namespace": "ns", "uid": "u-1"},
        "spec": {"scenario": "latency-cache-stampede"},
    }
    with pytest.raises(ValueError, match=r"spec\.prometheusURL"):
        render_load(incident, load_scenario(MIXED).load, "http://c:1", "k6", OperatorConfig())


def test_the_k6_job_writes_to_the_incidents_prometheus_tagged_with_whose_it_is() -> None:
    incident = {
        "metadata": {"name": "inc", "namespace": "ns", "uid": "u-1"},
        "spec": {"scenario": "latency-cache-stampede"},
    }
    cfg = OperatorConfig()
    objs = render_load(
        incident,
        load_scenario(MIXED).load,
        "http://c:1",
        "k6",
        cfg,
        prometheus_url="http://p:9090/",
    )
    job = next(o for o in objs if o["metadata"]["name"] == "inc-load")
    [box] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in box["env"]}
    assert env["K6_PROMETHEUS_RW_SERVER_URL"] == "http://p:9090/api/v1/write"
    args = box["args"]
    tags = {args[i + 1] for i, a in enumerate(args) if a == "--tag"}
    # the labels the recording rules keep: whose load, in the operator's scope
    assert tags == {"namespace=ns", "incident=inc", "sreforge_scenario=latency-cache-stampede"}


def test_the_prober_is_rendered_beside_the_load_with_one_id_layout() -> None:
    incident = {
        "metadata": {"name": "inc", "namespace": "ns", "uid": "u-1"},
        "spec": {"scenario": "latency-cache-stampede"},
    }
    load = load_scenario(MIXED).load
    for runner in ("generator", "k6"):
        cfg = OperatorConfig()
        objs = render_load(
            incident, load, "http://catalog:8080", runner, cfg, prometheus_url="http://prom:9090"
        )
        jobs = [o for o in objs if o["kind"] == "Job"]
        assert [j["metadata"]["name"] for j in jobs] == ["inc-load", "inc-probe"]
        apps = [j["spec"]["template"]["metadata"]["labels"]["app"] for j in jobs]
        assert apps == ["loadgen", "prober"]
        for j in jobs:  # both read by the Incident's scoped telemetry and its scenario's rules
            pod_labels = j["spec"]["template"]["metadata"]["labels"]
            assert pod_labels[INCIDENT_LABEL] == "inc"
            assert pod_labels[SCENARIO_LABEL] == "latency-cache-stampede"
        probe_cmd = jobs[1]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
        assert "--series probe" in probe_cmd
        seed = probe_cmd.split("--ids-seed ")[1].split()[0]
        if runner == "generator":
            assert (
                f"--ids-seed {seed}"
                in jobs[0]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
            )
        else:  # the k6 script draws its ids over the same layout
            [cm] = [o for o in objs if o["kind"] == "ConfigMap"]
            assert f"randomSeed({seed});" in next(iter(cm["data"].values()))
        assert all(j["metadata"]["ownerReferences"][0]["uid"] == "u-1" for j in jobs)
