"""Render a LoadProfile for clusters: a k6 script, its ConfigMap and Job, or a generator Job.

Pure functions: they build strings and manifest dicts and do no I/O.

Metrics: k6 reports through its own outputs (its end-of-test summary, ``--out``
backends, ``http_reqs``/``dropped_iterations``...), not as the Prometheus-scraped
``sreforge_load_*`` client series that scenario alert rules evaluate. When those series
are required, as they are whenever the oracle checks an alert against delivered load,
the harness runs the built-in generator instead: :func:`render_generator_job` (the same
constant-arrival-rate semantics, ``python -m sreforge.load`` from the operator image,
``/metrics`` on the port named ``metrics``, 9100). The k6 Job is for clusters where a
k6 run is wanted as such (e.g. to cross-check the built-in generator).
"""

from __future__ import annotations

import json
import math
from typing import Any

from sreforge.api.scenario import KNOWN_ANSWER_ATTEMPTS, KNOWN_ANSWER_PARALLEL, LoadProfile
from sreforge.load.command import generator_argv

K6_IMAGE = "grafana/k6:0.54.0"
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
    return {
        "discardResponseBodies": not (profile.expect_json_id or profile.known_answers),
        # known answers are learned in setup(): K requests, KNOWN_ANSWER_PARALLEL at a time
        "setupTimeout": "60s",
        "scenarios": {
            "incident": {
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


def render_k6_script(profile: LoadProfile, target_url: str) -> str:
    """A k6 script running ``profile`` against ``target_url`` (``SREFORGE_TARGET`` in the
    environment overrides it). No thresholds: the harness judges, not k6's exit code."""
    lo, hi = profile.id_range
    if max(abs(lo), abs(hi)) > _JS_SAFE_INT:
        raise ValueError(f"id_range {lo}..{hi} exceeds JavaScript's safe integers")
    target = target_url.rstrip("/")
    checks = [
        f"    {_js(f'status is {profile.expect_status}')}: (r) => r.status === EXPECT_STATUS,"
    ]
    if profile.expect_json_id:
        checks.append(
            "    'body id matches': (r) => {\n"
            "      try {\n"
            "        const doc = JSON.parse(r.body);\n"
            "        return doc !== null && typeof doc === 'object' && doc.id === id;\n"
            "      } catch (e) {\n"
            "        return false;\n"
            "      }\n"
            "    },"
        )
    if profile.known_answers:
        checks.append(
            "    'matches the known answer': (r) => {\n"
            "      const want = data.known[String(id)];\n"
            "      if (want === undefined) return true;\n"
            "      try {\n"
            "        return canonical(JSON.parse(r.body)) === want;\n"
            "      } catch (e) {\n"
            "        return false;\n"
            "      }\n"
            "    },"
        )
    check_lines = "\n".join(checks)
    known_ids = profile.known_ids() if profile.known_answers else []
    options = json.dumps(k6_options(profile), indent=2)
    return f"""\
// Rendered by sreforge.load.k6 from a LoadProfile; do not edit by hand.
import http from 'k6/http';
import {{ check }} from 'k6';

const TARGET = (__ENV.SREFORGE_TARGET || {_js(target)}).replace(/\\/+$/, '');
const METHOD = {_js(profile.method)};
const PATH = {_js(profile.path)};
const ID_LOW = {lo};
const ID_HIGH = {hi};
const EXPECT_STATUS = {profile.expect_status};
const TIMEOUT = {_js(f"{profile.timeout_ms}ms")};
const EXPECT_JSON_ID = {_js(profile.expect_json_id)};
const KNOWN_IDS = {_js(known_ids)};
const PARALLEL = {KNOWN_ANSWER_PARALLEL};
const ATTEMPTS = {KNOWN_ANSWER_ATTEMPTS};

export const options = {options};

function urlOf(id) {{
  return TARGET + PATH.split('{{id}}').join(String(id));
}}

function bodyOf(id) {{
  return METHOD === 'POST' ? JSON.stringify({{ id: id }}) : null;
}}

function paramsOf(tag) {{
  const params = {{ timeout: TIMEOUT, tags: {{ name: tag }} }};
  if (METHOD === 'POST') {{
    params.headers = {{ 'Content-Type': 'application/json' }};
  }}
  return params;
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

// Known answers (LoadProfile.known_answers), as the built-in generator learns them:
// before the load, each known id is asked up to ATTEMPTS times, PARALLEL at a time; an
// answer with the expected status (and its own id) is kept.
export function setup() {{
  const known = {{}};
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {{
    const todo = KNOWN_IDS.filter((id) => !(String(id) in known));
    for (let i = 0; i < todo.length; i += PARALLEL) {{
      const ids = todo.slice(i, i + PARALLEL);
      const batch = ids.map((id) => [METHOD, urlOf(id), bodyOf(id), paramsOf('learn')]);
      const answers = http.batch(batch);
      answers.forEach((r, j) => {{
        if (r.status !== EXPECT_STATUS) return;
        try {{
          const doc = JSON.parse(r.body);
          const own = doc !== null && typeof doc === 'object' && doc.id === ids[j];
          if (EXPECT_JSON_ID && !own) return;
          known[String(ids[j])] = canonical(doc);
        }} catch (e) {{
          // not JSON: not an answer to learn
        }}
      }});
    }}
  }}
  console.log(`learned ${{Object.keys(known).length}} of ${{KNOWN_IDS.length}} known answers`);
  return {{ known: known }};
}}

export default function (data) {{
  const id = ID_LOW + Math.floor(Math.random() * (ID_HIGH - ID_LOW + 1));
  const res = http.request(METHOD, urlOf(id), bodyOf(id), paramsOf(PATH));
  check(res, {{
{check_lines}
  }});
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
    name: str, namespace: str, profile: LoadProfile, target_url: str
) -> dict[str, Any]:
    """The ConfigMap holding the script under ``script.js`` (mount it with render_k6_job)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name, "k6-script")},
        "data": {SCRIPT_KEY: render_k6_script(profile, target_url)},
    }


def render_k6_job(  # noqa: PLR0917 (the harness's positional interface)
    name: str,
    namespace: str,
    profile: LoadProfile,
    target_url: str,
    configmap_name: str,
    image: str = K6_IMAGE,
) -> dict[str, Any]:
    """A batch/v1 Job running the script of ConfigMap ``configmap_name`` with k6.

    Non-root, read-only root filesystem (``/tmp`` is an emptyDir), no privilege
    escalation, every capability dropped, ``backoffLimit: 0``, and a deadline of the
    duration plus the request timeout plus DEADLINE_MARGIN_SECONDS.
    """
    container = {
        "name": "k6",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["run", "--no-usage-report", f"{SCRIPT_DIR}/{SCRIPT_KEY}"],
        "env": [
            {"name": "SREFORGE_TARGET", "value": target_url.rstrip("/")},
            {"name": "K6_NO_USAGE_REPORT", "value": "true"},
        ],
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
) -> dict[str, Any]:
    """A batch/v1 Job running the built-in generator (``python -m sreforge.load``) from the
    operator ``image``, with the security context of render_k6_job; it serves the
    ``sreforge_load_*`` series on ``:9100/metrics`` (container port named ``metrics``).

    No ``--control-socket``: the Job never re-points its load, so it has no control
    surface at all; its port serves ``/metrics`` and a bare ``/healthz`` (the probe)."""
    args = generator_argv(
        profile,
        target_url.rstrip("/"),
        listen=f"0.0.0.0:{METRICS_PORT}",
        port_file="/tmp/sreforge-load.port",
        seed=seed,
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
    return _job(name, namespace, profile, "generator", GENERATOR_UID, container, volumes)
