#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine: system packages, a venv with sreforge,
# with --kube the control-plane binaries for the operator tests (cached), and with
# --cluster also what a real node needs (containerd, runc, CNI plugins, a Docker engine to
# build images, debootstrap for their base; hack/local-cluster.sh, hack/images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# chromium: the report's PNG/PDF rendering tests; node: the k6 script checks
for bin in prometheus:prometheus promtool:prometheus redis-server:redis-server git:git \
  shellcheck:shellcheck chromium:chromium node:nodejs; do
  command -v "${bin%%:*}" >/dev/null 2>&1 || need+=("${bin##*:}")
done
# PostgreSQL's server programs: a real dependency of the fetched services (Kinto's storage);
# the harness starts its own servers, so Debian's default cluster is never started here
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
cluster=0; kube=0
for arg in "$@"; do
  case "$arg" in
    --kube) kube=1 ;;
    --cluster) kube=1; cluster=1 ;;
    *) echo "setup: unknown option $arg (--kube, --cluster)" >&2; exit 2 ;;
  esac
done
if [ "$cluster" = 1 ]; then
  # the node (containerd 1.6, runc, CNI plugins in /usr/lib/cni, iptables/nft for
  # kube-proxy and the host-state restore), image building (docker.io's engine,
  # debootstrap, umoci; gcc for the pause binary), openssl for the kubelet's certificates
  for bin in containerd:containerd runc:runc ctr:containerd /usr/lib/cni/bridge:containernetworking-plugins \
    iptables:iptables nft:nftables dockerd:docker.io debootstrap:debootstrap umoci:umoci \
    gcc:gcc /usr/include/stdio.h:libc6-dev openssl:openssl; do
    case "${bin%%:*}" in
      /*) [ -e "${bin%%:*}" ] || need+=("${bin##*:}") ;;
      *) command -v "${bin%%:*}" >/dev/null 2>&1 || need+=("${bin##*:}") ;;
    esac
  done
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # no service a package would start (PostgreSQL's default cluster, the Docker engine):
  # this script starts only its own processes
  policy=/usr/sbin/policy-rc.d
  had_policy=0; [ -e "$policy" ] && had_policy=1
  [ "$had_policy" = 1 ] || { printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null; $SUDO chmod 755 "$policy"; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
  [ "$had_policy" = 1 ] || $SUDO rm -f "$policy"
fi
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$PY" --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.sreforge-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing sreforge and its dev tools into .venv"
  .venv/bin/python -m pip install -q --upgrade "pip>=25.1"
  .venv/bin/python -m pip install -q -e . --group dev
  touch "$stamp"
fi
# third-party services under test (substrate/*/source.toml): pinned sdists, checksummed,
# unpacked with their pinned venvs into ~/.cache/sreforge/sources; never committed
.venv/bin/sreforge sources fetch
if [ "$kube" = 1 ]; then
  bash hack/k8s-tools.sh
fi
echo "setup: ready (.venv/bin/sreforge)"
