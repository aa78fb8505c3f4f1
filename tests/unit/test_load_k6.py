"""sreforge.load.k6: the k6 script is valid JS that does what the profile says; the Jobs
are locked down and mount what they run.

The script is syntax-checked with `node --check` and, with k6's two modules replaced by
stubs, executed by node to see the request it makes and how its checks judge responses.
k6 itself is never installed or run here.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sreforge.api.scenario import LoadProfile, Route
from sreforge.load import k6series
from sreforge.load.generator import request_authorization
from sreforge.load.k6 import (
    K6_IMAGE,
    METRICS_PORT,
    SCRIPT_KEY,
    k6_options,
    render_generator_job,
    render_k6_configmap,
    render_k6_job,
    render_k6_script,
)

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed (needed for node --check)"
)

# Uniform ids and a new visitor per request: the stubbed Math.random() maps to an id
# directly (popularity is tested in test_load_popularity.py).
UNIFORM: dict[str, Any] = {"popularity": "uniform", "new_connection_ratio": 1.0}

PROFILES = [
    LoadProfile(rate=1, duration_seconds=1, max_in_flight=1),
    LoadProfile(
        rate=100, duration_seconds=60, path="/items/{id}", id_range=(1, 1000), expect_json_id=True
    ),
    LoadProfile(
        rate=20_000,
        duration_seconds=1800,
        max_in_flight=100_000,
        timeout_ms=120_000,
        method="POST",
        path="/api/v1/orders/{id}?expand=lines&note='x'",
        id_range=(-5, 5),
        expect_status=201,
        expect_json_id=True,
    ),
    LoadProfile(rate=37, duration_seconds=7, path="/{id}/{id}", id_range=(9, 9), expect_status=404),
]

profiles = st.builds(
    LoadProfile,
    rate=st.integers(1, 20_000),
    max_in_flight=st.integers(1, 100_000),
    timeout_ms=st.integers(10, 120_000),
    duration_seconds=st.integers(1, 86_400),
    method=st.sampled_from(["GET", "POST"]),
    path=st.from_regex(r"\A/[a-z0-9/_\-]{0,20}(\{id\})?[a-z0-9/_\-\"'\\ ]{0,8}\Z"),
    id_range=st.tuples(st.integers(-1000, 1000), st.integers(0, 1000)).map(
        lambda t: (min(t), max(t))
    ),
    expect_status=st.integers(100, 599),
    expect_json_id=st.booleans(),
    known_answers=st.integers(0, 50),
)

_K6_HTTP_STUB = """\
globalThis.__ENV = JSON.parse(process.env.STUB_ENV || '{}');
export const calls = [];
function respond(url) {
  const mode = process.env.STUB_MODE;
  const status = Number(process.env.STUB_STATUS);
  if (mode === 'item' || mode === 'liar') {
    // /item/{id}: the truth while learning (setup); when run, the same document with
    // its keys in another order ('item') or a made-up one ('liar')
    const id = Number(url.split('/item/')[1]);
    const truth = { id, name: `item ${id}` };
    if (globalThis.__PHASE === 'setup') return { status, body: JSON.stringify(truth) };
    const name = mode === 'liar' ? 'anything' : `item ${id}`;
    return { status, body: JSON.stringify({ name, id }) };
  }
  const id = Number(process.env.STUB_ID ?? 0);
  if (mode === 'notjson') return { status, body: 'oops' };
  if (mode === 'wrong') return { status, body: JSON.stringify({ id: id + 1 }) };
  return { status, body: JSON.stringify({ id }) };
}
// k6's Response fields the script reads besides status and body
function answer(url) {
  const res = respond(url);
  const ms = Number(process.env.STUB_MS ?? 30);
  res.timings = { blocked: 1, connecting: 2, tls_handshaking: 0, duration: ms - 3 };
  res.error_code = Number(process.env.STUB_ERROR_CODE ?? 0);
  return res;
}
export default {
  request(method, url, body, params) {
    calls.push({ method, url, body, params });
    return answer(url);
  },
  batch(requests) {
    return requests.map(([method, url, body, params]) => {
      calls.push({ method, url, body, params });
      return answer(url);
    });
  },
};
"""
_K6_ENCODING_STUB = """\
export default { b64encode: (s) => Buffer.from(s, 'utf-8').toString('base64') };
"""
_K6_STUB = """\
export const results = [];
export const seeds = [];
export function randomSeed(seed) {
  seeds.push(seed);
}
export function check(res, checks) {
  const r = {};
  for (const [name, fn] of Object.entries(checks)) r[name] = fn(res);
  results.push(r);
  return Object.values(r).every(Boolean);
}
"""
_K6_METRICS_STUB = """\
export const added = [];
class Metric {
  constructor(name) {
    this.name = name;
  }
  add(value, tags) {
    added.push({ metric: this.name, type: this.constructor.name, value, tags: tags || {} });
  }
}
export class Counter extends Metric {}
export class Gauge extends Metric {}
"""
_DRIVER = """\
import run, { options, setup } from './script.mjs';
import { calls } from './k6_http.mjs';
import { results } from './k6.mjs';
import { added } from './k6_metrics.mjs';
Math.random = () => Number(process.env.STUB_RANDOM);
globalThis.__PHASE = 'setup';
const data = setup();
const learning = calls.splice(0, calls.length);
globalThis.__PHASE = 'run';
run(data);
console.log(JSON.stringify({ options, learning, data, calls, results, added }));
"""


def _options_literal(script: str) -> dict[str, Any]:
    """The `options` object, parsed as data (the renderer writes it as a JSON literal)."""
    m = re.search(r"^export const options = (\{.*?^\});$", script, re.S | re.M)
    assert m, "no `export const options = {...};` in the script"
    return json.loads(m.group(1))


def _node_check(script: str, tmp: Path) -> None:
    path = tmp / "script.mjs"
    path.write_text(script, encoding="utf-8")
    proc = subprocess.run(
        [NODE, "--check", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr


def _node_run(
    script: str,
    tmp: Path,
    *,
    random: float,
    status: int,
    mode: str,
    ident: int,
    env: dict[str, str] | None = None,
    stub: dict[str, str] | None = None,
) -> dict[str, Any]:
    stubbed = (
        script.replace("from 'k6/http';", "from './k6_http.mjs';")
        .replace("from 'k6';", "from './k6.mjs';")
        .replace("from 'k6/metrics';", "from './k6_metrics.mjs';")
        .replace("from 'k6/encoding';", "from './k6_encoding.mjs';")
    )
    assert stubbed.count("./k6") == 4, "the script's imports changed; update the stubs"
    (tmp / "script.mjs").write_text(stubbed, encoding="utf-8")
    (tmp / "k6_http.mjs").write_text(_K6_HTTP_STUB, encoding="utf-8")
    (tmp / "k6.mjs").write_text(_K6_STUB, encoding="utf-8")
    (tmp / "k6_metrics.mjs").write_text(_K6_METRICS_STUB, encoding="utf-8")
    (tmp / "k6_encoding.mjs").write_text(_K6_ENCODING_STUB, encoding="utf-8")
    (tmp / "driver.mjs").write_text(_DRIVER, encoding="utf-8")
    proc = subprocess.run(
        [NODE, str(tmp / "driver.mjs")],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
        env={
            "PATH": "/usr/bin:/bin",
            "STUB_RANDOM": repr(random),
            "STUB_STATUS": str(status),
            "STUB_MODE": mode,
            "STUB_ID": str(ident),
            "STUB_ENV": json.dumps(env or {}),
            **(stub or {}),
        },
    )
    assert proc.returncode == 0, proc.stderr
    *logged, last = proc.stdout.strip().splitlines()  # setup() logs what it learned
    assert any(line.startswith("learned ") for line in logged), proc.stdout
    return json.loads(last)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: f"rate{p.rate}")
def test_options_carry_the_profile(profile: LoadProfile) -> None:
    script = render_k6_script(profile, "http://svc.ns.svc:8080/")
    options = _options_literal(script)
    assert options == k6_options(profile)
    sc = options["scenarios"]["incident"]
    assert sc["executor"] == "constant-arrival-rate"
    assert sc["rate"] == profile.rate
    assert sc["timeUnit"] == "1s"
    assert sc["duration"] == f"{profile.duration_seconds}s"
    assert sc["maxVUs"] == profile.max_in_flight
    assert 1 <= sc["preAllocatedVUs"] <= sc["maxVUs"]
    assert "thresholds" not in options
    assert options["discardResponseBodies"] is (not profile.expect_json_id)


@needs_node
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: f"rate{p.rate}")
def test_script_passes_node_check(profile: LoadProfile, tmp_path: Path) -> None:
    _node_check(render_k6_script(profile, "http://127.0.0.1:8080"), tmp_path)


@needs_node
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(profile=profiles)
def test_any_profile_renders_valid_js(profile: LoadProfile, tmp_path: Path) -> None:
    script = render_k6_script(profile, "http://svc:80")
    sc = _options_literal(script)["scenarios"]["incident"]
    assert (sc["rate"], sc["duration"], sc["maxVUs"]) == (
        profile.rate,
        f"{profile.duration_seconds}s",
        profile.max_in_flight,
    )
    _node_check(script, tmp_path)


@needs_node
@pytest.mark.parametrize(
    ("mode", "status", "expected"),
    [
        ("echo", 200, {"status is 200": True, "body id matches": True}),
        ("wrong", 200, {"status is 200": True, "body id matches": False}),
        ("notjson", 200, {"status is 200": True, "body id matches": False}),
        ("echo", 503, {"status is 200": False, "body id matches": True}),
    ],
)
def test_request_and_checks_run_in_node(
    mode: str, status: int, expected: dict[str, bool], tmp_path: Path
) -> None:
    profile = LoadProfile(
        rate=10, path="/items/{id}?v={id}", id_range=(10, 19), expect_json_id=True, **UNIFORM
    )
    script = render_k6_script(profile, "http://svc:8080/")
    # Math.random() = 0.55 -> id = 10 + floor(0.55 * 10) = 15
    out = _node_run(script, tmp_path, random=0.55, status=status, mode=mode, ident=15)
    [call] = out["calls"]
    assert call["method"] == "GET"
    assert call["url"] == "http://svc:8080/items/15?v=15"
    assert call["body"] is None
    assert call["params"]["timeout"] == "2000ms"
    assert out["results"] == [expected]


@needs_node
def test_an_api_clients_basic_credentials_are_its_own(tmp_path: Path) -> None:
    """A route with basic_auth sends the id's own account, as the generator does."""
    profile = LoadProfile(
        rate=10,
        routes=[
            Route(path="/records/p-{id}", id_range=(10, 19), basic_auth=("client-{id}", "s-{id}"))
        ],
        **UNIFORM,
    )
    out = _node_run(
        render_k6_script(profile, "http://svc:8080"),
        tmp_path,
        random=0.55,
        status=200,
        mode="echo",
        ident=15,
    )
    [call] = out["calls"]
    assert call["url"] == "http://svc:8080/records/p-15"
    assert (
        call["params"]["headers"]["Authorization"]
        == "Basic " + base64.b64encode(b"client-15:s-15").decode()
    )
    [route] = profile.mix()
    assert request_authorization(route, 15) == call["params"]["headers"]["Authorization"]


@needs_node
def test_post_body_env_override_and_no_id_check(tmp_path: Path) -> None:
    profile = LoadProfile(
        rate=5, method="POST", path="/orders/{id}", id_range=(1, 3), expect_status=201, **UNIFORM
    )
    script = render_k6_script(profile, "http://default:1")
    out = _node_run(
        script,
        tmp_path,
        random=0.999,
        status=201,
        mode="wrong",
        ident=3,
        env={"SREFORGE_TARGET": "http://override:9/"},
    )
    [call] = out["calls"]
    assert call["url"] == "http://override:9/orders/3"
    assert json.loads(call["body"]) == {"id": 3}
    assert out["results"] == [{"status is 201": True}]  # no body check without expect_json_id


@needs_node
@pytest.mark.parametrize(
    ("mode", "expected"),
    [("item", True), ("liar", False)],
)
def test_known_answers_are_learned_in_setup_and_checked(
    mode: str, expected: bool, tmp_path: Path
) -> None:
    profile = LoadProfile(
        rate=10,
        path="/item/{id}",
        id_range=(1, 100),
        expect_json_id=True,
        known_answers=20,
        **UNIFORM,
    )
    script = render_k6_script(profile, "http://svc:8080")
    assert _options_literal(script)["discardResponseBodies"] is False
    # Math.random() = 0.55 -> id 56: known (the known ids are 1, 6, 11, ..., 96)
    out = _node_run(script, tmp_path, random=0.55, status=200, mode=mode, ident=0)
    assert sorted(int(c["url"].rsplit("/", 1)[1]) for c in out["learning"]) == list(
        range(1, 101, 5)
    )
    assert all(c["params"]["tags"] == {"name": "learn"} for c in out["learning"])
    assert out["data"]["known"]["/item/{id}"]["56"] == '{"id":56,"name":"item 56"}'
    [call] = out["calls"]
    assert call["url"] == "http://svc:8080/item/56"
    assert out["results"] == [
        {"status is 200": True, "body id matches": True, "matches the known answer": expected}
    ]
    # an id without a known answer is judged by status and id alone
    out = _node_run(script, tmp_path, random=0.0, status=200, mode="liar", ident=0)
    assert out["calls"][0]["url"] == "http://svc:8080/item/1"
    assert out["results"][0]["matches the known answer"] is False  # 1 is known
    out = _node_run(script, tmp_path, random=0.02, status=200, mode="liar", ident=0)
    assert out["calls"][0]["url"] == "http://svc:8080/item/3"
    assert out["results"][0]["matches the known answer"] is True  # 3 is not


@needs_node
def test_unlearnable_answers_leave_nothing_known(tmp_path: Path) -> None:
    profile = LoadProfile(rate=10, path="/item/{id}", id_range=(1, 4), known_answers=4, **UNIFORM)
    script = render_k6_script(profile, "http://svc:8080")
    out = _node_run(script, tmp_path, random=0.0, status=503, mode="item", ident=0)
    assert len(out["learning"]) == 4 * 3  # every id, three attempts
    assert out["data"] == {"known": {"/item/{id}": {}}}
    assert out["results"] == [{"status is 200": False, "matches the known answer": True}]


@needs_node
@pytest.mark.parametrize(
    ("mode", "status", "error_code", "outcome"),
    [
        ("echo", 200, 0, "success"),
        ("wrong", 200, 0, "invalid"),
        ("echo", 503, 0, "http_error"),
        ("echo", 0, 1050, "timeout"),  # k6: request timeout
        ("echo", 0, 1211, "timeout"),  # k6: dial timeout
        ("echo", 0, 1212, "connect_error"),  # k6: connection refused
    ],
)
def test_each_request_adds_the_series_the_recording_rules_read(
    mode: str, status: int, error_code: int, outcome: str, tmp_path: Path
) -> None:
    """Per request: its outcome (the generator's), its latency in every cumulative bucket
    from its own up (the generator's bounds and `le` labels), and the target rate; the
    names are k6series's, which its recording rules read as k6_<name>_total / k6_<name>."""
    items = Route(path="/items/{id}", name="items", expect_json_id=True)
    profile = LoadProfile(rate=10, id_range=(10, 19), routes=[items], **UNIFORM)
    script = render_k6_script(profile, "http://svc:8080/")
    out = _node_run(
        script,
        tmp_path,
        random=0.55,
        status=status,
        mode=mode,
        ident=15,
        stub={"STUB_MS": "30", "STUB_ERROR_CODE": str(error_code)},
    )
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for a in out["added"]:
        by_metric.setdefault(a["metric"], []).append(a)
    [req] = by_metric[k6series.REQUESTS_METRIC]
    assert req["type"] == "Counter"
    assert req["value"] == 1
    assert req["tags"] == {"route": "items", "outcome": outcome}
    buckets = by_metric[k6series.BUCKET_METRIC]
    assert {b["type"] for b in buckets} == {"Counter"}
    assert all(b["value"] == 1 and b["tags"]["route"] == "items" for b in buckets)
    # 30 ms: every bound from 0.05 s up, +Inf included; not 0.025 s and below
    assert [b["tags"]["le"] for b in buckets] == [
        le for bound, le in k6series.bucket_bounds() if bound >= 0.03
    ]
    [rate] = by_metric[k6series.TARGET_RATE_METRIC]
    assert (rate["type"], rate["value"]) == ("Gauge", 10)


def test_k6_job_writes_to_prometheus_with_whose_tags() -> None:
    tags = k6series.job_tags("demo", "inc-1", "latency-cache-stampede")
    job = render_k6_job(
        "l", "demo", PROFILES[1], "http://s:1", "cm",
        remote_write_url="http://prometheus.sreforge-system.svc:9090/api/v1/write", tags=tags,
    )  # fmt: skip
    [c] = _pod(job)["containers"]
    args = c["args"]
    assert args[0] == "run"
    assert args[-1] == f"/scripts/{SCRIPT_KEY}"
    assert args[args.index("--out") + 1] == "experimental-prometheus-rw"
    given_tags = [args[i + 1] for i, a in enumerate(args) if a == "--tag"]
    assert given_tags == [
        "incident=inc-1",
        "namespace=demo",
        "sreforge_scenario=latency-cache-stampede",
    ]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["K6_PROMETHEUS_RW_SERVER_URL"] == (
        "http://prometheus.sreforge-system.svc:9090/api/v1/write"
    )
    assert env["K6_PROMETHEUS_RW_PUSH_INTERVAL"] == "1s"
    assert env["K6_PROMETHEUS_RW_STALE_MARKERS"] == "true"
    # without a receiver, no output: k6 prints its summary only
    plain = render_k6_job("l", "demo", PROFILES[1], "http://s:1", "cm")
    assert "--out" not in _pod(plain)["containers"][0]["args"]


def test_ids_beyond_js_safe_integers_are_refused() -> None:
    with pytest.raises(ValueError, match="safe integers"):
        render_k6_script(LoadProfile(rate=1, id_range=(0, 2**60)), "http://x")


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    return job["spec"]["template"]["spec"]


def _assert_locked_down(job: dict[str, Any], profile: LoadProfile) -> dict[str, Any]:
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] > profile.duration_seconds
    pod = _pod(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts) <= set(volumes)
    assert mounts["tmp"]["mountPath"] == "/tmp"
    assert "emptyDir" in volumes["tmp"]
    return c


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: f"rate{p.rate}")
def test_k6_job_mounts_the_script_and_is_locked_down(profile: LoadProfile) -> None:
    cm = render_k6_configmap("load-cm", "ns1", profile, "http://svc:8080", seed=5)
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"] == {**cm["metadata"], "name": "load-cm", "namespace": "ns1"}
    assert cm["data"][SCRIPT_KEY] == render_k6_script(profile, "http://svc:8080", seed=5)

    job = render_k6_job("load", "ns1", profile, "http://svc:8080", "load-cm")
    assert job["metadata"]["name"] == "load"
    assert job["metadata"]["namespace"] == "ns1"
    c = _assert_locked_down(job, profile)
    assert c["image"] == K6_IMAGE == "grafana/k6:0.54.0"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "script")
    assert mount["readOnly"] is True
    volume = next(v for v in _pod(job)["volumes"] if v["name"] == "script")
    assert volume["configMap"]["name"] == "load-cm"
    assert volume["configMap"]["items"] == [{"key": SCRIPT_KEY, "path": SCRIPT_KEY}]
    assert c["args"][-1] == f"{mount['mountPath']}/{SCRIPT_KEY}"
    assert c["args"][0] == "run"
    assert {"name": "SREFORGE_TARGET", "value": "http://svc:8080"} in c["env"]
    json.dumps(job)  # a plain, serialisable manifest


def test_k6_job_image_can_be_overridden() -> None:
    job = render_k6_job("l", "n", PROFILES[0], "http://s", "cm", image="registry.local/k6:1")
    assert _pod(job)["containers"][0]["image"] == "registry.local/k6:1"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: f"rate{p.rate}")
def test_generator_job_runs_the_builtin_generator(profile: LoadProfile) -> None:
    job = render_generator_job(
        "gen", "ns2", profile, "http://svc:8080/", "sreforge/operator:dev", seed=4
    )
    c = _assert_locked_down(job, profile)
    assert c["image"] == "sreforge/operator:dev"
    assert c["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    assert METRICS_PORT == 9100
    cmd = c["command"]
    assert cmd[:3] == ["python", "-m", "sreforge.load"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args["--target"] == "http://svc:8080"
    assert LoadProfile.model_validate_json(args["--profile-json"]) == profile
    assert args["--listen"] == f"0.0.0.0:{METRICS_PORT}"
    assert args["--port-file"].startswith("/tmp/")
    assert args["--seed"] == "4"
    assert "--control-socket" not in args  # the Job never re-points: no control surface
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    json.dumps(job)
