#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine: system packages, a venv with sreforge,
# and with --kube the control-plane binaries for the operator tests (cached).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# chromium: the report's PNG/PDF rendering tests; node: the k6 script checks;
# dockerd, containerd/ctr, debootstrap, umoci, gcc + libc6-dev (static pause): hack/images.sh
for bin in prometheus:prometheus promtool:prometheus redis-server:redis-server git:git \
  shellcheck:shellcheck chromium:chromium node:nodejs dockerd:docker.io containerd:containerd \
  ctr:containerd debootstrap:debootstrap umoci:umoci gcc:gcc; do
  command -v "${bin%%:*}" >/dev/null 2>&1 || need+=("${bin##*:}")
done
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
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
if [ "${1:-}" = "--kube" ]; then
  bash hack/k8s-tools.sh
fi
echo "setup: ready (.venv/bin/sreforge)"
