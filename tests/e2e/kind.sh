#!/usr/bin/env bash
# SREForge end to end on a kind cluster (needs Docker, kind, kubectl, helm and the
# `sreforge` CLI of this repository, e.g. `bash scripts/setup.sh && . .venv/bin/activate`).
#
#   bash tests/e2e/kind.sh            # create cluster, build + load images, install,
#                                     # run the Incident, submit the fix, print the verdict
#
# Steps: create the kind cluster; build the operator image (Dockerfile) and the
# catalog's healthy and regressed images (substrate/catalog/Dockerfile, the regressed
# one with SREFORGE_PATCH=<scenario>/regression.patch) and `kind load` them; install a
# Prometheus that scrapes pods by their prometheus.io/* annotations (job = pod label
# `app`) with the scenario's rules; install the chart; deploy the healthy catalog
# (Deployment + Service) in the demo namespace; apply scenarios/<scenario>/incident.yaml;
# wait for AwaitingSubmission; `sreforge submit` the reference fix; wait for the
# verdict and print it. Exit 0 when the Submission passed, 1 when it did not, 2 on error.
#
# Environment (all optional):
#   SCENARIO          scenario directory under scenarios/ (latency-cache-stampede)
#   FIX               the patch to submit (scenarios/$SCENARIO/fixes/restore-simplecache.patch)
#   KIND_CLUSTER      cluster name (sreforge-e2e); reused when it exists
#   KEEP_CLUSTER=1    do not delete the cluster at the end
#   PROMETHEUS_IMAGE  (prom/prometheus:v2.53.0)
#   SREFORGE          the sreforge CLI (sreforge, else .venv/bin/sreforge)
#   TIMEOUT_SECONDS   for the alert to fire and, separately, for the verdict (1200)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SCENARIO=${SCENARIO:-latency-cache-stampede}
SCENARIO_DIR="$ROOT/scenarios/$SCENARIO"
FIX=${FIX:-$SCENARIO_DIR/fixes/restore-simplecache.patch}
CLUSTER=${KIND_CLUSTER:-sreforge-e2e}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}
PROMETHEUS_IMAGE=${PROMETHEUS_IMAGE:-prom/prometheus:v2.53.0}
TIMEOUT_SECONDS=${TIMEOUT_SECONDS:-1200}
SYSTEM_NS=sreforge-system
DEMO_NS=sreforge-demo
OPERATOR_IMAGE=sreforge/operator:dev
HEALTHY_IMAGE=sreforge/catalog:healthy
REGRESSED_IMAGE=sreforge/catalog:regressed
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
log "building $OPERATOR_IMAGE, $HEALTHY_IMAGE, $REGRESSED_IMAGE"
export DOCKER_BUILDKIT=1 # substrate/catalog/Dockerfile uses RUN --mount
docker build -t "$OPERATOR_IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
docker build -t "$HEALTHY_IMAGE" -f "$ROOT/substrate/catalog/Dockerfile" "$ROOT"
docker build -t "$REGRESSED_IMAGE" -f "$ROOT/substrate/catalog/Dockerfile" \
  --build-arg "SREFORGE_PATCH=scenarios/$SCENARIO/regression.patch" "$ROOT"
log "loading the images into the kind nodes"
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$HEALTHY_IMAGE" "$REGRESSED_IMAGE"

# ------------------------------------------------------------------ Prometheus
log "installing Prometheus ($PROMETHEUS_IMAGE) with the rules of $SCENARIO"
kubectl create namespace "$SYSTEM_NS" --dry-run=client -o yaml | kubectl apply -f -
cat >"$WORK/prometheus.yml" <<'EOF'
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - /etc/prometheus/rules/rules.yml
scrape_configs:
  # pods that ask for it (prometheus.io/scrape, port, path), labelled like the
  # pod stand-in's file_sd targets: job = the pod's `app` label, namespace, pod
  - job_name: kubernetes-pods
    kubernetes_sd_configs:
      - role: pod
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        action: keep
        regex: "true"
      - source_labels: [__meta_kubernetes_pod_phase]
        action: drop
        regex: Succeeded|Failed
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        action: replace
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
        action: replace
        regex: ([^:]+)(?::\d+)?;(\d+)
        replacement: $1:$2
        target_label: __address__
      - source_labels: [__meta_kubernetes_pod_label_app]
        action: replace
        regex: (.+)
        target_label: job
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
EOF
kubectl -n "$SYSTEM_NS" create configmap prometheus-config \
  --from-file=prometheus.yml="$WORK/prometheus.yml" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$SYSTEM_NS" create configmap prometheus-rules \
  --from-file=rules.yml="$SCENARIO_DIR/rules.yml" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<EOF
apiVersion: v1
kind: ServiceAccount
metadata:
  name: prometheus
  namespace: $SYSTEM_NS
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sreforge-e2e-prometheus
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: sreforge-e2e-prometheus
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: sreforge-e2e-prometheus
subjects:
  - kind: ServiceAccount
    name: prometheus
    namespace: $SYSTEM_NS
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prometheus
  namespace: $SYSTEM_NS
  labels: {app: prometheus}
spec:
  replicas: 1
  selector:
    matchLabels: {app: prometheus}
  template:
    metadata:
      labels: {app: prometheus}
    spec:
      serviceAccountName: prometheus
      containers:
        - name: prometheus
          image: $PROMETHEUS_IMAGE
          args:
            - --config.file=/etc/prometheus/prometheus.yml
            - --storage.tsdb.path=/prometheus
            - --storage.tsdb.retention.time=1d
            - --web.listen-address=0.0.0.0:9090
          ports:
            - {name: http, containerPort: 9090}
          readinessProbe:
            httpGet: {path: /-/ready, port: http}
            periodSeconds: 2
          volumeMounts:
            - {name: config, mountPath: /etc/prometheus}
            - {name: rules, mountPath: /etc/prometheus/rules}
            - {name: data, mountPath: /prometheus}
      volumes:
        - name: config
          configMap: {name: prometheus-config}
        - name: rules
          configMap: {name: prometheus-rules}
        - name: data
          emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: prometheus
  namespace: $SYSTEM_NS
spec:
  selector: {app: prometheus}
  ports:
    - {name: http, port: 9090, targetPort: http}
EOF

# ------------------------------------------------------------------ operator
log "installing the sreforge chart"
cat >"$WORK/values.yaml" <<EOF
image:
  repository: ${OPERATOR_IMAGE%:*}
  tag: ${OPERATOR_IMAGE##*:}
  pullPolicy: IfNotPresent
operator:
  env:
    - {name: SREFORGE_SCENARIOS_DIR, value: /opt/sreforge/scenarios}
    - {name: SREFORGE_PROMETHEUS_URL, value: "$PROMETHEUS_URL"}
    - {name: SREFORGE_OPERATOR_IMAGE, value: "$OPERATOR_IMAGE"}
    - {name: SREFORGE_IMAGE_PREFIX, value: sreforge/}
agent:
  namespace: $DEMO_NS
EOF
kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install sreforge "$ROOT/charts/sreforge" -n "$SYSTEM_NS" \
  -f "$WORK/values.yaml" --wait --timeout 5m

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
kubectl -n "$SYSTEM_NS" rollout status deployment/prometheus --timeout=5m
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
