#!/usr/bin/env bash
# hack/validate-on-node.sh - grade scenarios on the real single-node cluster and write
# their "(Kubernetes)" sections of SCENARIOS.md.
#
# Starts the cluster of hack/local-cluster.sh (its own work directory), installs the chart
# as a user would (the operator, its runner image and the bundled Prometheus, all images
# from hack/images.sh: nothing is pulled), then runs
#   sreforge scenarios validate NAME... --runtime kube --markdown SCENARIOS.md
# (each scenario in a namespace of its own: its healthy Deployment, an Incident, the empty
# patch then its first fix), and stops the cluster by PID whatever happened.
#
# Usage: hack/validate-on-node.sh [NAME...]     (default: every scenario)
# Needs root and `bash scripts/setup.sh --cluster`. One scenario at a time: 2 cores.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
WORK="${SREFORGE_NODE_DIR:-$HOME/.cache/sreforge/node-validate}"
SYSTEM_NS=sreforge-system
bash hack/images.sh all
mkdir -p "$WORK"
# shellcheck disable=SC2317  # called by the trap
down() { bash hack/local-cluster.sh down --dir "$WORK" || true; }
trap down EXIT
bash hack/local-cluster.sh up --dir "$WORK"
KUBECONFIG="$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["kubeconfig"])' \
  "$WORK/cluster.json")"
export KUBECONFIG
BIN="$(.venv/bin/python -c 'from tests.localcluster import find_tools_bin; print(find_tools_bin())')"
"$BIN/kubectl" create namespace sreforge-demo --dry-run=client -o yaml | "$BIN/kubectl" apply -f -
"$BIN/helm" upgrade --install sreforge charts/sreforge -n "$SYSTEM_NS" --create-namespace \
  --set image.repository=sreforge/operator --set image.tag=dev --set image.pullPolicy=Never \
  --set runnerImage.repository=sreforge/runner --set runnerImage.tag=dev \
  --set agent.namespace=sreforge-demo \
  --set prometheus.enabled=true --set prometheus.image.repository=sreforge/prometheus \
  --set prometheus.image.tag=v3.16.0 --set prometheus.image.pullPolicy=Never \
  --wait --timeout 3m
set +e
.venv/bin/sreforge scenarios validate "$@" --runtime kube \
  --prometheus-url "http://prometheus.$SYSTEM_NS.svc:9090" --markdown SCENARIOS.md
rc=$?
set -e
exit "$rc"
