"""What confines an Incident's pods on Kubernetes (runtime/kube/policy.py): the
NetworkPolicies rendered, the scraper they let in, the ServiceAccount and token of the
code under test. Pure; their presence and selectors on a real API server are
tests/integration/kube/test_confinement.py's."""

from __future__ import annotations

from typing import Any

import pytest
from tests.kubeenv import REPO_ROOT

from sreforge.runtime.kube import policy
from sreforge.runtime.kube.config import OperatorConfig
from sreforge.scenarios import load_scenario

STAMPEDE = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")  # needs redis
POOL = load_scenario(REPO_ROOT / "scenarios" / "errors-connection-pool-leak")  # needs nothing
RETRY = load_scenario(REPO_ROOT / "scenarios" / "configuration-retry-storm")  # an upstream


def incident(ns: str = "demo") -> dict[str, Any]:
    return {"metadata": {"name": "inc", "namespace": ns, "uid": "u-1"}, "spec": {}}


def deployment(ns: str = "demo") -> dict[str, Any]:
    return {
        "metadata": {"name": "catalog", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "catalog"}},
            "template": {"spec": {"serviceAccountName": "catalog", "containers": []}},
        },
    }


def by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs}


SCRAPER = [{"namespaceSelector": {"matchLabels": {policy.NAMESPACE_NAME: "mon"}}}]


def test_the_target_takes_only_the_load_and_the_scraper_and_reaches_only_dns() -> None:
    objs = by_name(policy.render_network_policies(incident(), deployment(), POOL, SCRAPER))
    assert sorted(objs) == ["inc-ci", "inc-harness", "inc-target"]
    target = objs["inc-target"]["spec"]
    assert target["podSelector"] == {
        "matchLabels": {"app": "catalog", "sreforge.dev/incident": "inc"}
    }
    assert target["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = target["ingress"]
    load, scraper = rule["from"]
    assert load["namespaceSelector"] == {"matchLabels": {policy.NAMESPACE_NAME: "demo"}}
    assert load["podSelector"]["matchLabels"] == {"sreforge.dev/incident": "inc"}
    assert load["podSelector"]["matchExpressions"] == [
        {"key": "sreforge.dev/role", "operator": "In", "values": ["load", "probe"]}
    ]
    assert scraper == SCRAPER[0]
    # the pool leak has no dependency: DNS alone
    assert target["egress"] == [{"ports": policy.DNS_PORTS}]
    # owned by the Incident (same namespace): the garbage collector takes them
    for obj in objs.values():
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
        assert obj["metadata"]["namespace"] == "demo"


@pytest.mark.parametrize("scenario", [STAMPEDE, RETRY], ids=lambda s: s.name)
def test_declared_dependencies_are_reachable_in_the_target_namespace(scenario: Any) -> None:
    assert scenario.service.dependencies or scenario.service.upstreams
    dep = deployment("shop")
    objs = by_name(policy.render_network_policies(incident(), dep, scenario, SCRAPER))
    target = objs["inc-target"]
    assert target["metadata"]["namespace"] == "shop"
    assert "ownerReferences" not in target["metadata"]  # none across namespaces
    dns, deps = target["spec"]["egress"]
    assert dns == {"ports": policy.DNS_PORTS}
    (peer,) = deps["to"]
    assert peer["namespaceSelector"] == {"matchLabels": {policy.NAMESPACE_NAME: "shop"}}
    names = sorted({*scenario.service.dependencies, *(u.name for u in scenario.service.upstreams)})
    assert peer["podSelector"]["matchExpressions"] == [
        {"key": "app", "operator": "In", "values": names}
    ]


def test_the_load_takes_only_the_scraper_and_ci_takes_nothing() -> None:
    objs = by_name(policy.render_network_policies(incident(), deployment(), STAMPEDE, SCRAPER))
    harness = objs["inc-harness"]["spec"]
    assert harness["policyTypes"] == ["Ingress"]
    assert harness["ingress"] == [{"from": SCRAPER}]
    ci = objs["inc-ci"]["spec"]
    assert ci["podSelector"] == {
        "matchLabels": {"sreforge.dev/incident": "inc", "sreforge.dev/role": "ci"}
    }
    assert ci["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in ci  # deny all, both ways
    assert "egress" not in ci


@pytest.mark.parametrize(
    ("url", "cfg", "peer"),
    [
        (
            "http://prometheus.sreforge-system.svc:9090",
            OperatorConfig(),
            {
                "namespaceSelector": {"matchLabels": {policy.NAMESPACE_NAME: "sreforge-system"}},
                "podSelector": {"matchLabels": {}},
            },
        ),
        (
            "http://prometheus.mon.svc.cluster.local:9090",
            OperatorConfig(scraper_labels={"app": "prometheus"}),
            {
                "namespaceSelector": {"matchLabels": {policy.NAMESPACE_NAME: "mon"}},
                "podSelector": {"matchLabels": {"app": "prometheus"}},
            },
        ),
        (
            "https://prom.example.com",
            OperatorConfig(scraper_namespace="mon"),
            {
                "namespaceSelector": {"matchLabels": {policy.NAMESPACE_NAME: "mon"}},
                "podSelector": {"matchLabels": {}},
            },
        ),
        ("http://10.0.0.7:9090", OperatorConfig(), {"ipBlock": {"cidr": "10.0.0.7/32"}}),
    ],
)
def test_the_scraper_is_the_prometheus_urls_namespace_or_address(
    url: str, cfg: OperatorConfig, peer: dict[str, Any]
) -> None:
    assert policy.scraper_peers(url, cfg) == [peer]


def test_a_scraper_that_cannot_be_told_is_a_clear_error() -> None:
    with pytest.raises(policy.PolicyError, match="SREFORGE_SCRAPER_NAMESPACE"):
        policy.scraper_peers("https://prom.example.com", OperatorConfig())


def test_scraper_labels_are_parsed_or_refused_by_name() -> None:
    cfg = OperatorConfig.from_env({"SREFORGE_SCRAPER_POD_LABELS": "a=b, c=d"})
    assert cfg.scraper_labels == {"a": "b", "c": "d"}
    with pytest.raises(ValueError, match="SREFORGE_SCRAPER_POD_LABELS='a'"):
        OperatorConfig.from_env({"SREFORGE_SCRAPER_POD_LABELS": "a"})


def test_the_learning_wait_is_a_number_of_seconds_or_refused_by_name() -> None:
    assert OperatorConfig.from_env({}).learn_wait_seconds == 50.0  # 20 s to learn, scrapes
    assert OperatorConfig.from_env({"SREFORGE_LEARN_WAIT_SECONDS": "0"}).learn_wait_seconds == 0
    for bad in ("soon", "-1", "601"):
        with pytest.raises(ValueError, match=f"SREFORGE_LEARN_WAIT_SECONDS='{bad}'"):
            OperatorConfig.from_env({"SREFORGE_LEARN_WAIT_SECONDS": bad})


def test_the_runner_image_is_set_apart_from_the_operators() -> None:
    cfg = OperatorConfig.from_env(
        {"SREFORGE_OPERATOR_IMAGE": "op:1", "SREFORGE_RUNNER_IMAGE": "runner:1"}
    )
    assert (cfg.operator_image, cfg.runner) == ("op:1", "runner:1")
    assert OperatorConfig.from_env({"SREFORGE_OPERATOR_IMAGE": "op:1"}).runner == "op:1"


def test_the_code_under_test_gets_no_token_unless_asked_and_gets_its_account_back() -> None:
    dep = deployment()
    dep["spec"]["template"]["spec"]["serviceAccount"] = "catalog"  # the deprecated alias
    before = policy.pod_identity(dep)
    assert before == {"serviceAccountName": "catalog", "automountServiceAccountToken": None}
    own = policy.confine_pod(dep, None, token=False)["spec"]["template"]["spec"]
    assert (own["serviceAccountName"], own["automountServiceAccountToken"]) == ("catalog", False)
    named = policy.confine_pod(dep, "under-test", token=True)["spec"]["template"]["spec"]
    assert named["serviceAccountName"] == "under-test"
    assert named["automountServiceAccountToken"] is True
    assert "serviceAccount" not in named
    back = policy.restore_identity(policy.confine_pod(dep, "under-test", token=True), before)
    spec = back["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "catalog"
    assert "automountServiceAccountToken" not in spec


def test_an_incidents_agent_may_call_that_incidents_tools_and_nothing_else() -> None:
    """The agent's account, Role and binding: owned by the Incident, no mounted token, and
    one rule: `get` on this Incident and its `mcp` subresource, by name."""
    objs = policy.agent_access(incident("team-a"))
    assert [o["kind"] for o in objs] == ["ServiceAccount", "Role", "RoleBinding"]
    for o in objs:
        assert o["metadata"]["name"] == "inc-agent"
        assert o["metadata"]["namespace"] == "team-a"
        [owner] = o["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Incident", "inc", "u-1")
    account, role, binding = objs
    assert account["automountServiceAccountToken"] is False
    assert role["rules"] == [
        {
            "apiGroups": ["sreforge.dev"],
            "resources": ["incidents", "incidents/mcp"],
            "resourceNames": ["inc"],
            "verbs": ["get"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "inc-agent",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "inc-agent", "namespace": "team-a"}
    ]
    assert policy.mcp_path("team-a", "inc") == "/incidents/team-a/inc/mcp"
