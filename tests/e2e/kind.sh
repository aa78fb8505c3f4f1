#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup/diagnose run from the EXIT trap, which shellcheck does not follow
# SREForge end to end on a kind cluster (needs Docker, kind, kubectl, helm and the
# `sreforge` CLI of this repository, e.g. `bash scripts/setup.sh && . .venv/bin/activate`).
#
#   bash tests/e2e/kind.sh            # create cluster, build + load images, install,
#                                     # run the Incident, submit the fix, print the verdict
#
# Steps: create the kind cluster; build the operator image (Dockerfile) and the
# catalog's healthy and regressed images (substrate/catalog/Dockerfile, the regressed
# one with SREFORGE_PATCH=<scenario>/regression.patch) and `kind load` them; install the
# chart with its bundled Prometheus (prometheus.enabled: scrapes pods by their
# prometheus.io/* annotations, job = pod label `app`) and the scenario's rules; deploy the healthy catalog
# (Deployment + Service) in the demo namespace; apply scenarios/<scenario>/incident.yaml;
# wait for AwaitingSubmission; `sreforge submit` the reference fix; wait for the
# verdict and print it. Exit 0 when the Submission passed, 1 when it did not, 2 on error.
#
# Environment (all optional):
#   SCENARIO          scenario directory under scenarios/ (latency-cache-stampede)
#   FIX               the patch to submit (scenarios/$SCENARIO/fixes/restore-simplecache.patch)
#   KIND_CLUSTER      cluster name (sreforge-e2e); reused when it exists
#   KEEP_CLUSTER=1    do not delete the cluster at the end
#   PROMETHEUS_IMAGE  repository:tag of the bundled Prometheus (the chart's default)
#   SREFORGE          the sreforge CLI (sreforge, else .venv/bin/sreforge)
#   TIMEOUT_SECONDS   for the alert to fire and, separately, for the verdict (1200)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SCENARIO=${SCENARIO:-latency-cache-stampede}
SCENARIO_DIR="$ROOT/scenarios/$SCENARIO"
FIX=${FIX:-$SCENARIO_DIR/fixes/restore-simplecache.patch}
CLUSTER=${KIND_CLUSTER:-sreforge-e2e}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}
PROMETHEUS_IMAGE=${PROMETHEUS_IMAGE:-}
TIMEOUT_SECONDS=${TIMEOUT_SECONDS:-1200}
SYSTEM_NS=sreforge-system
DEMO_NS=sreforge-demo
OPERATOR_IMAGE=sreforge/operator:dev
RUNNER_IMAGE=sreforge/runner:dev
HEALTHY_IMAGE=sreforge/catalog:healthy
REGRESSED_IMAGE=sreforge/catalog:$SCENARIO # each scenario's regressed build has its own tag
# the scenario's Incident names its namespace and Prometheus URL; these must match it
PROMETHEUS_URL="http://prometheus.$SYSTEM_NS.svc:9090"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sreforge-kind.XXXXXX")
export KUBECONFIG="$WORK/kubeconfig"
CREATED_CLUSTER=0
STAGE=setup # becomes "verdict" once the Submission is graded: exit 1 = not passed

log() { printf '[kind-e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 2
}

cleanup() {
  local rc=$?
  if [[ $rc -ne 0 && $STAGE != verdict ]]; then
    rc=2 # a failed step, not a verdict
    if [[ -s $KUBECONFIG ]]; then
      diagnose || true
    fi
  fi
  if [[ $CREATED_CLUSTER == 1 && $KEEP_CLUSTER != 1 ]]; then
    log "deleting kind cluster $CLUSTER (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

diagnose() {
  log "diagnostics:"
  kubectl get pods -A -o wide || true
  kubectl get incidents,submissions -n "$DEMO_NS" || true
  kubectl get events -n "$DEMO_NS" --sort-by=.lastTimestamp | tail -n 30 || true
  kubectl logs -n "$SYSTEM_NS" -l app.kubernetes.io/component=operator --tail=80 || true
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is required but not on PATH"
}

# ------------------------------------------------------------------ preflight
for tool in docker kind kubectl helm git; do
  need "$tool"
done
if [[ -z ${SREFORGE:-} ]]; then
  if command -v sreforge >/dev/null 2>&1; then
    SREFORGE=sreforge
  elif [[ -x "$ROOT/.venv/bin/sreforge" ]]; then
    SREFORGE="$ROOT/.venv/bin/sreforge"
  else
    die "the sreforge CLI is required (bash scripts/setup.sh, or set SREFORGE)"
  fi
fi
[[ -d $SCENARIO_DIR ]] || die "no scenario directory $SCENARIO_DIR"
for f in incident.yaml rules.yml regression.patch; do
  [[ -f "$SCENARIO_DIR/$f" ]] || die "missing $SCENARIO_DIR/$f"
done
[[ -f $FIX ]] || die "no fix patch at $FIX"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker engine (is it running?)"

# ------------------------------------------------------------------ cluster
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "reusing kind cluster $CLUSTER"
else
  log "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --wait 180s
  CREATED_CLUSTER=1
fi
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
kubectl cluster-info >/dev/null

# ------------------------------------------------------------------ images
log "building $OPERATOR_IMAGE, $RUNNER_IMAGE, $HEALTHY_IMAGE, $REGRESSED_IMAGE"
export DOCKER_BUILDKIT=1 # substrate/catalog/Dockerfile uses RUN --mount
docker build -t "$OPERATOR_IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
docker build --target runner -t "$RUNNER_IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
docker build -t "$HEALTHY_IMAGE" -f "$ROOT/substrate/catalog/Dockerfile" "$ROOT"
docker build -t "$REGRESSED_IMAGE" -f "$ROOT/substrate/catalog/Dockerfile" \
  --build-arg "SREFORGE_PATCH=scenarios/$SCENARIO/regression.patch" "$ROOT"
log "loading the images into the kind nodes"
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$RUNNER_IMAGE" "$HEALTHY_IMAGE" \
  "$REGRESSED_IMAGE"

# ------------------------------------------------------------------ operator
log "installing the sreforge chart with its bundled Prometheus (the rules of $SCENARIO)"
PROMETHEUS_ARGS=()
if [[ -n $PROMETHEUS_IMAGE ]]; then
  PROMETHEUS_ARGS=(--set "prometheus.image.repository=${PROMETHEUS_IMAGE%:*}"
    --set "prometheus.image.tag=${PROMETHEUS_IMAGE##*:}")
fi
kubectl create namespace "$SYSTEM_NS" --dry-run=client -o yaml | kubectl apply -f -
cat >"$WORK/values.yaml" <<EOF
prometheus:
  enabled: true
  # its Service; PROMETHEUS_URL (the one incident.yaml names) points at it
  serviceName: prometheus
image:
  repository: ${OPERATOR_IMAGE%:*}
  tag: ${OPERATOR_IMAGE##*:}
  pullPolicy: IfNotPresent
runnerImage:
  repository: ${RUNNER_IMAGE%:*}
  tag: ${RUNNER_IMAGE##*:}
operator:
  env:
    - {name: SREFORGE_SCENARIOS_DIR, value: /opt/sreforge/scenarios}
    - {name: SREFORGE_PROMETHEUS_URL, value: "$PROMETHEUS_URL"}
    - {name: SREFORGE_IMAGE_PREFIX, value: sreforge/}
agent:
  namespace: $DEMO_NS
EOF
kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f -
# the rules of the scenario directory itself (the chart bundles copies of every
# catalogue scenario's, prometheus.scenarios; this also serves a scenario added since)
helm upgrade --install sreforge "$ROOT/charts/sreforge" -n "$SYSTEM_NS" \
  -f "$WORK/values.yaml" --set prometheus.scenarios=null \
  --set-file "prometheus.rules=$SCENARIO_DIR/rules.yml" "${PROMETHEUS_ARGS[@]}" \
  --wait --timeout 5m

# ------------------------------------------------------------------ the target service
log "deploying the healthy catalog in $DEMO_NS"
kubectl apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: catalog
  namespace: $DEMO_NS
  labels: {app: catalog}
spec:
  replicas: 1
  selector:
    matchLabels: {app: catalog}
  template:
    metadata:
      labels: {app: catalog}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
    spec:
      containers:
        - name: catalog
          image: $HEALTHY_IMAGE
          imagePullPolicy: IfNotPresent
          env:
            - {name: HOST, value: 0.0.0.0}
            - {name: PORT, value: "8080"}
          ports:
            - {name: http, containerPort: 8080}
          readinessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: catalog
  namespace: $DEMO_NS
spec:
  selector: {app: catalog}
  ports:
    - {name: http, port: 8080, targetPort: http}
EOF
kubectl -n "$SYSTEM_NS" rollout status deployment/sreforge-prometheus --timeout=5m
kubectl -n "$DEMO_NS" rollout status deployment/catalog --timeout=5m

# ------------------------------------------------------------------ the Incident
INCIDENT=$(kubectl apply -f "$SCENARIO_DIR/incident.yaml" -o jsonpath='{.metadata.name}')
INCIDENT_NS=$(kubectl get -f "$SCENARIO_DIR/incident.yaml" -o jsonpath='{.metadata.namespace}')
[[ $INCIDENT_NS == "$DEMO_NS" ]] || die "incident.yaml is in namespace $INCIDENT_NS, not $DEMO_NS"
log "Incident $INCIDENT applied; waiting for the alert to fire (AwaitingSubmission)"

deadline=$((SECONDS + TIMEOUT_SECONDS))
phase=""
while :; do
  phase=$(kubectl -n "$DEMO_NS" get incident "$INCIDENT" -o jsonpath='{.status.phase}' || true)
  [[ $phase == AwaitingSubmission ]] && break
  case $phase in
    Succeeded | Failed) die "Incident $INCIDENT ended $phase before a Submission" ;;
  esac
  ((SECONDS < deadline)) || die "Incident $INCIDENT still '$phase' after ${TIMEOUT_SECONDS}s"
  sleep 5
done
kubectl -n "$DEMO_NS" get incident "$INCIDENT"
log "the brief handed to agents:"
kubectl -n "$DEMO_NS" get incident "$INCIDENT" -o jsonpath='{.status.brief}'
echo

# ------------------------------------------------------------------ the Submission
log "submitting $FIX"
out=$("$SREFORGE" submit "$INCIDENT" --patch "$FIX" -n "$DEMO_NS" --kubeconfig "$KUBECONFIG")
echo "$out"
SUBMISSION=$(sed -n 's|^submission\.sreforge\.dev/\([^ ]*\) created.*|\1|p' <<<"$out")
[[ -n $SUBMISSION ]] || die "could not read the Submission's name from: $out"

log "waiting for the verdict of $SUBMISSION"
deadline=$((SECONDS + TIMEOUT_SECONDS))
passed=""
while :; do
  passed=$(kubectl -n "$DEMO_NS" get submission "$SUBMISSION" -o jsonpath='{.status.passed}' || true)
  [[ -n $passed ]] && break
  ((SECONDS < deadline)) || die "no verdict for $SUBMISSION after ${TIMEOUT_SECONDS}s"
  sleep 5
done

# ------------------------------------------------------------------ the verdict
STAGE=verdict
echo
kubectl -n "$DEMO_NS" get submission "$SUBMISSION"
kubectl -n "$DEMO_NS" get incident "$INCIDENT"
score=$(kubectl -n "$DEMO_NS" get submission "$SUBMISSION" -o jsonpath='{.status.score}')
reason=$(kubectl -n "$DEMO_NS" get submission "$SUBMISSION" -o jsonpath='{.status.reason}')
echo "verdict: submission=$SUBMISSION passed=$passed score=$score reason=$reason"
if [[ $passed == true ]]; then
  exit 0
fi
kubectl -n "$DEMO_NS" get submission "$SUBMISSION" -o jsonpath='{.status.ciFeedback}' || true
echo
exit 1
