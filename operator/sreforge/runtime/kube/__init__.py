"""The Kubernetes runtime: all Kubernetes I/O of the operator, and the driver of the loop.

One idea a module:

    config      the operator's configuration, object names and labels, the Incident's
                overrides of the scenario (effective_verify, effective_load)
    render      the objects it creates, as plain dicts (pure): load, CI Job, patch overlay
    client      `Kube`, the API client, `KubeError` and `PodFault`
    trouble     why a pod does not start and whose fault it is (pure)
    prerequisites
                the target Deployment, its Service and Prometheus, waited for before the
                injection (spec.targetTimeoutSeconds)
    events      the domain Events on Incidents and Submissions (pure bodies)
    metrics     the operator's /metrics (Incidents by phase, verdicts, reconcile errors
                and durations)
    status      conditions, a Submission's grade, the CI result, `status.loop` (Persisted)
    intake      a new Submission: refused, graded at once (a refused patch), or its vetted
                patch stored and the Submission queued; the queue
    incident    `IncidentRun`, the driver of one Incident's loop; restore_on_delete
    rca         the RCA judge's diagnosis of a graded Submission
    applypatch  the patch init container's command (`python -m sreforge.runtime.kube
                apply-patch`, through __main__)

Nothing is re-exported here, so that the init container imports only what it runs.
"""
