"""The operator's Kubernetes API client: every call to the API server goes through `Kube`."""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from sreforge.api.resources import (
    GROUP,
    INCIDENT_PLURAL,
    SUBMISSION_PLURAL,
    VERSION,
    Condition,
)
from sreforge.errors import SreforgeError
from sreforge.runtime.driver import Stop
from sreforge.runtime.kube.status import conditions_of, set_condition
from sreforge.runtime.kube.trouble import (
    Trouble,
    Watch,
    deployment_troubles,
    failed_create,
    pod_troubles,
)

# How often a waiting Job's pods are looked at for troubles (its own status every 0.5 s).
TROUBLE_LOOK_SECONDS = 2.0


JSON_PATCH = "application/json-patch+json"


def _without_nulls(status: dict[str, Any]) -> dict[str, Any]:
    """Status fields as a merge patch would leave them: a null is no value; except inside
    `loop`, the persisted state, whose nulls are values (free-form: the server keeps them)."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return {k: v if k == "loop" else strip(v) for k, v in status.items() if v is not None}


class KubeError(SreforgeError, RuntimeError):
    """A Kubernetes interaction that failed; the message is for a condition or a Fault."""


class PodFault(KubeError):
    """A pod the harness made cannot start (image, config, quota, scheduling, the harness's
    own container OOM-killed): a harness fault with the pod's own reason, never the agent's
    failure."""

    def __init__(self, trouble: Trouble) -> None:
        super().__init__(f"a pod cannot start: {trouble}")
        self.trouble = trouble


def _restarts(container: Any) -> int:
    """A container's restarts, counting one that exited and waits to be started again
    (the kubelet bumps restartCount only when it restarts it, after its back-off)."""
    state = container.state
    down = state is not None and (
        state.terminated is not None
        or (state.waiting is not None and state.waiting.reason == "CrashLoopBackOff")
    )
    return int(container.restart_count or 0) + (1 if down else 0)


class Kube:
    """The operator's Kubernetes client: kubeconfig ($KUBECONFIG) or in-cluster config."""

    def __init__(self) -> None:
        from kubernetes import client, config  # noqa: PLC0415

        try:
            # $KUBECONFIG as it is now: the library reads it once, when first imported
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG")
            )
        except config.ConfigException:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        # Any: this module passes and reads plain dicts, not the client's model classes
        self.api: Any = client.ApiClient()
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)
        self.networking: Any = client.NetworkingV1Api(self.api)
        self.rbac: Any = client.RbacAuthorizationV1Api(self.api)
        self.authn: Any = client.AuthenticationV1Api(self.api)
        self.authz: Any = client.AuthorizationV1Api(self.api)
        self._exc = client.exceptions.ApiException

    def default_namespace(self) -> str:
        from kubernetes import config  # noqa: PLC0415

        try:
            _, ctx = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG")
            )
            return str((ctx or {}).get("context", {}).get("namespace") or "default")
        except config.ConfigException:
            return "default"

    # --- generic
    def _status(self, exc: Exception) -> int:
        return int(getattr(exc, "status", 0) or 0)

    def _plain(self, obj: Any) -> dict[str, Any]:
        return dict(self.api.sanitize_for_serialization(obj))

    def get_incident(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, INCIDENT_PLURAL, name)
            )
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise

    def get_submission(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, ns, SUBMISSION_PLURAL, name
                )
            )
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise

    def list_submissions(self, ns: str) -> list[dict[str, Any]]:
        res = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, SUBMISSION_PLURAL)
        return list(res.get("items") or [])

    def create_submission(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, SUBMISSION_PLURAL, body)
        )

    def patch_status(self, plural: str, ns: str, name: str, status: dict[str, Any]) -> None:
        """A merge patch of `status` (lists such as conditions are replaced whole)."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, plural, name, {"status": status}
            )
        except self._exc as exc:
            if self._status(exc) != 404:  # deleted meanwhile: nothing to write to
                raise

    def update_conditions(
        self,
        plural: str,
        ns: str,
        name: str,
        updates: Sequence[Condition],
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Upsert `updates` into the object's conditions and write them with `extra` status.

        A JSON patch guarded by the resourceVersion read (retried on a conflict), so two
        writers never lose each other's conditions; and `loop` keeps its nulls (a merge
        patch deletes every key whose value is null: the persisted state, e.g. a blind
        sample's `firing: null` or a signal's `value: null`, could not be loaded again)."""
        getter = self.get_incident if plural == INCIDENT_PLURAL else self.get_submission
        for _ in range(10):
            obj = getter(ns, name)
            if obj is None:
                return
            conds = conditions_of(obj)
            gen = obj["metadata"].get("generation")
            for new in updates:
                conds = set_condition(conds, new, gen)
            dumped = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conds]
            status = _without_nulls(
                {**(extra or {}), "conditions": dumped, "observedGeneration": gen}
            )
            rv = obj["metadata"]["resourceVersion"]
            ops: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
            ]
            if obj.get("status") is None:
                ops.append({"op": "add", "path": "/status", "value": status})
            else:
                ops += [
                    {"op": "add", "path": f"/status/{k}", "value": v} for k, v in status.items()
                ]
            try:
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ns, plural, name, ops, _content_type=JSON_PATCH
                )
                return
            except self._exc as exc:
                if self._status(exc) == 404:
                    return  # deleted meanwhile: nothing to write to
                if not self._conflict(exc, rv, lambda: getter(ns, name)):
                    raise
        raise KubeError(f"{plural} {ns}/{name}: status write conflicts did not settle")

    def _conflict(self, exc: Any, rv: str, read: Callable[[], dict[str, Any] | None]) -> bool:
        """A write refused because the object changed since it was read at `rv`: a 409, or
        the 422 of a JSON patch whose `test` of the resourceVersion failed. The apiserver
        drops that test's message (a generic "the server rejected our request due to an
        error in our request", no details), so a 422 is a conflict exactly when the object,
        read again, is no longer at `rv`; at `rv` still, the patch itself was invalid."""
        if self._status(exc) == 409:
            return True
        if self._status(exc) != 422:
            return False
        now = read()
        return now is None or (now.get("metadata") or {}).get("resourceVersion") != rv

    def post_event(self, body: dict[str, Any]) -> bool:
        """Create a core/v1 Event (sreforge.runtime.kube.events); best-effort: an Event that
        cannot be posted is never a reason to stop a run. Whether it was posted."""
        try:
            self.core.create_namespaced_event(body["metadata"]["namespace"], body)
        except self._exc:
            return False
        return True

    def create(self, obj: dict[str, Any]) -> None:
        """Create a Job, ConfigMap, Deployment, Service, NetworkPolicy, ServiceAccount, Role
        or RoleBinding; an existing one of the same name is kept (idempotent)."""
        ns = obj["metadata"]["namespace"]
        api, method = {
            "Job": (self.batch, "create_namespaced_job"),
            "ConfigMap": (self.core, "create_namespaced_config_map"),
            "Deployment": (self.apps, "create_namespaced_deployment"),
            "Service": (self.core, "create_namespaced_service"),
            "NetworkPolicy": (self.networking, "create_namespaced_network_policy"),
            "ServiceAccount": (self.core, "create_namespaced_service_account"),
            "Role": (self.rbac, "create_namespaced_role"),
            "RoleBinding": (self.rbac, "create_namespaced_role_binding"),
        }.get(obj["kind"], (None, ""))
        if api is None:
            raise KubeError(f"cannot create kind {obj['kind']}")
        try:
            getattr(api, method)(ns, obj)
        except self._exc as exc:
            if self._status(exc) != 409:
                raise KubeError(
                    f"creating {obj['kind']} {ns}/{obj['metadata']['name']}: "
                    f"{getattr(exc, 'reason', exc)}: {getattr(exc, 'body', '')}"
                ) from exc

    # --- who calls the MCP endpoint (runtime/kube/mcp.py)
    def review_token(self, token: str, audience: str) -> dict[str, Any] | None:
        """The user a bearer token authenticates as, for `audience` (TokenReview): its
        username, uid, groups and extra; None when the API server does not vouch for it."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        }
        got = self._plain(self.authn.create_token_review(body))
        st = got.get("status") or {}
        if not st.get("authenticated") or audience not in (st.get("audiences") or []):
            return None
        return dict(st.get("user") or {})

    def may(self, user: dict[str, Any], ns: str, attributes: dict[str, str]) -> tuple[bool, str]:
        """Whether `user` (a TokenReview's) may do this in `ns` (SubjectAccessReview), and
        the API server's reason."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.get("username"),
                "uid": user.get("uid"),
                "groups": user.get("groups") or [],
                "extra": user.get("extra") or {},
                "resourceAttributes": {"namespace": ns, **attributes},
            },
        }
        st = self._plain(self.authz.create_subject_access_review(body)).get("status") or {}
        return bool(st.get("allowed")), str(st.get("reason") or st.get("evaluationError") or "")

    def pods_of(self, ns: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        """The pods matching these labels, oldest first."""
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = self.core.list_namespaced_pod(ns, label_selector=sel).items
        out = [self._plain(p) for p in pods]
        return sorted(out, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))

    def pod_log(self, ns: str, pod: str, container: str, tail_lines: int) -> list[str]:
        """A container's log, its last `tail_lines` lines ([] when it has none yet)."""
        try:
            text = self.core.read_namespaced_pod_log(
                pod, ns, container=container, tail_lines=tail_lines
            )
        except self._exc as exc:
            if self._status(exc) in (400, 404):  # not started yet, or gone
                return []
            raise
        return str(text or "").splitlines()

    def delete_job(self, ns: str, name: str) -> None:
        with contextlib.suppress(self._exc):
            self.batch.delete_namespaced_job(name, ns, propagation_policy="Background")

    def delete_network_policy(self, ns: str, name: str) -> None:
        with contextlib.suppress(self._exc):
            self.networking.delete_namespaced_network_policy(name, ns)

    def service_account_exists(self, ns: str, name: str) -> bool:
        """Whether the ServiceAccount exists (errors other than not-found raise KubeError)."""
        try:
            self.core.read_namespaced_service_account(name, ns)
        except self._exc as exc:
            if self._status(exc) == 404:
                return False
            raise KubeError(f"ServiceAccount {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc
        return True

    def target_view(self, ns: str, name: str) -> dict[str, Any]:
        """The target as sreforge.runtime.kube.guard compares it: the Deployment, the Service
        of the same name in front of it (None when either is gone) and the pods the
        Service's selector picks (none without a selector)."""
        dep = self.find_deployment(ns, name)
        try:
            svc: dict[str, Any] | None = self._plain(self.core.read_namespaced_service(name, ns))
        except self._exc as exc:
            if self._status(exc) != 404:
                raise KubeError(f"Service {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc
            svc = None
        selector = ((svc or {}).get("spec") or {}).get("selector") or {}
        pods: list[dict[str, Any]] = []
        if selector:
            sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            try:
                found = self.core.list_namespaced_pod(ns, label_selector=sel).items
            except self._exc as exc:
                raise KubeError(f"pods of Service {ns}/{name}: {exc}") from exc
            pods = [self._plain(p) for p in found]
        return {"deployment": dep, "service": svc, "pods": pods}

    def delete_configmap(self, ns: str, name: str) -> None:
        with contextlib.suppress(self._exc):
            self.core.delete_namespaced_config_map(name, ns)

    def read_configmap(self, ns: str, name: str) -> dict[str, str]:
        """A ConfigMap's data; KubeError when it cannot be read."""
        try:
            cm = self.core.read_namespaced_config_map(name, ns)
        except self._exc as exc:
            raise KubeError(f"ConfigMap {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc
        return {str(k): str(v) for k, v in (cm.data or {}).items()}

    def read_configmap_key(self, ns: str, name: str, key: str) -> str:
        data = self.read_configmap(ns, name)
        if key not in data:
            raise KubeError(f"ConfigMap {ns}/{name} has no key {key!r}")
        return data[key]

    def put_configmap(self, cm: dict[str, Any]) -> None:
        """Create the ConfigMap; one of the same name is kept if its data are the same, else
        replaced (deleted and created again: the operator's RBAC has no update)."""
        ns, name = cm["metadata"]["namespace"], cm["metadata"]["name"]
        for attempt in range(2):
            try:
                self.core.create_namespaced_config_map(ns, cm)
                return
            except self._exc as exc:
                if self._status(exc) != 409 or attempt:
                    raise KubeError(
                        f"creating ConfigMap {ns}/{name}: {getattr(exc, 'reason', exc)}: "
                        f"{getattr(exc, 'body', '')}"
                    ) from exc
            if self.read_configmap(ns, name) == cm["data"]:
                return
            self.delete_configmap(ns, name)

    # --- deployments
    def find_deployment(self, ns: str, name: str) -> dict[str, Any] | None:
        """The Deployment, or None when it does not exist (other errors raise KubeError)."""
        try:
            return self._plain(self.apps.read_namespaced_deployment(name, ns))
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise KubeError(f"Deployment {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc

    def service_exists(self, ns: str, name: str) -> bool:
        """Whether the Service exists (errors other than not-found raise KubeError)."""
        try:
            self.core.read_namespaced_service(name, ns)
        except self._exc as exc:
            if self._status(exc) == 404:
                return False
            raise KubeError(f"Service {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc
        return True

    def get_deployment(self, ns: str, name: str) -> dict[str, Any]:
        try:
            return self._plain(self.apps.read_namespaced_deployment(name, ns))
        except self._exc as exc:
            raise KubeError(f"Deployment {ns}/{name}: {getattr(exc, 'reason', exc)}") from exc

    def mutate_deployment(self, ns: str, name: str, fn: Any) -> None:
        """Read, transform the pod template with `fn(dep) -> dep`, write it back as a JSON
        patch guarded by the resourceVersion read (RBAC: patch); retried on a conflict."""
        for _ in range(10):
            dep = self.get_deployment(ns, name)
            template = fn(copy.deepcopy(dep))["spec"]["template"]
            rv = dep["metadata"]["resourceVersion"]
            ops = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "replace", "path": "/spec/template", "value": template},
            ]
            try:
                self.apps.patch_namespaced_deployment(name, ns, ops)
                return
            except self._exc as exc:
                if not self._conflict(exc, rv, lambda: self.find_deployment(ns, name)):
                    raise KubeError(f"Deployment {ns}/{name}: {exc.reason}: {exc.body}") from exc
        raise KubeError(f"Deployment {ns}/{name}: write conflicts did not settle")

    def rollout_done(self, ns: str, name: str) -> tuple[bool, str]:
        """(complete, why not): every replica updated, available, no old ones left."""
        dep = self.get_deployment(ns, name)
        st = dep.get("status") or {}
        want = dep["spec"].get("replicas", 1)
        if (st.get("observedGeneration") or 0) < dep["metadata"]["generation"]:
            return False, "rollout not observed yet"
        for c in st.get("conditions") or []:
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                return False, f"rollout stuck: {c.get('message')}"
        updated, avail, total = (
            st.get("updatedReplicas") or 0,
            st.get("availableReplicas") or 0,
            st.get("replicas") or 0,
        )
        if updated == want and avail >= want and total == want:
            return True, ""
        return False, f"{updated}/{want} updated, {avail} available, {total} total"

    def wait_rollout(
        self,
        ns: str,
        name: str,
        timeout: float,
        stop: Stop,
        agent_containers: frozenset[str] = frozenset(),
    ) -> float:
        """Block until the rollout completes; returns its time. PodFault as soon as a pod
        cannot start for the harness's reasons (sreforge.runtime.kube.trouble; the
        containers in `agent_containers` run the code under test); KubeError on timeout."""
        deadline = time.monotonic() + timeout
        why = ""
        watch = Watch()
        while time.monotonic() < deadline and not stop.is_set():
            done, why = self.rollout_done(ns, name)
            if done:
                return time.time()
            stuck = watch.stuck(self.rollout_troubles(ns, name, agent_containers), time.monotonic())
            if stuck is not None:
                raise PodFault(stuck)
            time.sleep(0.5)
        troubles = self.rollout_troubles(ns, name, agent_containers)
        harness = [t for t in troubles if t.harness]
        if harness:
            raise PodFault(harness[0])
        detail = "; ".join(str(t) for t in troubles[:3])
        raise KubeError(
            f"Deployment {ns}/{name} did not roll out within {timeout:.0f}s: "
            f"{why}{'; ' + detail if detail else ''}"
        )

    def rollout_troubles(
        self, ns: str, dep_name: str, agent_containers: frozenset[str] = frozenset()
    ) -> list[Trouble]:
        """Why the Deployment's pods are not running (none when it cannot be read)."""
        try:
            dep = self.apps.read_namespaced_deployment(dep_name, ns)
            sel = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
            pods = self.core.list_namespaced_pod(ns, label_selector=sel).items
        except self._exc:
            return []
        out = deployment_troubles(self._plain(dep))
        for pod in pods:
            out += pod_troubles(self._plain(pod), agent_containers)
        return out

    def rollout_restarts(self, ns: str, dep_name: str) -> int | None:
        """Container restarts in the pods of the Deployment's current revision (its newest
        ReplicaSet, the one the last rollout made), or None when they cannot be read."""
        revision_key = "deployment.kubernetes.io/revision"
        try:
            dep = self.apps.read_namespaced_deployment(dep_name, ns)
            revision = (dep.metadata.annotations or {}).get(revision_key)
            sel = ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())
            sets = self.apps.list_namespaced_replica_set(ns, label_selector=sel).items
            current = [
                rs
                for rs in sets
                if (rs.metadata.annotations or {}).get(revision_key) == revision
                and any(o.uid == dep.metadata.uid for o in rs.metadata.owner_references or [])
            ]
            if not current:
                return None
            template_hash = (current[0].metadata.labels or {}).get("pod-template-hash")
            pods = self.core.list_namespaced_pod(
                ns, label_selector=f"{sel},pod-template-hash={template_hash}"
            ).items
        except self._exc:
            return None
        return sum(
            _restarts(c) for pod in pods if pod.status for c in pod.status.container_statuses or []
        )

    def job_troubles(
        self, ns: str, name: str, agent_containers: frozenset[str] = frozenset()
    ) -> list[Trouble]:
        """Why the Job's pods are not running, or are not there (quota: FailedCreate)."""
        try:
            pods = self.core.list_namespaced_pod(
                ns, label_selector=f"batch.kubernetes.io/job-name={name}"
            ).items
            events = self.core.list_namespaced_event(
                ns, field_selector=f"involvedObject.kind=Job,involvedObject.name={name}"
            ).items
        except self._exc:
            return []
        out: list[Trouble] = []
        for pod in pods:
            out += pod_troubles(self._plain(pod), agent_containers)
        if not pods:
            out += failed_create([self._plain(e) for e in events], f"Job {name}")
        return out

    def wait_started(self, ns: str, job: str, timeout: float, stop: Stop) -> bool:
        """Wait until a pod of the Job runs (or ran); PodFault when one cannot start for the
        harness's reasons; False when none started within `timeout` for no reason shown."""
        deadline = time.monotonic() + timeout
        watch = Watch()
        while time.monotonic() < deadline and not stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(
                    ns, label_selector=f"batch.kubernetes.io/job-name={job}"
                ).items
            except self._exc:
                pods = []
            if any(p.status.phase in ("Running", "Succeeded") for p in pods):
                return True
            stuck = watch.stuck(self.job_troubles(ns, job), time.monotonic())
            if stuck is not None:
                raise PodFault(stuck)
            time.sleep(1.0)
        return False

    def service_url(self, ns: str, name: str) -> str:
        try:
            svc = self.core.read_namespaced_service(name, ns)
        except self._exc as exc:
            raise KubeError(
                f"Service {ns}/{name} (the load's target): {getattr(exc, 'reason', exc)}"
            ) from exc
        ports = svc.spec.ports or []
        if not ports:
            raise KubeError(f"Service {ns}/{name} has no ports")
        return f"http://{name}.{ns}.svc.cluster.local:{ports[0].port}"

    # --- jobs
    def job_created(self, ns: str, name: str) -> float | None:
        """When the Job was created (epoch seconds), or None if there is no such Job."""
        try:
            job = self.batch.read_namespaced_job(name, ns)
        except self._exc as exc:
            if self._status(exc) == 404:
                return None
            raise
        created = job.metadata.creation_timestamp
        return None if created is None else float(created.timestamp())

    def job_outcome(self, ns: str, name: str) -> tuple[bool | None, dict[str, Any]]:
        """(None while running | True succeeded | False failed, details of its pod)."""
        try:
            job = self.batch.read_namespaced_job(name, ns)
        except self._exc as exc:
            if self._status(exc) == 404:
                raise KubeError(f"Job {ns}/{name} disappeared") from exc
            raise
        st = job.status
        result: bool | None = None
        for c in st.conditions or []:
            if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
                result = True
            if c.status == "True" and c.type in ("Failed", "FailureTarget"):
                result = False
        details: dict[str, Any] = {"jobReason": None}
        if result is False:
            for c in st.conditions or []:
                if c.type == "Failed":
                    details["jobReason"] = f"{c.reason}: {c.message}"
        if result is None:
            return None, details
        pods = self.core.list_namespaced_pod(
            ns, label_selector=f"batch.kubernetes.io/job-name={name}"
        ).items
        for p in pods:
            statuses = [("init", s) for s in p.status.init_container_statuses or []]
            statuses += [("main", s) for s in p.status.container_statuses or []]
            for kind, s in statuses:
                term = s.state.terminated if s.state else None
                if term is None:
                    continue
                details.setdefault("containers", []).append(
                    {
                        "name": s.name,
                        "kind": kind,
                        "exitCode": term.exit_code,
                        "message": term.message or "",
                        "reason": term.reason or "",
                    }
                )
        return result, details

    def wait_job(
        self,
        ns: str,
        name: str,
        timeout: float,
        stop: Stop,
        agent_containers: frozenset[str] = frozenset(),
    ) -> tuple[bool, dict[str, Any]]:
        """Block until the Job finishes: (succeeded, details as job_outcome gives them).
        PodFault (the Job deleted) when its pod cannot start for the harness's reasons or a
        harness container of it was OOM-killed; KubeError on timeout or when `stop` is set."""
        deadline = time.monotonic() + timeout
        watch = Watch()
        next_look = 0.0
        while not stop.is_set():
            ok, details = self.job_outcome(ns, name)
            if ok is False:
                for box in details.get("containers") or []:
                    if box["reason"] == "OOMKilled" and box["name"] not in agent_containers:
                        raise PodFault(
                            Trouble(f"Job {name} container {box['name']}", "OOMKilled", "", True)
                        )
            if ok is not None:
                return ok, details
            if time.monotonic() > deadline:
                raise KubeError(f"Job {ns}/{name} did not finish")
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + TROUBLE_LOOK_SECONDS
                troubles = self.job_troubles(ns, name, agent_containers)
                stuck = watch.stuck(troubles, time.monotonic())
                if stuck is not None:
                    self.delete_job(ns, name)
                    raise PodFault(stuck)
            time.sleep(0.5)
        raise KubeError("operator stopping")
