#!/usr/bin/env bash
# hack/k8s-tools.sh - build the binaries of a real (kwok-backed) Kubernetes
# control plane from Go modules, into a cache outside the repo.
#
# Builds: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kubelet, kube-proxy (module k8s.io/kubernetes), CoreDNS (its module), etcd (go.etcd.io/etcd/server/v3, through a
# generated wrapper module), kwok, helm, and prometheus + promtool (the version the
# chart's bundled Prometheus runs, with Kubernetes service discovery, which Debian's
# package is built without).
#
# Usage:
#   hack/k8s-tools.sh [build]   build what is missing (default), link tools/bin
#   hack/k8s-tools.sh bin-dir   print the bin dir of the pinned set; exit 1 if
#                               any binary is missing (builds nothing)
#   hack/k8s-tools.sh check     list each binary as cached or missing
#   hack/k8s-tools.sh versions  print the pinned versions
#   hack/k8s-tools.sh prune     drop the Go build cache and the wrapper sources
#                               (keeps the binaries and the module cache)
#
# Environment:
#   SREFORGE_TOOLS_DIR    cache root (default: $HOME/.cache/sreforge/tools)
#   SREFORGE_BUILD_JOBS   go build -p (default 2, at most 2)
#   SREFORGE_NO_REPO_LINK set to 1 to skip creating <repo>/tools/bin
#   GO                    the go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GOPROXY               passed through to go
#
# Layout under the cache root:
#   kubernetes-<v>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   etcd-<v>/bin/etcd   kwok-<v>/bin/kwok   helm-<v>/bin/helm
#   prometheus-<v>/bin/{prometheus,promtool}
#   kwok-<v>/share/kwok-stages.yaml   kwok's default Stage config (from its module)
#   bin-<set>/          relative symlinks to all of the above (one per version set)
#   .gomodcache/ .gocache/ src/   Go module cache, build cache, wrapper modules
set -euo pipefail

# ---------------------------------------------------------------- pinned set
K8S_VERSION=v1.37.2     # matches the Python client kubernetes 37.x
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
PROMETHEUS_VERSION=v3.16.0 # = the chart's prometheus.image.tag
COREDNS_VERSION=v1.14.7    # the cluster DNS of hack/local-cluster.sh
# ---------------------------------------------------------------------------

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${SREFORGE_TOOLS_DIR:-$HOME/.cache/sreforge/tools}"
JOBS="${SREFORGE_BUILD_JOBS:-2}"
if ! [[ "$JOBS" =~ ^[0-9]+$ ]] || (( JOBS < 1 )); then JOBS=1; fi
if (( JOBS > 2 )); then JOBS=2; fi

SET_ID="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_prometheus-${PROMETHEUS_VERSION}_coredns-${COREDNS_VERSION}"
SET_BIN="$TOOLS_DIR/bin-$SET_ID"

K8S_DIR="$TOOLS_DIR/kubernetes-$K8S_VERSION"
ETCD_DIR="$TOOLS_DIR/etcd-$ETCD_VERSION"
KWOK_DIR="$TOOLS_DIR/kwok-$KWOK_VERSION"
HELM_DIR="$TOOLS_DIR/helm-$HELM_VERSION"
PROMETHEUS_DIR="$TOOLS_DIR/prometheus-$PROMETHEUS_VERSION"
COREDNS_DIR="$TOOLS_DIR/coredns-$COREDNS_VERSION"

# name -> path of the real binary, relative to $TOOLS_DIR
declare -A BIN_PATH=(
  [kube-apiserver]="kubernetes-$K8S_VERSION/bin/kube-apiserver"
  [kube-controller-manager]="kubernetes-$K8S_VERSION/bin/kube-controller-manager"
  [kube-scheduler]="kubernetes-$K8S_VERSION/bin/kube-scheduler"
  [kubectl]="kubernetes-$K8S_VERSION/bin/kubectl"
  [kubelet]="kubernetes-$K8S_VERSION/bin/kubelet"
  [kube-proxy]="kubernetes-$K8S_VERSION/bin/kube-proxy"
  [coredns]="coredns-$COREDNS_VERSION/bin/coredns"
  [etcd]="etcd-$ETCD_VERSION/bin/etcd"
  [kwok]="kwok-$KWOK_VERSION/bin/kwok"
  [helm]="helm-$HELM_VERSION/bin/helm"
  [prometheus]="prometheus-$PROMETHEUS_VERSION/bin/prometheus"
  [promtool]="prometheus-$PROMETHEUS_VERSION/bin/promtool"
  [kwok-stages.yaml]="kwok-$KWOK_VERSION/share/kwok-stages.yaml"
)
ALL_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok helm prometheus promtool coredns)
# kwok's default stages (the set kwokctl uses), installed from the kwok module:
# the kwok binary itself starts no simulation without a Stage config.
KWOK_STAGE_FILES=(node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)
ALL_FILES=("${ALL_BINS[@]}" kwok-stages.yaml)

T0=$(date +%s)
TICKER_PID=""

log() { printf '[k8s-tools %s] %s\n' "$(fmt_secs $(( $(date +%s) - T0 )))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
fmt_secs() { printf '%dm%02ds' $(( $1 / 60 )) $(( $1 % 60 )); }

cleanup() {
  if [[ -n "$TICKER_PID" ]]; then kill "$TICKER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

have_bin() {
  if [[ "$1" == *.yaml ]]; then [[ -f "$TOOLS_DIR/${BIN_PATH[$1]}" ]]
  else [[ -x "$TOOLS_DIR/${BIN_PATH[$1]}" ]]; fi
}

missing_bins() {
  local b
  for b in "${ALL_FILES[@]}"; do have_bin "$b" || echo "$b"; done
}

# Runs "$@" at low priority, logging start, a heartbeat each minute, and the
# elapsed time at the end.
run_timed() {
  local label=$1; shift
  local start; start=$(date +%s)
  log "$label: started"
  (
    while sleep 60; do
      kill -0 "$$" 2>/dev/null || exit 0
      log "$label: still running ($(fmt_secs $(( $(date +%s) - start ))))"
    done
  ) &
  TICKER_PID=$!
  local rc=0
  "${NICE[@]}" "$@" || rc=$?
  kill "$TICKER_PID" 2>/dev/null || true
  wait "$TICKER_PID" 2>/dev/null || true
  TICKER_PID=""
  local took; took=$(fmt_secs $(( $(date +%s) - start )))
  if (( rc != 0 )); then
    log "$label: FAILED (exit $rc) after $took"
    return "$rc"
  fi
  log "$label: done in $took"
}

setup_go() {
  if [[ -z "${GO:-}" ]]; then
    if command -v go >/dev/null 2>&1; then GO=$(command -v go)
    elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
    else die "no Go toolchain found: install Go >= 1.26 or set GO=/path/to/go"
    fi
  fi
  export GOMODCACHE="$TOOLS_DIR/.gomodcache"
  export GOCACHE="$TOOLS_DIR/.gocache"
  export GOTOOLCHAIN=local        # never download another toolchain
  export GOWORK=off
  export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
  export CGO_ENABLED=0
  export GOTMPDIR="$TOOLS_DIR/.gotmp"
  mkdir -p "$GOMODCACHE" "$GOCACHE" "$GOTMPDIR"
  NICE=(nice -n 19)
  if command -v ionice >/dev/null 2>&1; then NICE+=(ionice -c 3); fi
  log "using $("$GO" version) (GOFLAGS='$GOFLAGS', -p $JOBS, niced)"
}

# Prints field $2 (GoMod: path of its go.mod; Dir: its source) of
# module@version $1, downloading it if needed.
module_field() {
  local out path
  out=$("${NICE[@]}" "$GO" mod download -json "$1" 2>&1) || die "go mod download $1 failed: $out"
  path=$(printf '%s\n' "$out" | sed -n "s/^[[:space:]]*\"$2\": \"\(.*\)\",\{0,1\}\$/\1/p" | head -n1)
  [[ -n "$path" && -e "$path" ]] || die "go mod download $1 reported no $2: $out"
  printf '%s\n' "$path"
}
module_gomod() { module_field "$1" GoMod; }

# The `go` directive of a go.mod file.
gomod_go_line() { awk '$1 == "go" && NF == 2 { print $2; exit }' "$1"; }

# Builds a wrapper module in $1 (dir) named $2 whose go.mod body is on stdin,
# then runs go mod tidy in it.
write_wrapper() {
  local dir=$1 name=$2
  mkdir -p "$dir"
  cat > "$dir/go.mod"
  cat > "$dir/README" <<EOF
Generated by hack/k8s-tools.sh ($name); safe to delete.
EOF
  rm -f "$dir/go.sum"
  (cd "$dir" && run_timed "$name: go mod tidy (downloads modules)" "$GO" mod tidy)
}

# ------------------------------------------------------------ kubernetes
# Prints `replace` lines for a wrapper module of k8s.io/kubernetes: every
# k8s.io/* module that its go.mod replaces with ./staging/... is pinned to
# the published v0.N.P; replaces of modules it does not require (e.g. the
# sample-* modules, which are not all published) are left out. Other
# replaces that point at a module version are carried over as they are.
k8s_replace_lines() {
  local gomod=$1 staging_version=$2
  awk -v sv="$staging_version" '
    function strip(s) { sub(/^[[:space:]]+/, "", s); sub(/[[:space:]]+$/, "", s); return s }
    { line = $0; sub(/\/\/.*/, "", line); line = strip(line) }
    line == "" { next }
    line ~ /^require[[:space:]]*\($/ { blk = "req"; next }
    line ~ /^replace[[:space:]]*\($/ { blk = "rep"; next }
    line == ")" { blk = ""; next }
    line ~ /^require[[:space:]]/ { sub(/^require[[:space:]]+/, "", line); split(line, f); req[f[1]] = 1; next }
    line ~ /^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, "", line); reps[++n] = line; next }
    blk == "req" { split(line, f); req[f[1]] = 1; next }
    blk == "rep" { reps[++n] = line; next }
    END {
      for (i = 1; i <= n; i++) {
        split(reps[i], parts, /[[:space:]]*=>[[:space:]]*/)
        split(parts[1], lhs); split(parts[2], rhs)
        mod = lhs[1]; target = rhs[1]
        if (target ~ /^\.\/staging\//) {
          if (mod in req) printf "\t%s => %s %s\n", mod, mod, sv
          else printf "skip-staging %s\n", mod > "/dev/stderr"
        } else if (target !~ /^\.\.?\//) {
          printf "\t%s\n", reps[i]
        }
      }
    }' "$gomod"
}

build_kubernetes() {
  local need=() b
  for b in "${K8S_BINS[@]}"; do have_bin "$b" || need+=("$b"); done
  if (( ${#need[@]} == 0 )); then return 0; fi
  log "kubernetes $K8S_VERSION: need ${need[*]}"

  local staging_version="v0.${K8S_VERSION#v1.}"
  local gomod go_line replaces skipped
  gomod=$(module_gomod "k8s.io/kubernetes@$K8S_VERSION")
  go_line=$(gomod_go_line "$gomod")
  replaces=$(k8s_replace_lines "$gomod" "$staging_version" 2>"$TOOLS_DIR/.skipped")
  skipped=$(sed -n 's/^skip-staging //p' "$TOOLS_DIR/.skipped" | tr '\n' ' ')
  rm -f "$TOOLS_DIR/.skipped"
  [[ -n "$replaces" ]] || die "found no ./staging replaces in $gomod"
  log "kubernetes $K8S_VERSION: pinning $(grep -c '=>' <<<"$replaces") staging modules to $staging_version${skipped:+ (not required, left out: $skipped)}"

  local src="$TOOLS_DIR/src/kubernetes-$K8S_VERSION"
  {
    printf 'module sreforge.local/k8s-tools/kubernetes\n\ngo %s\n\n' "$go_line"
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n%s\n)\n\ntool (\n' "$K8S_VERSION" "$replaces"
    for b in "${K8S_BINS[@]}"; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$b"; done
    printf ')\n'
  } | write_wrapper "$src" "kubernetes $K8S_VERSION"

  local major minor rest ldflags=() pkg
  rest=${K8S_VERSION#v}; major=${rest%%.*}; rest=${rest#*.}; minor=${rest%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=("-X $pkg.gitVersion=$K8S_VERSION" "-X $pkg.gitMajor=$major"
              "-X $pkg.gitMinor=$minor" "-X $pkg.gitTreeState=clean")
  done
  mkdir -p "$K8S_DIR/bin"
  for b in "${need[@]}"; do
    (cd "$src" && run_timed "build $b" "$GO" build -p "$JOBS" -ldflags "-s -w ${ldflags[*]}" \
        -o "$K8S_DIR/bin/.$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv -f "$K8S_DIR/bin/.$b.tmp" "$K8S_DIR/bin/$b"
  done
}

# ------------------------------------------------------------------ etcd
# `go install go.etcd.io/etcd/server/v3@v` refuses the module because its
# go.mod has replace directives (../api, ...). As a dependency of a wrapper
# module those are ignored and its require lines pin the sibling modules.
build_etcd() {
  have_bin etcd && return 0
  local gomod go_line src="$TOOLS_DIR/src/etcd-$ETCD_VERSION"
  gomod=$(module_gomod "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  go_line=$(gomod_go_line "$gomod")
  printf 'module sreforge.local/k8s-tools/etcd\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n\ntool go.etcd.io/etcd/server/v3\n' \
    "$go_line" "$ETCD_VERSION" | write_wrapper "$src" "etcd $ETCD_VERSION"
  mkdir -p "$ETCD_DIR/bin"
  (cd "$src" && run_timed "build etcd" "$GO" build -p "$JOBS" -ldflags "-s -w" \
      -o "$ETCD_DIR/bin/.etcd.tmp" go.etcd.io/etcd/server/v3)
  mv -f "$ETCD_DIR/bin/.etcd.tmp" "$ETCD_DIR/bin/etcd"
}

# ---------------------------------------------------------- kwok, helm
# Both modules have no replace directives: plain `go install mod@version`.
go_install_to() {
  local dir=$1 name=$2 pkg=$3 extra_ld=$4
  local tmp="$dir/.install.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  GOBIN="$tmp" run_timed "build $name" "$GO" install -p "$JOBS" -ldflags "-s -w $extra_ld" "$pkg"
  mkdir -p "$dir/bin"
  mv -f "$tmp/$name" "$dir/bin/$name"
  rm -rf "$tmp"
}

build_kwok() {
  if ! have_bin kwok-stages.yaml; then
    local dir f out="$TOOLS_DIR/${BIN_PATH[kwok-stages.yaml]}"
    dir=$(module_field "sigs.k8s.io/kwok@$KWOK_VERSION" Dir)
    mkdir -p "$(dirname "$out")"
    for f in "${KWOK_STAGE_FILES[@]}"; do
      [[ -f "$dir/kustomize/stage/$f" ]] || die "kwok $KWOK_VERSION has no kustomize/stage/$f"
      printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$f"
      cat "$dir/kustomize/stage/$f"
    done > "$out.tmp"
    mv -f "$out.tmp" "$out"
    log "installed kwok's default stages: ${KWOK_STAGE_FILES[*]}"
  fi
  have_bin kwok && return 0
  go_install_to "$KWOK_DIR" kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
}

build_helm() {
  have_bin helm && return 0
  local gomod cg major minor
  gomod=$(module_gomod "helm.sh/helm/v3@$HELM_VERSION")
  # default Kubernetes version of `helm template`: from its client-go (v0.N.P -> 1.N)
  cg=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
  cg=${cg#v}; major=$(( ${cg%%.*} + 1 )); cg=${cg#*.}; minor=${cg%%.*}
  local ld="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
  ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
  go_install_to "$HELM_DIR" helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$ld"
}

# ---------------------------------------------------------- prometheus
# Prometheus 3.X.Y is published as the Go module version v0.(300+X).Y; no replace
# directives, so `go install` works. The web UI's assets are not embedded (they need
# npm); the HTTP API, which is all the tests use, is complete.
build_prometheus() {
  local v=${PROMETHEUS_VERSION#v} major minor patch mod b
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}; patch=${v##*.}
  (( major == 3 )) || die "PROMETHEUS_VERSION must be 3.x (its module is v0.3NN.P), not $PROMETHEUS_VERSION"
  mod="v0.$(( 300 + minor )).$patch"
  local ld="-X github.com/prometheus/common/version.Version=$v"
  ld+=" -X github.com/prometheus/common/version.Branch=release-$major.$minor"
  ld+=" -X github.com/prometheus/common/version.Revision=module-$mod"
  for b in prometheus promtool; do
    have_bin "$b" && continue
    go_install_to "$PROMETHEUS_DIR" "$b" "github.com/prometheus/prometheus/cmd/$b@$mod" "$ld"
  done
}

# ------------------------------------------------------------- coredns
# No replace directives: plain `go install`. Built with its default plugin set
# (the local cluster uses kubernetes, forward-free: errors, health, ready,
# kubernetes, cache, loop, reload).
build_coredns() {
  have_bin coredns && return 0
  go_install_to "$COREDNS_DIR" coredns "github.com/coredns/coredns@$COREDNS_VERSION" \
    "-X github.com/coredns/coredns/coremain.GitCommit=module-$COREDNS_VERSION"
}

# ------------------------------------------------------------- linking
link_set() {
  mkdir -p "$SET_BIN"
  local b
  for b in "${ALL_FILES[@]}"; do ln -sfn "../${BIN_PATH[$b]}" "$SET_BIN/$b"; done
  if [[ "${SREFORGE_NO_REPO_LINK:-}" == 1 ]]; then return 0; fi
  mkdir -p "$REPO_ROOT/tools"
  if [[ -e "$REPO_ROOT/tools/bin" && ! -L "$REPO_ROOT/tools/bin" ]]; then
    die "$REPO_ROOT/tools/bin exists and is not a symlink; move it away"
  fi
  ln -sfn "$SET_BIN" "$REPO_ROOT/tools/bin"
}

# The first line of a binary's version output. Read all of it first: `| head -n1` under
# pipefail failed at random when the binary wrote its second line after head had exited
# (SIGPIPE, exit 141), which made a cached, working tool set look broken.
version_of() {
  local b=$1 p="$SET_BIN/$1" out
  case "$b" in
    kubectl) out=$("$p" version --client 2>&1) || { printf "%s\n" "$out"; return 1; } ;;
    helm)    out=$("$p" version --short 2>&1) || { printf "%s\n" "$out"; return 1; } ;;
    coredns) out=$("$p" -version 2>&1) || { printf "%s\n" "$out"; return 1; } ;;
    *)       out=$("$p" --version 2>&1) || { printf "%s\n" "$out"; return 1; } ;;
  esac
  printf '%s\n' "${out%%$'\n'*}"
}

verify_versions() {
  local b out rc=0
  for b in "${ALL_BINS[@]}"; do
    if out=$(version_of "$b"); then
      printf '  %-24s %s\n' "$b" "$out" >&2
    else
      printf '  %-24s FAILED: %s\n' "$b" "$out" >&2; rc=1
    fi
  done
  return "$rc"
}

cmd_build() {
  mkdir -p "$TOOLS_DIR"
  exec 9>"$TOOLS_DIR/.lock"
  if ! flock -n 9; then
    log "another k8s-tools.sh holds $TOOLS_DIR/.lock; waiting"
    flock 9
  fi
  local missing; missing=$(missing_bins | tr '\n' ' ')
  if [[ -z "$missing" ]]; then
    log "everything is cached in $TOOLS_DIR (set $SET_ID)"
  else
    log "building into $TOOLS_DIR: $missing"
    setup_go
    build_etcd
    build_kwok
    build_helm
    build_prometheus
    build_coredns
    build_kubernetes
    log "all built"
  fi
  link_set
  verify_versions || die "a binary failed --version"
  if [[ "${SREFORGE_NO_REPO_LINK:-}" != 1 ]]; then
    log "tools/bin -> $SET_BIN"
  fi
  log "done in $(fmt_secs $(( $(date +%s) - T0 )))"
}

cmd_bin_dir() {
  local missing; missing=$(missing_bins | tr '\n' ' ')
  if [[ -n "$missing" ]]; then
    echo "missing: $missing(build with: bash hack/k8s-tools.sh)" >&2
    exit 1
  fi
  [[ -d "$SET_BIN" ]] || { mkdir -p "$TOOLS_DIR" && SREFORGE_NO_REPO_LINK=1 link_set; }
  printf '%s\n' "$SET_BIN"
}

cmd_check() {
  local b rc=0
  for b in "${ALL_FILES[@]}"; do
    if have_bin "$b"; then printf '%-24s cached  %s\n' "$b" "$TOOLS_DIR/${BIN_PATH[$b]}"
    else printf '%-24s missing\n' "$b"; rc=1; fi
  done
  return "$rc"
}

cmd_versions() {
  printf 'kubernetes %s\netcd %s\nkwok %s\nhelm %s\nprometheus %s\ncoredns %s\n' "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" "$PROMETHEUS_VERSION" "$COREDNS_VERSION"
}

cmd_prune() {
  setup_go
  "$GO" clean -cache
  rm -rf "$TOOLS_DIR/src" "$GOTMPDIR"
  log "pruned the build cache and wrapper sources (binaries and module cache kept)"
}

case "${1:-build}" in
  build) cmd_build ;;
  bin-dir|--bin-dir) cmd_bin_dir ;;
  check) cmd_check ;;
  versions) cmd_versions ;;
  prune) cmd_prune ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' ;;
  *) echo "unknown command: $1 (try --help)" >&2; exit 2 ;;
esac
