"""Is the rolled-out target still what the operator rolled out? Pure: the comparison of two
views of the target, read by `Kube.target_view`.

During verification nothing but the operator may change what is measured. An agent (or the
code under test, given a token) with rights in the target namespace could scale the
Deployment to zero, point its Service at other pods, delete a probe, swap the image or the
overlay, or run a pod of its own behind the Service. `snapshot` records, once the patched
build is rolled out, what decides what the load and the prober reach: the Deployment
(identity, replicas, selector, the whole pod template), the Service
in front of it (identity, selector, ports), and which ReplicaSet's pods answer it.
`changes` names every difference a later view shows; the operator samples it with the
alerts, and any difference fails the run (sreforge.loop: NotCleared, the message naming it).
A general comparison, not a list of tricks: whatever changes in those fields is named.
Readiness is not compared: a patched pod that stops answering its probe under load is the
fix's behaviour, which the oracle grades (the service's series vanish, the load fails),
not a change someone made (measured on the real node: the reference fix's pod went
unready for a moment after its rollout under the stampede's load, and the guard failed a
fix that holds).
"""

from __future__ import annotations

import json
from typing import Any

# Deployment spec fields that do not decide what serves the load (rollout bookkeeping).
IGNORED_SPEC = frozenset({"progressDeadlineSeconds", "revisionHistoryLimit", "strategy"})
HASH_LABEL = "pod-template-hash"
MAX_VALUE = 80  # characters of a value shown in a change


def _deployment(dep: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in (dep.get("spec") or {}).items() if k not in IGNORED_SPEC}
    spec.setdefault("replicas", 1)
    spec.setdefault("paused", False)
    meta = dep["metadata"]
    return {"uid": meta.get("uid"), "generation": meta.get("generation"), "spec": spec}


def _service(svc: dict[str, Any]) -> dict[str, Any]:
    spec = svc.get("spec") or {}
    return {
        "uid": svc["metadata"].get("uid"),
        "spec": {"selector": spec.get("selector"), "ports": spec.get("ports")},
    }


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False  # terminating: no longer an endpoint
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def _replica_set(pod: dict[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet" and ref.get("controller"):
            return str(ref.get("name"))
    return None


def serving_replica_sets(pods: list[dict[str, Any]]) -> list[str]:
    """The ReplicaSets (by name) of the ready pods: whose pods answer the Service."""
    return sorted({_replica_set(p) or "<none>" for p in pods if _ready(p)})


def snapshot(view: dict[str, Any]) -> dict[str, Any]:
    """What the rolled-out target is, from `Kube.target_view` (the Deployment, its Service,
    the pods the Service selects), as JSON the Incident's status can keep."""
    dep, svc = view["deployment"], view["service"]
    if dep is None or svc is None:
        raise ValueError("the target's Deployment or its Service is gone right after its rollout")
    return {
        "name": f"{dep['metadata'].get('namespace')}/{dep['metadata']['name']}",
        "deployment": _deployment(dep),
        "service": _service(svc),
        "replicaSets": serving_replica_sets(view["pods"]),
    }


def changes(rolled_out: dict[str, Any], view: dict[str, Any]) -> list[str]:
    """Every way `view` differs from the `rolled_out` snapshot, each named (empty: intact).

    `view["deployment"]` or `view["service"]` None: deleted. Ready replicas are compared
    with the replicas rolled out: fewer is a change (a pod that stopped serving)."""
    out: list[str] = []
    dep, svc = view.get("deployment"), view.get("service")
    name = rolled_out.get("name", "the target")
    if dep is None:
        out.append(f"Deployment {name} was deleted")
    else:
        before = rolled_out["deployment"]
        now = _deployment(dep)
        if now["uid"] != before["uid"]:
            out.append(f"Deployment {name} was deleted and created again")
        spec_changes = differences(before["spec"], now["spec"], "Deployment spec")
        out += spec_changes
        if not spec_changes and now["uid"] == before["uid"]:
            # its spec was written (the API server counts every change) and written back
            g0, g1 = before.get("generation"), now.get("generation")
            if g0 is not None and g1 is not None and g1 != g0:
                out.append(
                    f"Deployment spec was changed and changed back (generation {g0} -> {g1})"
                )
    if svc is None:
        out.append("the Service in front of it was deleted")
    else:
        before = rolled_out["service"]
        now = _service(svc)
        if now["uid"] != before["uid"]:
            out.append("the Service in front of it was deleted and created again")
        out += differences(before["spec"], now["spec"], "Service spec")
    strangers = sorted(
        set(serving_replica_sets(view.get("pods") or [])) - set(rolled_out["replicaSets"])
    )
    for rs in strangers:
        pods = [
            p["metadata"]["name"]
            for p in view.get("pods") or []
            if _ready(p) and (_replica_set(p) or "<none>") == rs
        ]
        owner = "no ReplicaSet" if rs == "<none>" else f"ReplicaSet {rs}"
        out.append(
            f"pods not rolled out by the operator answer the Service: {', '.join(pods)} ({owner})"
        )
    return out


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def _keyed(items: list[Any]) -> dict[str, Any] | None:
    """A list of named objects (containers, volumes, ports with names) by name, else None."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    names = [i["name"] for i in items]
    if len(set(names)) != len(names):
        return None
    return {i["name"]: i for i in items}


def differences(before: Any, after: Any, path: str) -> list[str]:
    """Each difference between two JSON values, named by its path: `path.x removed`,
    `path.x added`, `path.x: a -> b`. Lists of named objects are compared by name."""
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            sub = f"{path}.{key}"
            if key not in after:
                out.append(f"{sub} removed (was {_show(before[key])})")
            elif key not in before:
                out.append(f"{sub} added ({_show(after[key])})")
            else:
                out += differences(before[key], after[key], sub)
        return out
    if isinstance(before, list) and isinstance(after, list):
        b, a = _keyed(before), _keyed(after)
        if b is not None and a is not None:
            return differences(b, a, path)  # containers[name] and the like
        if len(before) == len(after):
            out = []
            for i, (x, y) in enumerate(zip(before, after, strict=True)):
                out += differences(x, y, f"{path}[{i}]")
            return out
    return [f"{path}: {_show(before)} -> {_show(after)}"]
