#!/usr/bin/env bash
# hack/local-cluster.sh - a real single-node Kubernetes cluster on this machine.
#
# The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
# Debian's containerd + runc + CNI bridge, kubelet, kube-proxy (iptables) and CoreDNS,
# all as local processes (tests/localcluster.py; the tests start the same cluster with a
# pytest fixture). Pods run for real; their images come from hack/images.sh (no registry).
#
# Usage:
#   hack/local-cluster.sh up [--dir DIR]      start it; prints the KUBECONFIG to use
#   hack/local-cluster.sh down [--dir DIR]    stop every process by PID, remove the bridge,
#                                             restore sysctls and iptables
#   hack/local-cluster.sh status [--dir DIR]  the PIDs and kubeconfig of a running one
#
# DIR defaults to ~/.cache/sreforge/cluster. Needs root, `bash scripts/setup.sh --cluster`
# (Debian packages, the binaries of hack/k8s-tools.sh, the images of hack/images.sh).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
case "${1:-}" in
  up|down|status) ;;
  -h|--help|help|"") sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "unknown command: $1 (try --help)" >&2; exit 2 ;;
esac
cd "$REPO_ROOT"
exec "$PY" -m tests.localcluster "$@"
