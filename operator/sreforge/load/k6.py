"""Render a LoadProfile for clusters: a k6 script, its ConfigMap and Job, or a generator Job.

Pure functions: they build strings and manifest dicts and do no I/O.

Metrics: the built-in generator (:func:`render_generator_job`, ``python -m sreforge.load``
from the operator image) serves the ``sreforge_load_*`` series that scenario alert rules
and the oracle read on ``/metrics`` (port ``metrics``, 9100), scraped. A k6 Job writes its
results with k6's Prometheus remote-write output into the Incident's Prometheus instead:
the script counts outcomes and latency buckets with k6 custom metrics, and the recording
rules of :mod:`sreforge.load.k6series` give them the generator's names, so either runner's
traffic fires and clears the same alerts.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from sreforge.api.scenario import KNOWN_ANSWER_ATTEMPTS, KNOWN_ANSWER_PARALLEL, LoadProfile
from sreforge.load import k6series
from sreforge.load.command import generator_argv
from sreforge.load.identity import CLIENTS, LANGUAGES
from sreforge.load.popularity import Popularity

K6_IMAGE = f"grafana/k6:{k6series.K6_VERSION}"
K6_UID = 12345  # the `k6` user of the grafana/k6 image
GENERATOR_UID = 65532
SCRIPT_KEY = "script.js"
SCRIPT_DIR = "/scripts"
METRICS_PORT = 9100
_JS_SAFE_INT = 2**53 - 1
#: Seconds a Job may run past duration_seconds (image pull, start-up, graceful stop).
DEADLINE_MARGIN_SECONDS = 120


def _js(value: Any) -> str:
    """A JS literal for a JSON-able value (U+2028/2029 escaped for older engines)."""
    return json.dumps(value).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def pre_allocated_vus(profile: LoadProfile) -> int:
    """VUs k6 allocates before the start: enough for ~250 ms responses, at most maxVUs."""
    return min(profile.max_in_flight, max(1, math.ceil(profile.rate * 0.25)))


def k6_options(profile: LoadProfile) -> dict[str, Any]:
    """The ``options`` object of the script (maxVUs = max_in_flight: a VU does one
    request at a time, so k6 drops an iteration exactly when max_in_flight are busy)."""
    mix = profile.mix()
    return {
        "discardResponseBodies": not any(r.expect_json_id or r.known_answers for r in mix),
        # known answers are learned in setup(): K requests, KNOWN_ANSWER_PARALLEL at a time
        "setupTimeout": "60s",
        "scenarios": {
            k6series.K6_SCENARIO: {
                "executor": "constant-arrival-rate",
                "rate": profile.rate,
                "timeUnit": "1s",
                "duration": f"{profile.duration_seconds}s",
                "preAllocatedVUs": pre_allocated_vus(profile),
                "maxVUs": profile.max_in_flight,
                "gracefulStop": f"{math.ceil(profile.timeout_ms / 1000)}s",
            }
        },
    }


def _routes(profile: LoadProfile, seed: int) -> list[dict[str, Any]]:
    """The mix as the script's data: per route its request, checks and popularity layout."""
    out = []
    for r in profile.mix():
        lo, hi = r.ids
        if max(abs(lo), abs(hi)) > _JS_SAFE_INT:
            raise ValueError(f"id_range {lo}..{hi} exceeds JavaScript's safe integers")
        pop = Popularity(lo, hi, kind=profile.popularity, exponent=profile.zipf_exponent, seed=seed)
        if pop.n > 1 and pop.a * pop.n > _JS_SAFE_INT:
            raise ValueError(f"id_range {lo}..{hi} is too wide for the script's id layout")
        out.append(
            {
                "label": r.label,
                "method": r.method,
                "path": r.path,
                "weight": r.weight,
                "body": r.body
                if r.body is not None
                else ({"id": "{id}"} if r.method == "POST" else None),
                "auth": list(r.basic_auth) if r.basic_auth is not None else None,
                "expectStatus": r.expect_status,
                "expectJsonId": r.expect_json_id,
                "low": lo,
                "n": pop.n,
                "a": pop.a,
                "b": pop.b,
                "known": pop.top(r.known_answers) if r.known_answers else [],
            }
        )
    return out


def _clients() -> list[dict[str, Any]]:
    return [
        {"weight": c.weight, "headers": [[k, v] for k, v in c.headers if k.lower() != "host"]}
        for c in CLIENTS
    ]


def render_k6_script(profile: LoadProfile, target_url: str, *, seed: int | None = None) -> str:
    """A k6 script running ``profile`` against ``target_url`` (``SREFORGE_TARGET`` in the
    environment overrides it). No thresholds: the harness judges, not k6's exit code.

    As the built-in generator: a route of the mix by weight, an id by popularity (Zipf by
    rejection-inversion over the same seeded layout, so ``seed`` fixes which ids are
    popular and known), headers of a visitor drawn from the same pool of ordinary clients
    (sreforge.load.identity), kept for a visit of geometric length. What k6 cannot do the
    same: it orders the headers its own way, and a VU keeps its connection across visits.
    """
    if seed is None:
        seed = secrets.randbelow(2**31)
    routes = _routes(profile, seed)
    buckets = [[b if b != math.inf else None, le] for b, le in k6series.bucket_bounds()]
    target = target_url.rstrip("/")
    options = json.dumps(k6_options(profile), indent=2)
    return f"""\
// Rendered by sreforge.load.k6 from a LoadProfile; do not edit by hand.
import encoding from 'k6/encoding';
import http from 'k6/http';
import {{ check, randomSeed }} from 'k6';
import {{ Counter, Gauge }} from 'k6/metrics';

const TARGET = (__ENV.SREFORGE_TARGET || {_js(target)}).replace(/\\/+$/, '');
const ROUTES = {_js(routes)};
const CLIENTS = {_js(_clients())};
const LANGUAGES = {_js([list(x) for x in LANGUAGES])};
const POPULARITY = {_js(profile.popularity)};
const EXPONENT = {_js(profile.zipf_exponent)};
const NEW_VISIT = {_js(profile.new_connection_ratio)};
const TIMEOUT = {_js(f"{profile.timeout_ms}ms")};
const PARALLEL = {KNOWN_ANSWER_PARALLEL};
const ATTEMPTS = {KNOWN_ANSWER_ATTEMPTS};
const RATE = {_js(profile.rate)};
// [bound in seconds, its `le` label]: the built-in generator's histogram (sreforge.load.k6series)
const BUCKETS = {_js(buckets)};

// What the remote-write output sends (k6_<name>_total, k6_<name>): windowable counters
const REQUESTS = new Counter({_js(k6series.REQUESTS_METRIC)});
const LATENCY = new Counter({_js(k6series.BUCKET_METRIC)});
const TARGET_RATE = new Gauge({_js(k6series.TARGET_RATE_METRIC)});

export const options = {options};

randomSeed({seed});

function pick(items, weightOf) {{
  let total = 0;
  for (const item of items) total += weightOf(item);
  let u = Math.random() * total;
  for (const item of items) {{
    u -= weightOf(item);
    if (u < 0) return item;
  }}
  return items[items.length - 1];
}}

// Zipf ranks by rejection-inversion (sreforge.load.popularity, the same arithmetic)
function expm1OverX(x) {{ return Math.abs(x) > 1e-8 ? Math.expm1(x) / x : 1 + x / 2 + x * x / 6; }}
function log1pOverX(x) {{ return Math.abs(x) > 1e-8 ? Math.log1p(x) / x : 1 - x / 2 + x * x / 3; }}
function hOf(x) {{ return Math.exp(-EXPONENT * Math.log(x)); }}
function bigH(x) {{ const l = Math.log(x); return expm1OverX((1 - EXPONENT) * l) * l; }}
function bigHInv(y) {{
  const t = Math.max(-1, y * (1 - EXPONENT));
  return Math.exp(log1pOverX(t) * y);
}}
function zipfRank(n) {{
  const hx1 = bigH(1.5) - 1;
  const hn = bigH(n + 0.5);
  const squeeze = 2 - bigHInv(bigH(2.5) - hOf(2));
  for (;;) {{
    const u = hn + Math.random() * (hx1 - hn);
    const x = bigHInv(u);
    const k = Math.min(n, Math.max(1, Math.round(x)));
    if (k - x <= squeeze || u >= bigH(k + 0.5) - hOf(k)) return k;
  }}
}}

function idOf(route) {{
  if (route.n <= 1) return route.low;
  if (POPULARITY === 'uniform') return route.low + Math.floor(Math.random() * route.n);
  const rank = zipfRank(route.n);
  return route.low + ((route.a * (rank - 1) + route.b) % route.n);
}}

function fill(value, id) {{
  if (value === '{{id}}') return id;
  if (typeof value === 'string') return value.split('{{id}}').join(String(id));
  if (Array.isArray(value)) return value.map((v) => fill(v, id));
  if (value !== null && typeof value === 'object') {{
    const out = {{}};
    for (const k of Object.keys(value)) out[k] = fill(value[k], id);
    return out;
  }}
  return value;
}}

function urlOf(route, id) {{
  return TARGET + route.path.split('{{id}}').join(String(id));
}}

function bodyOf(route, id) {{
  return route.body === null ? null : JSON.stringify(fill(route.body, id));
}}

// A visitor per VU: a client of the pool and a language, kept for a geometric visit.
let visitor = null;
let visitLeft = 0;

function headersOf(route) {{
  if (visitor === null || visitLeft <= 0) {{
    const client = pick(CLIENTS, (c) => c.weight);
    const lang = pick(LANGUAGES, (l) => l[1])[0];
    visitor = {{}};
    for (const [name, value] of client.headers) visitor[name] = value.split('{{lang}}').join(lang);
    visitLeft = 1;
    while (NEW_VISIT > 0 && Math.random() >= NEW_VISIT) visitLeft += 1;
  }}
  visitLeft -= 1;
  const headers = Object.assign({{}}, visitor);
  if (route.body !== null) headers['Content-Type'] = 'application/json';
  return headers;
}}

function paramsOf(route, tag, id) {{
  const headers = headersOf(route);
  if (route.auth !== null) {{
    const [user, password] = route.auth.map((part) => fill(part, id));
    headers['Authorization'] = 'Basic ' + encoding.b64encode(user + ':' + password);
  }}
  return {{ timeout: TIMEOUT, tags: {{ name: tag }}, headers: headers }};
}}

// JSON with object keys sorted: equal documents, equal strings
function canonical(value) {{
  if (Array.isArray(value)) return '[' + value.map(canonical).join(',') + ']';
  if (value !== null && typeof value === 'object') {{
    return '{{' + Object.keys(value).sort()
      .map((k) => JSON.stringify(k) + ':' + canonical(value[k])).join(',') + '}}';
  }}
  return JSON.stringify(value);
}}

function ownId(body, id) {{
  try {{
    const doc = JSON.parse(body);
    return doc !== null && typeof doc === 'object' && doc.id === id;
  }} catch (e) {{
    return false;
  }}
}}

// Known answers (each route's known_answers, its most popular ids), as the built-in
// generator learns them: before the load, each known id is asked up to ATTEMPTS times,
// PARALLEL at a time; an answer with the expected status (and its own id) is kept.
export function setup() {{
  const known = {{}};
  const todo = [];
  ROUTES.forEach((route, r) => {{
    known[route.label] = {{}};
    for (const id of route.known) todo.push([r, id]);
  }});
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {{
    const left = todo.filter(([r, id]) => !(String(id) in known[ROUTES[r].label]));
    for (let i = 0; i < left.length; i += PARALLEL) {{
      const batch = left.slice(i, i + PARALLEL);
      const answers = http.batch(batch.map(([r, id]) => {{
        const route = ROUTES[r];
        return [route.method, urlOf(route, id), bodyOf(route, id), paramsOf(route, 'learn', id)];
      }}));
      answers.forEach((res, j) => {{
        const [r, id] = batch[j];
        const route = ROUTES[r];
        if (res.status !== route.expectStatus) return;
        if (route.expectJsonId && !ownId(res.body, id)) return;
        try {{
          known[route.label][String(id)] = canonical(JSON.parse(res.body));
        }} catch (e) {{
          // not JSON: not an answer to learn
        }}
      }});
    }}
  }}
  let learned = 0;
  for (const label of Object.keys(known)) learned += Object.keys(known[label]).length;
  console.log(`learned ${{learned}} of ${{todo.length}} known answers`);
  return {{ known: known }};
}}

export default function (data) {{
  const route = ROUTES.length === 1 ? ROUTES[0] : pick(ROUTES, (r) => r.weight);
  const id = idOf(route);
  const res = http.request(
    route.method, urlOf(route, id), bodyOf(route, id), paramsOf(route, route.label, id)
  );
  const checks = {{}};
  checks[`status is ${{route.expectStatus}}`] = (r) => r.status === route.expectStatus;
  if (route.expectJsonId) checks['body id matches'] = (r) => ownId(r.body, id);
  if (route.known.length) {{
    checks['matches the known answer'] = (r) => {{
      const want = data.known[route.label][String(id)];
      if (want === undefined) return true;
      try {{
        return canonical(JSON.parse(r.body)) === want;
      }} catch (e) {{
        return false;
      }}
    }};
  }}
  const valid = check(res, checks);
  // the built-in generator's outcomes (sreforge.load.metrics.OUTCOMES); k6 error codes
  // 1050 (request timeout) and 1211 (dial timeout) are timeouts
  let outcome = 'success';
  if (res.status === 0) {{
    outcome = res.error_code === 1050 || res.error_code === 1211 ? 'timeout' : 'connect_error';
  }} else if (res.status !== route.expectStatus) {{
    outcome = 'http_error';
  }} else if (!valid) {{
    outcome = 'invalid';
  }}
  REQUESTS.add(1, {{ {k6series.ROUTE_TAG}: route.label, {k6series.OUTCOME_TAG}: outcome }});
  const t = res.timings;
  const seconds = (t.blocked + t.connecting + t.tls_handshaking + t.duration) / 1000;
  for (const [bound, le] of BUCKETS) {{
    if (bound === null || seconds <= bound) {{
      LATENCY.add(1, {{ {k6series.ROUTE_TAG}: route.label, {k6series.LE_TAG}: le }});
    }}
  }}
  TARGET_RATE.add(RATE);
}}
"""


def _labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "sreforge-load",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "sreforge",
    }


def _container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security(uid: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _job(  # noqa: PLR0917 (private; every argument is required)
    name: str,
    namespace: str,
    profile: LoadProfile,
    component: str,
    uid: int,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    labels = _labels(name, component)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": profile.duration_seconds
            + math.ceil(profile.timeout_ms / 1000)
            + DEADLINE_MARGIN_SECONDS,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": _pod_security(uid),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _resources(profile: LoadProfile) -> dict[str, Any]:
    # ~0.3 ms of CPU per request for the built-in generator (benchmarks/bench_load.py).
    cpu_m = min(4000, max(100, math.ceil(profile.rate * 0.4)))
    return {
        "requests": {"cpu": f"{cpu_m}m", "memory": "128Mi"},
        "limits": {"memory": "1Gi"},
    }


def render_k6_configmap(
    name: str, namespace: str, profile: LoadProfile, target_url: str, *, seed: int | None = None
) -> dict[str, Any]:
    """The ConfigMap holding the script under ``script.js`` (mount it with render_k6_job)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name, "k6-script")},
        "data": {SCRIPT_KEY: render_k6_script(profile, target_url, seed=seed)},
    }


def render_k6_job(  # noqa: PLR0917 (the harness's positional interface)
    name: str,
    namespace: str,
    profile: LoadProfile,
    target_url: str,
    configmap_name: str,
    image: str = K6_IMAGE,
    *,
    remote_write_url: str | None = None,
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job running the script of ConfigMap ``configmap_name`` with k6.

    ``remote_write_url`` (a Prometheus's ``.../api/v1/write``): k6's remote-write output
    sends the results there every second, marking its series stale at the end
    (sreforge.load.k6series names them); ``tags``: test-wide tags on every series (whose
    load it is: k6series.job_tags).

    Non-root, read-only root filesystem (``/tmp`` is an emptyDir), no privilege
    escalation, every capability dropped, ``backoffLimit: 0``, and a deadline of the
    duration plus the request timeout plus DEADLINE_MARGIN_SECONDS.
    """
    args = ["run", "--no-usage-report"]
    env = [
        {"name": "SREFORGE_TARGET", "value": target_url.rstrip("/")},
        {"name": "K6_NO_USAGE_REPORT", "value": "true"},
    ]
    if remote_write_url is not None:
        args += ["--out", k6series.K6_OUTPUT]
        env += [
            {"name": "K6_PROMETHEUS_RW_SERVER_URL", "value": remote_write_url},
            {"name": "K6_PROMETHEUS_RW_PUSH_INTERVAL", "value": k6series.PUSH_INTERVAL},
            {"name": "K6_PROMETHEUS_RW_STALE_MARKERS", "value": "true"},
        ]
    for key, value in sorted((tags or {}).items()):
        args += ["--tag", f"{key}={value}"]
    container = {
        "name": "k6",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [*args, f"{SCRIPT_DIR}/{SCRIPT_KEY}"],
        "env": env,
        "securityContext": _container_security(),
        "resources": _resources(profile),
        "volumeMounts": [
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    volumes = [
        {
            "name": "script",
            "configMap": {
                "name": configmap_name,
                "items": [{"key": SCRIPT_KEY, "path": SCRIPT_KEY}],
            },
        },
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    return _job(name, namespace, profile, "k6", K6_UID, container, volumes)


def render_generator_job(
    name: str,
    namespace: str,
    profile: LoadProfile,
    target_url: str,
    image: str,
    *,
    seed: int | None = None,
    ids_seed: int | None = None,
    probe: bool = False,
) -> dict[str, Any]:
    """A batch/v1 Job running the built-in generator (``python -m sreforge.load``) from the
    operator ``image``, with the security context of render_k6_job; it serves the
    ``sreforge_load_*`` series on ``:9100/metrics`` (container port named ``metrics``).
    ``probe``: the profile's independent prober instead (``sreforge_probe_*``); give it
    the load's ``ids_seed``.

    No ``--control-socket``: the Job never re-points its load, so it has no control
    surface at all; its port serves ``/metrics`` and a bare ``/healthz`` (the probe)."""
    args = generator_argv(
        profile,
        target_url.rstrip("/"),
        listen=f"0.0.0.0:{METRICS_PORT}",
        port_file="/tmp/sreforge-load.port",
        seed=seed,
        ids_seed=ids_seed,
        probe=probe,
        python="python",  # the image's interpreter
    )
    container = {
        "name": "load",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": args,
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 5,
        },
        "securityContext": _container_security(),
        "resources": _resources(profile),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    volumes = [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}]
    component = "prober" if probe else "generator"
    return _job(name, namespace, profile, component, GENERATOR_UID, container, volumes)
