"""The driver of one Incident: `IncidentRun` drives `sreforge.loop.step` the way
`runtime.local.LocalRun` drives it for a local run. The decisions are the loop's and the
oracle's; this module only observes (Prometheus through `Telemetry`, rollouts and Jobs
through the API) and acts (image swap, load Job, CI Job, patch overlay, status writes). The
loop's state lives in the Incident's `status.loop`, so a restarted operator resumes the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sreforge import loop
from sreforge.api.observation import AlertSample
from sreforge.api.resources import (
    INCIDENT_PLURAL,
    SUBMISSION_PLURAL,
    Condition,
    IncidentSpec,
)
from sreforge.api.verdict import Verdict
from sreforge.loop import Phase, RunState
from sreforge.oracle import soak
from sreforge.runtime import failpoint
from sreforge.runtime.driver import Driver, Stop, TargetChangedError
from sreforge.runtime.kube import events, guard, metrics, policy
from sreforge.runtime.kube.client import Kube, KubeError, PodFault
from sreforge.runtime.kube.config import (
    CI_MARGIN_SECONDS,
    OperatorConfig,
    effective_load,
    effective_verify,
)
from sreforge.runtime.kube.dependencies import (
    PREPARE_TIMEOUT_SECONDS,
    EnvEntry,
    as_entries,
    case_database,
    env_entries,
    needs_case_state,
    needs_prepare,
    render_case_state_job,
    render_dependencies,
    render_prepare_job,
    target_env,
    with_env,
)
from sreforge.runtime.kube.intake import VettedPatch, next_queued, read_vetted, refuse_queued
from sreforge.runtime.kube.prerequisites import (
    UNREACHABLE,
    Missing,
    await_prerequisites,
    prometheus_condition,
    prometheus_error,
    waiting_condition,
)
from sreforge.runtime.kube.rca import diagnose
from sreforge.runtime.kube.render import (
    load_job_name,
    overlay_template,
    patch_cm_name,
    patch_configmap,
    probe_job_name,
    render_ci_job,
    render_load,
    target_container,
    telemetry_scope,
)
from sreforge.runtime.kube.status import (
    Persisted,
    ci_condition,
    ci_result_of,
    condition,
    finished_conditions,
    graded_condition,
    incident_phase,
    recorded_conditions,
    refused,
    started_conditions,
    verdict_condition,
    verdict_status,
)
from sreforge.telemetry import Telemetry, control_quiet, control_window

# Seconds between status writes while nothing but samples changes.
PERSIST_EVERY_SECONDS = 5.0
# The operator grades Submissions one after another until one passes, re-arming between
# them; it keeps a few samples while it waits (the oracle reads only post-redeploy ones).
OPERATOR_CASES = {"cases": None, "stop_on_pass": True, "waiting_samples_kept": 5}
# How often the queue of Submissions is looked at while the Incident waits for one.
QUEUE_LOOK_SECONDS = 1.0
# Pod template labels under this prefix that were not there before the injection are the
# run's, removed when the Incident is deleted.
RUN_LABEL_PREFIX = "sreforge.dev/"
NO_PROMETHEUS = "no Prometheus: set spec.prometheusURL or SREFORGE_PROMETHEUS_URL"


class IncidentRun:
    """Drives one Incident's loop until it is finished or `stop` is set (kopf daemon)."""

    def __init__(self, kube: Kube, cfg: OperatorConfig, incident: dict[str, Any], log: Any) -> None:
        self.kube = kube
        self.cfg = cfg
        self.log = log
        self.name = incident["metadata"]["name"]
        self.uid = incident["metadata"].get("uid", self.name)
        self.ns = incident["metadata"]["namespace"]
        self.incident = incident
        self.spec = IncidentSpec.model_validate(incident.get("spec") or {})
        self.scenario = cfg.scenario(self.spec.scenario)
        self.verify = effective_verify(self.scenario, self.spec)
        self.target_ns = self.spec.target_namespace or self.ns
        self.target = self.spec.target_deployment or self.scenario.service.name
        # what the target's pods carry while the Incident runs (render.overlay_template)
        self._labels = {"incident": self.name, "scenario": self.spec.scenario}
        # ... and what its container gets: the URLs of the Incident's own dependencies (the
        # names; the values of a case: _case_env)
        self._dep_env = as_entries(target_env(incident, self.scenario))
        self._target = (self.target_ns, self.target)
        url = self.spec.prometheus_url or cfg.prometheus_url
        self.prometheus_url = url
        self.telemetry = (
            Telemetry(
                url,
                target_series=self.scenario.target_series,
                service_job=self.scenario.service.name,
                scope=telemetry_scope(self.name, self.ns, self.target_ns),
            )
            if url
            else None
        )
        self._vetted: tuple[str, VettedPatch] | None = None  # (Submission, its patch)
        self._stop: Stop = threading.Event()  # kopf's daemon flag once run() starts
        self._last_persist = 0.0
        self._next_queue_look = 0.0
        self._last_verdict: Verdict | None = None
        self._persisted_phase: Phase | None = None
        self._evented_phase: Phase | None = None  # the phase whose Event was posted
        self._missing: Missing | None = None  # a prerequisite waited for, if any
        self._prometheus_ok: bool | None = None  # as the PrometheusReachable condition says
        status = incident.get("status") or {}
        if status.get("loop"):
            self.p = Persisted.load(status["loop"])
            self.resumed = True
            self._evented_phase = self.p.state.phase  # posted by the operator before
        else:
            run_id = f"{self.name}-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}"
            self.p = Persisted(
                RunState(run_id=run_id, target_alert=self.scenario.target_alert, verify=self.verify)
            )
            self.resumed = False
        # the operator's policy, also for a state persisted by an operator that had none;
        # the soak key is never persisted: derived again from the operator's secret
        self.p.state = self.p.state.model_copy(
            update={**OPERATOR_CASES, "soak_key": soak.derive_key(cfg.soak_secret, self.uid)}
        )
        self.driver = Driver(self.p.state, self, name=f"sreforge-{self.name}")

    # --- status
    def _persist(
        self,
        conditions: Sequence[Condition] = (),
        extra: dict[str, Any] | None = None,
    ) -> None:
        st = self.p.state
        body = {
            "phase": incident_phase(self.p),
            "alert": st.target_alert,
            "runId": st.run_id,
            "loop": self.p.dump(),
            **(extra or {}),
        }
        if st.fired_at:
            body["firedTime"] = datetime.fromtimestamp(st.fired_at, tz=UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        self.kube.update_conditions(INCIDENT_PLURAL, self.ns, self.name, conditions, body)
        metrics.incident_phase(self.uid, body["phase"])
        self._last_persist = time.monotonic()
        entered = st.phase is not self._persisted_phase
        self._persisted_phase = st.phase
        if st.phase not in (self._evented_phase, Phase.PENDING):
            self._evented_phase = st.phase
            self._phase_event()
        if entered:
            failpoint.reached(f"persisted:{st.phase.value}")

    def _phase_event(self) -> None:
        st = self.p.state
        message = events.phase_message(st, f"{self.target_ns}/{self.target}", self.p.submission)
        type_ = events.NORMAL
        if st.phase is Phase.DONE and st.verdict is not None:
            type_ = events.verdict_type(st.verdict)
            message += f" ({st.verdict.reason.value})"
        self.kube.post_event(events.event(self.incident, type_, st.phase.value, message))

    def _sub_conditions(
        self,
        sub: str,
        updates: Sequence[Condition],
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.kube.update_conditions(SUBMISSION_PLURAL, self.ns, sub, updates, extra)

    # --- the loop (sreforge.runtime.driver drives it; this class only implements actions)
    def run(self, stop: Stop) -> None:
        self._stop = stop
        st = self.p.state
        if self.p.finished:
            metrics.incident_phase(self.uid, incident_phase(self.p))
            self._refuse_queued("IncidentFinished", f"Incident {self.name} is finished")
            return
        access = self._agent_access()
        if self.resumed:
            self.log.info(f"resuming run {st.run_id} in phase {st.phase}")
            if access and (self.incident.get("status") or {}).get("mcp") != access["mcp"]:
                self.kube.patch_status(INCIDENT_PLURAL, self.ns, self.name, access)
            first: loop.Event = loop.Resumed(t=time.time())
        else:
            self._persist(started_conditions(), access)
            first = loop.Start(t=time.time())
        self.driver.run(first, stop)

    def _agent_access(self) -> dict[str, Any]:
        """The Incident's agent ServiceAccount and the Role that lets it (alone) call this
        Incident's tools on the operator's MCP endpoint (runtime/kube/mcp.py), made before
        the run starts (the endpoint serves them once the alert fired); its status.mcp."""
        if not self.cfg.mcp_url:
            return {}
        try:
            for obj in policy.agent_access(self.incident):
                self.kube.create(obj)
        except KubeError as exc:  # the run goes on; only its tools are missing
            self.log.warning(f"no MCP tools for this Incident: {exc}")
            self.kube.post_event(
                events.event(self.incident, events.WARNING, "McpUnavailable", str(exc)[:1000])
            )
            return {}
        return {
            "mcp": {
                "url": self.cfg.mcp_url + policy.mcp_path(self.ns, self.name),
                "serviceAccountName": policy.agent_account_name(self.name),
                "audience": policy.MCP_AUDIENCE,
            }
        }

    def stepped(self, before: Phase, event: loop.Event) -> None:
        if isinstance(event, loop.Fault):  # what ends the run Inconclusive, in the log too
            self.log.error(f"harness fault in phase {before}: {event.reason}")
        if self.p.state.phase is not before:
            self._on_phase_change()
        elif (
            isinstance(event, loop.Sampled)
            and time.monotonic() - self._last_persist >= PERSIST_EVERY_SECONDS
        ):
            self._persist()

    def sample(self) -> AlertSample:
        if self.telemetry is None:
            raise KubeError(NO_PROMETHEUS)
        if self.p.state.phase is Phase.VERIFYING and self.p.rolled_out is not None:
            # the rolled-out target, intact? (a change fails the run: sreforge.loop)
            try:
                view = self.kube.target_view(*self._target)
            except Exception as exc:  # the API unreadable now: compared at the next sample
                self.log.warning(f"the target could not be read to compare it: {exc}")
            else:
                found = guard.changes(self.p.rolled_out, view)
                if found:
                    raise TargetChangedError("; ".join(found))
        got = self.telemetry.sample()
        if self.p.state.phase is Phase.VERIFYING:
            # a new revision's pods start at 0: any restart since is the fix's
            got = got.model_copy(
                update={"restarts": self.kube.rollout_restarts(self.target_ns, self.target)}
            )
        ok = got.firing is not None
        if ok is not self._prometheus_ok:
            self._prometheus_ok = ok
            url = self.telemetry.url
            error = None if ok else prometheus_error(url) or "ALERTS could not be read"
            self._persist([prometheus_condition(url, error)])
        return got

    def poll(self) -> loop.Event | None:
        """A queued Submission, looked for once a second while the Incident waits."""
        if self.p.state.phase is not Phase.AWAITING_SUBMISSION:
            return None
        if time.monotonic() < self._next_queue_look:
            return None
        self._next_queue_look = time.monotonic() + QUEUE_LOOK_SECONDS
        sub = self._next_submission()
        return None if sub is None else self._start_grading(sub)

    def _on_phase_change(self) -> None:
        st = self.p.state
        conds: list[Condition] = []
        extra: dict[str, Any] = {}
        if st.phase is Phase.AWAITING_FIRE and st.graded == 0:
            conds.append(
                condition(
                    "Injected",
                    True,
                    "RegressedBuildRolledOut",
                    f"{self.target_ns}/{self.target} runs "
                    f"{self.cfg.image(self.scenario.service.name, self.scenario.name)}; "
                    "load started",
                )
            )
            conds.append(
                condition(
                    "AlertFiring",
                    False,
                    "Waiting",
                    f"waiting up to {st.verify.fire_timeout_seconds}s for {st.target_alert}",
                )
            )
        elif st.phase is Phase.AWAITING_SUBMISSION:
            # the phase with what the hand-off says, in one write: whoever sees the phase
            # also finds the brief and AlertFiring True
            conds, extra = self._handed_off()
        elif st.phase is Phase.AWAITING_FIRE:
            wait = st.rearm_timeout_seconds or st.verify.fire_timeout_seconds
            conds.append(
                condition(
                    "AlertFiring",
                    False,
                    "Rearming",
                    f"the regressed build is back: waiting up to {wait:.0f}s for "
                    f"{st.target_alert} to fire again before the next Submission",
                )
            )
        self._persist(conds, extra)

    # --- actions (sreforge.runtime.driver.Runtime)
    def _await_prerequisites(self) -> None:
        """Wait, changing nothing, for the target, its Service and Prometheus; each change of
        what is missing goes to the Injected condition."""
        if self.prometheus_url is None:
            raise KubeError(NO_PROMETHEUS)
        timeout = self.spec.target_timeout_seconds

        url = self.prometheus_url

        def shown(missing: Missing | None) -> None:
            self._missing = missing
            conds = [waiting_condition(missing, timeout)]
            if missing is not None:
                self.kube.post_event(
                    events.event(self.incident, events.WARNING, missing.reason, missing.message)
                )
            error = missing.error if missing is not None and missing.reason == UNREACHABLE else None
            if error is not None or self._prometheus_ok is False:
                self._prometheus_ok = error is None
                conds.append(prometheus_condition(url, error))
            self._persist(conds)

        since = self.p.state.started_at or time.time()
        await_prerequisites(
            self.kube, self.target_ns, self.target, url, since, timeout, self._stop, shown
        )

    def inject(self) -> loop.Event:
        svc = self.scenario.service.name
        self._await_prerequisites()
        # refused before anything is recorded or changed: a fault here leaves the target as
        # it was (restore() puts back only what a recorded baseline says was swapped)
        account = self.spec.service_account_name
        if account is not None and not self.kube.service_account_exists(self.target_ns, account):
            raise KubeError(
                f"spec.serviceAccountName: ServiceAccount {self.target_ns}/{account} not found"
            )
        assert self.prometheus_url is not None  # _await_prerequisites
        scrapers = policy.scraper_peers(self.prometheus_url, self.cfg)
        dep = self.kube.get_deployment(self.target_ns, self.target)
        # confined before anything of the run starts: the target's and the load's traffic
        for obj in policy.render_network_policies(self.incident, dep, self.scenario, scrapers):
            self.kube.create(obj)
        box = target_container(dep, svc)
        if self.p.baseline_image is None:
            self.p.baseline_image = box.get("image")
            self.p.baseline_workdir = box.get("workingDir")
            self.p.baseline_labels = dict(dep["spec"]["template"]["metadata"].get("labels") or {})
            self.p.baseline_env = env_entries(dep, svc, list(self._dep_env))
            self.p.baseline_identity = policy.pod_identity(dep)
            # in status before the image changes: an operator that dies after the swap must
            # not take the regressed image for the baseline when it resumes
            self._persist()
        url = self.kube.service_url(self.target_ns, self.target)  # fail before changing anything
        self._start_dependencies()
        env = self._case_env(0)

        def swap(d: dict[str, Any]) -> dict[str, Any]:
            out = self._confined(
                overlay_template(
                    d, svc, self.cfg, None, self.p.baseline_workdir, None, [], **self._labels
                )
            )
            return with_env(out, svc, env)

        def healthy(d: dict[str, Any]) -> dict[str, Any]:
            out = swap(d)
            main = target_container(out, svc)["name"]
            for box in out["spec"]["template"]["spec"]["containers"]:
                if box["name"] == main:
                    box["image"] = self.p.baseline_image
            return out

        # The user's own (healthy) build first, on the Incident's data: the load and the
        # prober learn their known answers from it, as locally; a regression that changes
        # the answers (a lost page size) would otherwise be learned as the truth.
        timeout = self.scenario.service.deploy_timeout_seconds
        self.kube.mutate_deployment(self.target_ns, self.target, healthy)
        self.kube.wait_rollout(self.target_ns, self.target, timeout, self._stop)
        profile = effective_load(self.scenario, self.spec)
        for obj in render_load(
            self.incident,
            profile,
            url,
            self.spec.load_runner,
            self.cfg,
            prometheus_url=self.prometheus_url,
        ):
            self.kube.create(obj)
        if not self.kube.wait_started(self.ns, load_job_name(self.name), timeout, self._stop):
            self.log.warning(f"the load Job's pod has not started within {timeout}s")
        # it stops by itself after its duration, counted from its creation (a resumed
        # injection finds the same Job): no case is started that it could not cover
        created = self.kube.job_created(self.ns, load_job_name(self.name)) or time.time()
        load_ends_at = created + profile.duration_seconds
        self._await_learning()
        self._control_window()
        self.kube.mutate_deployment(self.target_ns, self.target, swap)
        failpoint.reached("applied:inject")
        self.kube.wait_rollout(self.target_ns, self.target, timeout, self._stop)
        return loop.Injected(t=time.time(), load_ends_at=load_ends_at)

    def _await_learning(self) -> None:
        """Wait until the load and the prober run their schedules: they have learned their
        known answers (from the healthy build). Past the wait the run goes on
        with what they learned, and says so (cfg.learn_wait_seconds)."""
        assert self.telemetry is not None  # _await_prerequisites
        wait = self.cfg.learn_wait_seconds
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not self._stop.is_set():
            if self.telemetry.schedules_started():
                return
            time.sleep(1.0)
        self.log.warning(
            f"the load and the prober had not started their schedules {wait:.0f}s "
            "after their pods: injecting the regression anyway"
        )

    def _control_window(self) -> None:
        """spec.controlSeconds: the healthy build under the Incident's own load and prober,
        its pods labelled as the run's, for that long before the injection. The scenario's
        target alert and every page must stay quiet and the build must not restart; what
        they did goes to status.control, with the build's highest p95 per route: how far
        below each latency page it sat (a quiet control is no proof of headroom). The same
        observation as a local validation's (telemetry.control_window), the restarts read
        from the Deployment's current pods. Measured once: an operator that resumes the
        injection after it finds it in status."""
        seconds = self.spec.control_seconds
        if not seconds:
            return
        current = self.kube.get_incident(self.ns, self.name) or self.incident
        if (current.get("status") or {}).get("control"):
            return
        assert self.telemetry is not None  # _await_prerequisites
        message = (
            f"control window: {self.target_ns}/{self.target} runs its healthy build under "
            f"the Incident's load for {seconds}s before the injection"
        )
        self._persist([condition("Injected", False, "ControlWindow", message)])
        self.kube.post_event(events.event(self.incident, events.NORMAL, "ControlWindow", message))
        control = control_window(
            self.telemetry,
            self.scenario.target_alert,
            seconds,
            restarts=lambda: self.kube.rollout_restarts(self.target_ns, self.target),
            stop=self._stop,
        )
        if control is None:
            return  # the operator stops: a resumed injection measures it again
        quiet = "quiet" if control_quiet(control) else "NOT quiet"
        self.log.info(f"control window: {quiet}: {control}")
        self._persist(extra={"control": control})

    def _start_dependencies(self) -> None:
        """The scenario's Redis, PostgreSQL and upstreams in the Incident's namespace (owned
        by it), up before the target is pointed at them, and its data prepared there; one
        that cannot start, or a preparation that fails, is a harness fault."""
        objs = render_dependencies(self.incident, self.scenario, self.cfg)
        for obj in objs:
            self.kube.create(obj)
        for obj in objs:
            if obj["kind"] == "Deployment":
                self.kube.wait_rollout(
                    self.ns,
                    obj["metadata"]["name"],
                    self.scenario.service.deploy_timeout_seconds,
                    self._stop,
                )
        if not needs_prepare(self.scenario):
            return
        self._run_harness_job(
            render_prepare_job(self.incident, self.scenario, self.cfg),
            "the data preparation (the scenario's prepare)",
        )

    def _run_harness_job(self, job: dict[str, Any], what: str) -> None:
        """Create a Job of the harness's (or find it, resumed) and wait until it succeeds;
        its failure is a harness fault naming it and its containers' log tails."""
        name = job["metadata"]["name"]
        self.kube.create(job)
        self.log.info(f"{what}: Job {self.ns}/{name}")
        ok, details = self.kube.wait_job(self.ns, name, PREPARE_TIMEOUT_SECONDS + 60, self._stop)
        if not ok:
            said = "; ".join(
                f"{c['name']} exited {c['exitCode']} ({c['reason']}): {c['message'][-300:]}"
                for c in details.get("containers") or []
            )
            raise KubeError(
                f"{what} (Job {self.ns}/{name}) failed: "
                f"{said or details.get('jobReason') or 'no detail'}"
            )

    def _case_env(self, case: int) -> dict[str, EnvEntry]:
        """The target's environment for case `case` (0: the first baseline; a Submission's
        patched build shares its case's), its fresh state made first: with PostgreSQL, a
        database of its own cloned from the prepared one; with Redis, Redis emptied; so
        nothing an earlier case wrote or cached reaches it (render_case_state_job)."""
        if needs_case_state(self.scenario):
            self._run_harness_job(
                render_case_state_job(self.incident, self.scenario, self.cfg, case),
                f"case {case}'s fresh state",
            )
        return as_entries(target_env(self.incident, self.scenario, case_database(case)))

    def _confined(self, dep: dict[str, Any]) -> dict[str, Any]:
        """The pod template under the Incident's ServiceAccount, no token unless asked."""
        return policy.confine_pod(
            dep, self.spec.service_account_name, self.spec.automount_service_account_token
        )

    def hand_off(self) -> None:
        """The brief and the conditions that say the alert fired. Written with the phase
        as it turns AwaitingSubmission (_on_phase_change), so that no reader ever sees that
        phase without them; again here, for a resumed run whose write may have been lost."""
        self._persist(*self._handed_off())
        # the Submission comes through `poll`

    def _handed_off(self) -> tuple[list[Condition], dict[str, Any]]:
        brief = self.scenario.brief_path.read_text(encoding="utf-8")  # never root_cause.md
        st = self.p.state
        tools = " (or use the MCP tools at status.mcp.url)" if self.cfg.mcp_url else ""
        conds = [
            condition(
                "AlertFiring",
                True,
                "TargetAlertFiring",
                f"{st.target_alert} fired "
                f"{(st.fired_at or 0) - (st.injected_at or 0):.0f}s after the injection",
            ),
            condition(
                "AwaitingSubmission",
                True,
                "HandedOff",
                f"the brief is in status.brief; create a Submission{tools}",
            ),
        ]
        return conds, {"brief": brief[:65_000]}

    def _next_submission(self) -> str | None:
        return next_queued(self.kube, self.ns, self.name, self.p.graded)

    def _refuse_queued(self, reason: str, message: str) -> None:
        refuse_queued(self.kube, self.ns, self.name, reason, message)

    def _start_grading(self, sub: str) -> loop.Event:
        self.p.submission = sub
        self.p.graded.append(sub)
        self._sub_conditions(
            sub,
            [
                condition(
                    "Accepted",
                    True,
                    "Grading",
                    f"graded against Incident {self.name} (run {self.p.state.run_id})",
                ),
                condition("Graded", False, "Grading", "the CI gate, the rollout, the oracle"),
            ],
        )
        self._persist(
            [condition("AwaitingSubmission", False, "Grading", f"grading Submission {sub}")]
        )
        return loop.Submitted(t=time.time())

    def _vetted_patch(self) -> VettedPatch:
        """The graded Submission's patch as intake vetted and stored it: read once, kept for
        the deploy (read again only by an operator that restarted meanwhile)."""
        sub = self.p.submission
        assert sub is not None
        if self._vetted is None or self._vetted[0] != sub:
            self._vetted = (sub, read_vetted(self.kube, self.ns, self.name, sub))
        return self._vetted[1]

    def _patch_cm_name(self) -> str:
        assert self.p.submission is not None
        return patch_cm_name(self.name, self.p.submission)

    def run_ci(self) -> loop.Event:
        t0 = time.time()
        sub = self.p.submission
        assert sub is not None
        files = self._vetted_patch().files  # the Job mounts the same ConfigMap
        job = render_ci_job(self.incident, sub, self.scenario, self.cfg, self._patch_cm_name())
        self.kube.create(job)
        failpoint.reached("applied:run-ci")
        timeout = self.scenario.service.test_timeout_seconds + CI_MARGIN_SECONDS * 2
        # the tests run the agent's code: their crash or OOM kill is red CI, not a fault
        ok, details = self.kube.wait_job(
            self.ns, job["metadata"]["name"], timeout, self._stop, frozenset({"test"})
        )
        test_command = self.scenario.service.test_command
        res = ci_result_of(ok, details, test_command, time.time() - t0, files)
        self._sub_conditions(sub, [ci_condition(res)])
        return loop.CIFinished(t=time.time(), result=res)

    def deploy(self) -> loop.Event:
        svc = self.scenario.service.name
        sub = self.p.submission
        assert sub is not None
        cm = self._patch_cm_name()
        if self.target_ns != self.ns:  # a Pod mounts ConfigMaps of its own namespace only
            vetted = self._vetted_patch()
            self.kube.put_configmap(
                patch_configmap(cm, self.target_ns, vetted.text, vetted.files, None, "service")
            )

        env = self._case_env(max(self.p.state.graded - 1, 0))  # the baseline's, made already

        def overlay(d: dict[str, Any]) -> dict[str, Any]:
            out = self._confined(
                overlay_template(
                    d,
                    svc,
                    self.cfg,
                    cm,
                    self.p.baseline_workdir,
                    sub,
                    list(self.scenario.protected),
                    **self._labels,
                )
            )
            return with_env(out, svc, env)

        main = target_container(self.kube.get_deployment(self.target_ns, self.target), svc)
        try:
            self.kube.mutate_deployment(self.target_ns, self.target, overlay)
            failpoint.reached("applied:deploy")
            t = self.kube.wait_rollout(
                self.target_ns,
                self.target,
                self.scenario.service.deploy_timeout_seconds,
                self._stop,
                frozenset({main["name"]}),  # runs the patched code: its crash is the agent's
            )
        except PodFault as exc:
            self._sub_conditions(sub, [condition("Deployed", False, "HarnessFault", str(exc))])
            raise  # not the agent's failure: the run is Inconclusive
        except KubeError as exc:
            self._sub_conditions(sub, [condition("Deployed", False, "RolloutFailed", str(exc))])
            return loop.DeployFailed(t=time.time(), reason=str(exc)[:2000])
        # what every sample of the verification compares the target with (persisted with
        # the Deployed step: a resumed operator keeps comparing)
        self.p.rolled_out = guard.snapshot(self.kube.target_view(*self._target))
        self._sub_conditions(
            sub,
            [
                condition(
                    "Deployed",
                    True,
                    "RolledOut",
                    f"{self.target_ns}/{self.target} runs the patched build",
                )
            ],
        )
        return loop.Deployed(t=t)

    def record_verdict(self) -> None:
        st = self.p.state
        verdict = st.verdict
        assert verdict is not None
        self._last_verdict = verdict
        metrics.verdict(verdict.reason)
        sub = self.p.submission
        summary = {
            "passed": verdict.passed,
            "score": round(verdict.score, 4),
            "reason": verdict.reason.value,
            "submission": sub,
        }
        # The Incident first: whoever sees the Submission graded sees the Incident's summary.
        self._persist(recorded_conditions(st, sub), {"verdict": summary})
        why = events.verdict_message(verdict, sub)
        kind, reason = events.verdict_type(verdict), verdict.reason.value
        self.kube.post_event(events.event(self.incident, kind, reason, why))
        failpoint.reached("applied:record")
        if sub is not None:
            fields = verdict_status(verdict, st.ci)
            if st.redeployed_at is not None:  # the soak it was held to, now the verdict is out
                seed, seconds = st.soak()
                fields["soak"] = {"seconds": seconds, "seed": seed}
                restarts = st.most_restarts()
                if restarts is not None:
                    fields["restarts"] = restarts
            conds = [
                condition(
                    "Accepted", True, "Graded", f"graded against Incident {self.name} ({st.run_id})"
                ),
                verdict_condition("Verified", verdict),
                graded_condition(verdict),
            ]
            if st.ci is not None and not st.ci.green:
                conds.append(ci_condition(st.ci))
            self._sub_conditions(sub, conds, fields)
            graded = self.kube.get_submission(self.ns, sub)
            if graded is not None:
                self.kube.post_event(events.event(graded, kind, reason, why))
            self._judge(sub, verdict)

    def _judge(self, sub: str, verdict: Verdict) -> None:
        diagnose(self.kube, self.ns, sub, verdict, self.p.state.run_id, self.scenario, self.log)

    def restore(self) -> None:
        svc = self.scenario.service.name
        if self.p.state.injected_at is None and self.p.baseline_image is None:
            return  # nothing was changed

        self.p.rolled_out = None  # verified: no longer compared
        env = self._case_env(self.p.state.graded)  # the next case starts from fresh data

        def base(d: dict[str, Any]) -> dict[str, Any]:
            out = self._confined(
                overlay_template(
                    d, svc, self.cfg, None, self.p.baseline_workdir, None, [], **self._labels
                )
            )
            return with_env(out, svc, env)

        dep = self.kube.get_deployment(self.target_ns, self.target)
        if base(dep)["spec"] != dep["spec"]:
            self.kube.mutate_deployment(self.target_ns, self.target, base)
            failpoint.reached("applied:restore")
        # also when resumed after the patch went in: the rollout may not have finished
        self.kube.wait_rollout(
            self.target_ns,
            self.target,
            self.scenario.service.deploy_timeout_seconds,
            self._stop,
        )
        if self.p.submission is not None:
            self.kube.delete_configmap(self.target_ns, self._patch_cm_name())

    def reopen(self) -> None:
        """The graded Submission did not pass and the regressed build is back: the next
        Submission is handed off once the alert fires again."""
        last, v = self.p.submission, self._last_verdict
        self.p.submission = None
        why = f" ({v.reason.value})" if v is not None else ""
        self._persist(
            [
                condition(
                    "AwaitingSubmission",
                    False,
                    "Rearming",
                    f"Submission {last} did not pass{why}; the next one is graded once "
                    f"{self.p.state.target_alert} fires again",
                )
            ]
        )

    def finish(self) -> None:
        """A passing verdict or a run that cannot grade ends the Incident."""
        verdict = self.p.state.verdict
        assert verdict is not None
        self.p.finished = True
        self.kube.delete_job(self.ns, load_job_name(self.name))
        self.kube.delete_job(self.ns, probe_job_name(self.name))
        missing = self._missing.reason if self._missing is not None else None
        self._persist(finished_conditions(self.p, missing))
        self._refuse_queued(
            "IncidentFinished", f"Incident {self.name} is finished ({verdict.reason.value})"
        )


def restore_on_delete(kube: Kube, run: IncidentRun) -> None:
    """An Incident deleted, finished or not: its target Deployment gets back the image it had
    before the injection, without overlay and without the labels the run put on its pods;
    Submissions still waiting or being graded are told (the Jobs and ConfigMaps go with the
    real garbage collector)."""
    why = f"Incident {run.name} was deleted"
    if run.p.submission is not None and not run.p.finished:
        kube.update_conditions(
            SUBMISSION_PLURAL, run.ns, run.p.submission, refused("IncidentDeleted", why)
        )
    refuse_queued(kube, run.ns, run.name, "IncidentDeleted", why)
    # the policies in the Incident's namespace go with their owner; the target's may be
    # in another namespace (no owner across namespaces)
    kube.delete_network_policy(run.target_ns, policy.target_policy_name(run.name))
    original = run.p.baseline_image
    if original is None:
        return
    svc = run.scenario.service.name

    def back(d: dict[str, Any]) -> dict[str, Any]:
        out = overlay_template(d, svc, run.cfg, None, run.p.baseline_workdir, None, [])
        main = target_container(out, svc)["name"]
        for c in out["spec"]["template"]["spec"]["containers"]:
            if c["name"] == main:
                c["image"] = original
        meta = out["spec"]["template"]["metadata"]
        labels = meta.get("labels") or {}
        keep = run.p.baseline_labels
        if keep is None:  # a run from before baselineLabels: the selector's stay
            keep = (out["spec"].get("selector") or {}).get("matchLabels") or {}
        meta["labels"] = {
            k: v for k, v in labels.items() if k in keep or not k.startswith(RUN_LABEL_PREFIX)
        }
        # the env the dependencies replaced, as it was (their objects go with the Incident)
        if run.p.baseline_env:
            out = with_env(out, svc, run.p.baseline_env)
        if run.p.baseline_identity is not None:
            out = policy.restore_identity(out, run.p.baseline_identity)
        return out

    if kube.find_deployment(run.target_ns, run.target) is None:
        return  # deleted by its owner: nothing to give back
    kube.mutate_deployment(run.target_ns, run.target, back)
