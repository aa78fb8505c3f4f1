"""What confines an Incident's pods on Kubernetes: NetworkPolicies and the patched code's
ServiceAccount. Pure: plain dicts, nothing here talks to the API.

Per Incident the operator creates (render_network_policies):

- `<incident>-target`, in the target's namespace, selecting the target's pods while they
  are the run's (the Deployment's selector plus the Incident label): in, only the load's
  and the prober's pods and the scraper (Prometheus); out, only DNS (port 53) and the
  scenario's declared dependencies and upstreams (pods labelled `app: <name>` in the
  target's namespace);
- `<incident>-harness`, selecting the load's and the prober's pods: in, only the scraper
  (they serve `/metrics` and `/healthz`, no control surface at all; this keeps even those
  from the code under test);
- `<incident>-ci`, selecting the CI Job's pods (they run the agent's tests): nothing in,
  nothing out.

NetworkPolicies are only as good as the CNI: one that does not enforce them (a plain
bridge, as on hack/local-cluster.sh's node) accepts them and lets everything through.
What does not depend on the CNI is done in the pod spec itself (confine_pod): the patched
code runs under the ServiceAccount the Incident names, with no token unless it asks.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any
from urllib.parse import urlsplit

from sreforge.api.resources import GROUP
from sreforge.api.scenario import Scenario
from sreforge.runtime.kube.config import INCIDENT_LABEL, MANAGED, ROLE_LABEL, OperatorConfig
from sreforge.runtime.kube.render import child_name, labels_for, owner_reference

NAMESPACE_NAME = "kubernetes.io/metadata.name"  # every namespace carries it (1.22+)
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


class PolicyError(ValueError):
    """The operator cannot tell which pods scrape the target (a configuration fault)."""


def target_policy_name(incident: str) -> str:
    return child_name(incident, "target")


def harness_policy_name(incident: str) -> str:
    return child_name(incident, "harness")


def ci_policy_name(incident: str) -> str:
    return child_name(incident, "ci")


def scraper_peers(prometheus_url: str, cfg: OperatorConfig) -> list[dict[str, Any]]:
    """The NetworkPolicy peers that may scrape the target and the load: the configured
    namespace (and pod labels), else the namespace of the Prometheus URL's Service
    (`<svc>.<ns>.svc[.cluster.local]`), else the URL's own address when it is an IP."""
    pods = {"podSelector": {"matchLabels": dict(cfg.scraper_labels)}}
    if cfg.scraper_namespace:
        ns = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: cfg.scraper_namespace}}}
        return [{**ns, **pods}]
    host = urlsplit(prometheus_url).hostname or ""
    parts = host.split(".")
    if len(parts) >= 3 and parts[2] == "svc":  # <svc>.<ns>.svc
        ns = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: parts[1]}}}
        return [{**ns, **pods}]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise PolicyError(
            f"cannot tell which pods scrape the target from the Prometheus URL "
            f"{prometheus_url!r} (not <service>.<namespace>.svc, not an IP): set "
            "SREFORGE_SCRAPER_NAMESPACE (and SREFORGE_SCRAPER_POD_LABELS) in the operator"
        ) from None
    return [{"ipBlock": {"cidr": f"{ip}/{ip.max_prefixlen}"}}]


def _selector(dep: dict[str, Any], incident: str) -> dict[str, Any]:
    """The target's pods while they are this Incident's: the Deployment's own selector and
    the Incident label the run puts on its pod template."""
    sel = copy.deepcopy((dep.get("spec") or {}).get("selector") or {})
    sel.setdefault("matchLabels", {})[INCIDENT_LABEL] = incident
    return sel


def _policy(name: str, ns: str, incident: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "labels": {**MANAGED, **labels_for(incident["metadata"]["name"], "policy")},
    }
    if ns == incident["metadata"]["namespace"]:  # no owner across namespaces
        meta["ownerReferences"] = [owner_reference(incident)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": spec,
    }


def render_network_policies(
    incident: dict[str, Any],
    dep: dict[str, Any],
    scenario: Scenario,
    scrapers: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The Incident's three NetworkPolicies (module docstring); `dep` is the target
    Deployment as read before the injection, `scrapers` from scraper_peers."""
    name = incident["metadata"]["name"]
    ns = incident["metadata"]["namespace"]
    target_ns = dep["metadata"]["namespace"]
    harness_pods = {
        "matchLabels": {INCIDENT_LABEL: name},
        "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": ["load", "probe"]}],
    }
    load_peer = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: ns}},
        "podSelector": harness_pods,
    }
    svc = scenario.service
    needs = sorted({*svc.dependencies, *(u.name for u in svc.upstreams)})
    egress: list[dict[str, Any]] = [{"ports": DNS_PORTS}]
    if needs:
        egress.append(
            {
                "to": [
                    {
                        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: target_ns}},
                        "podSelector": {
                            "matchExpressions": [{"key": "app", "operator": "In", "values": needs}]
                        },
                    }
                ]
            }
        )
    target = _policy(
        target_policy_name(name),
        target_ns,
        incident,
        {
            "podSelector": _selector(dep, name),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [load_peer, *copy.deepcopy(scrapers)]}],
            "egress": egress,
        },
    )
    harness = _policy(
        harness_policy_name(name),
        ns,
        incident,
        {
            "podSelector": harness_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": copy.deepcopy(scrapers)}],
        },
    )
    ci = _policy(
        ci_policy_name(name),
        ns,
        incident,
        {
            "podSelector": {"matchLabels": {INCIDENT_LABEL: name, ROLE_LABEL: "ci"}},
            "policyTypes": ["Ingress", "Egress"],
        },
    )
    return [target, harness, ci]


def pod_identity(dep: dict[str, Any]) -> dict[str, Any]:
    """The pod template's ServiceAccount and token setting, as confine_pod changes them
    (what restore_on_delete puts back)."""
    spec = dep["spec"]["template"]["spec"]
    return {
        "serviceAccountName": spec.get("serviceAccountName"),
        "automountServiceAccountToken": spec.get("automountServiceAccountToken"),
    }


def confine_pod(dep: dict[str, Any], service_account: str | None, token: bool) -> dict[str, Any]:
    """The Deployment whose pods run under `service_account` (None: the workload's own)
    with its token mounted only when `token` is set."""
    d = copy.deepcopy(dep)
    spec = d["spec"]["template"]["spec"]
    if service_account is not None:
        spec["serviceAccountName"] = service_account
        spec.pop("serviceAccount", None)  # the deprecated alias would disagree
    spec["automountServiceAccountToken"] = bool(token)
    return d


def restore_identity(dep: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """The Deployment with the ServiceAccount and token setting of `identity` again."""
    d = copy.deepcopy(dep)
    spec = d["spec"]["template"]["spec"]
    for key in ("serviceAccountName", "automountServiceAccountToken"):
        if identity.get(key) is None:
            spec.pop(key, None)
        else:
            spec[key] = identity[key]
    return d


# ----------------------------------------------------------------- the agent's MCP access
# The operator's MCP endpoint takes a ServiceAccount token minted for this audience only
# (a token for the API server is refused), and asks the API server whether its user may
# `get` the Incident's `mcp` subresource (runtime/kube/mcp.py).
MCP_AUDIENCE = "sreforge-mcp"
MCP_SUBRESOURCE = "mcp"


def mcp_path(ns: str, incident: str) -> str:
    """Where the operator's endpoint serves an Incident's tools."""
    return f"/incidents/{ns}/{incident}/mcp"


def agent_account_name(incident: str) -> str:
    return child_name(incident, "agent")


def agent_access(incident: dict[str, Any]) -> list[dict[str, Any]]:
    """The Incident's agent: a ServiceAccount `<incident>-agent` without a mounted token, and
    a Role (bound to it) that lets it read this Incident and call this Incident's MCP tools,
    nothing else; all owned by the Incident (gone with it). A pod running as the account
    gets a token for the endpoint from a projected volume (audience MCP_AUDIENCE); an
    agent run by hand, from `kubectl create token <incident>-agent --audience sreforge-mcp`."""
    meta = incident["metadata"]
    name, ns = meta["name"], meta["namespace"]
    account = agent_account_name(name)

    def owned(kind: str, api: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": api,
            "kind": kind,
            "metadata": {
                "name": account,
                "namespace": ns,
                "labels": labels_for(name, "agent"),
                "ownerReferences": [owner_reference(incident)],
            },
            **body,
        }

    rbac = "rbac.authorization.k8s.io/v1"
    return [
        owned("ServiceAccount", "v1", {"automountServiceAccountToken": False}),
        owned(
            "Role",
            rbac,
            {
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "resources": ["incidents", f"incidents/{MCP_SUBRESOURCE}"],
                        "resourceNames": [name],
                        "verbs": ["get"],
                    }
                ]
            },
        ),
        owned(
            "RoleBinding",
            rbac,
            {
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": account,
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
            },
        ),
    ]
