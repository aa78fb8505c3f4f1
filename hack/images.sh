#!/usr/bin/env bash
# hack/images.sh - build every image the operator needs on a single-node cluster
# with no registry, and hand them to containerd. Nothing is pulled: the base image is
# a debootstrap of Debian bookworm made here, the builds run in Debian's Docker
# engine (docker.io), which this script starts and stops by PID, and the images go
# to containerd with `docker save | ctr images import`.
#
# Usage:
#   hack/images.sh all [--address SOCK]   base + build, then load if SOCK is a socket
#   hack/images.sh base                   debootstrap (cached) + docker import -> BASE
#   hack/images.sh build [IMAGE...]       build every image (or the ones named, as
#                                         listed by `list`, with or without the prefix)
#   hack/images.sh load [--address SOCK] [IMAGE...]
#                                         import into containerd's k8s.io namespace the
#                                         images whose id changed since the last load
#   hack/images.sh list                   print the image names
#   hack/images.sh engine start|stop|status
#                                         leave the Docker engine running for other
#                                         commands (and `docker`): `start` prints its
#                                         DOCKER_HOST; every other command reuses it
#   hack/images.sh help
#
# Images (PREFIX = $SREFORGE_IMAGE_PREFIX, default "sreforge/"):
#   PREFIX base:bookworm        debootstrap --variant=minbase + python3, git, ...
#   PREFIX operator:dev         Dockerfile (the operator: the package and the scenarios)
#   PREFIX runner:dev           Dockerfile's `runner` target (load generator, prober, patch
#                               init containers: what runs in tenant namespaces; no scenarios)
#   PREFIX <service>:healthy    substrate/<service>/Dockerfile
#   PREFIX <service>:<scenario> the same with the scenario's regression.patch
#                               (SREFORGE_PATCH), for every scenarios/*/scenario.toml
#   PREFIX <source>:healthy     a fetched third-party service (substrate/<source>/source.toml):
#   PREFIX <source>:<scenario>  hack/images/source.Dockerfile on the context that
#                               `sreforge sources context` stages; CMD: the scenario's command
#   PREFIX redis:7              Debian's redis-server (scenarios with dependencies = ["redis"])
#   PREFIX postgresql:15        Debian's PostgreSQL (dependencies = ["postgresql"])
#   PREFIX prometheus:<v>       the prometheus binary of hack/k8s-tools.sh, laid out like
#                               prom/prometheus (what charts/sreforge runs)
#   PREFIX pause:3.10           kubernetes' build/pause/linux/pause.c, gcc -static, umoci
#                               (load only: containerd's sandbox_image)
#
# Environment:
#   SREFORGE_IMAGES_DIR    cache root (default: $HOME/.cache/sreforge/images): rootfs
#                          tarballs, the engine's data root (its layer cache), logs, stamps
#   SREFORGE_IMAGE_PREFIX  image name prefix (default "sreforge/")
#   SREFORGE_DEBIAN_MIRROR Debian mirror (default: the one in /etc/apt/sources.list.d)
#   SREFORGE_CONTAINERD    containerd socket for load (default /run/containerd/containerd.sock)
#   SREFORGE_DOCKER_HOST   use this Docker engine (unix://...) instead of starting one
#   SREFORGE_IMAGES_NICE   the builds' nice level (default 10; the engine runs under it)
#   SREFORGE_CA_BUNDLE     the host's CA bundle (default /etc/ssl/certs/ca-certificates.crt)
#   SREFORGE_TOOLS_DIR     hack/k8s-tools.sh's cache (prometheus, the kubernetes module)
#   DOCKER, CTR            the docker CLI that builds, the ctr binary
#
# The engine: Debian's dockerd with its own containerd (never the cluster's socket), all
# state under the cache and a short run dir in /tmp; no bridge, no iptables, no
# ip_forward, no masquerade (builds use --network host). What it leaves on the host
# (/run/docker/plugins, its cgroups, a netns mount in its run dir) is removed when it
# stops. Builds need BuildKit (RUN --mount): a docker CLI >= 23 with the buildx plugin,
# else Debian's docker.io CLI (/usr/bin/docker, 20.10), which has it built in ($DOCKER
# picks one). The base trusts what the host's CA bundle trusts beyond Debian's (e.g. a
# TLS-inspecting proxy, which pip must pass; SREFORGE_CA_BUNDLE=none: nothing added).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGES_DIR="${SREFORGE_IMAGES_DIR:-$HOME/.cache/sreforge/images}"
PREFIX="${SREFORGE_IMAGE_PREFIX:-sreforge/}"
CONTAINERD_SOCK="${SREFORGE_CONTAINERD:-/run/containerd/containerd.sock}"
CTR="${CTR:-ctr}"
# the project's Python (stages a fetched source's context: `sreforge sources context`)
SREFORGE_PY="${SREFORGE_PY:-$REPO_ROOT/.venv/bin/python}"

SUITE=bookworm
VARIANT=minbase
# what every image needs: python3 with venv (PEP 668: images install into /opt/venv),
# git (the CI gate and the patch init container run `git apply`), ca-certificates (pip
# and apt over https), passwd (useradd), netbase (/etc/services, /etc/protocols)
BASE_PACKAGES=(ca-certificates git netbase passwd python-is-python3 python3 python3-venv)
BASE_FORMAT=1   # bump when the rootfs recipe below changes
BASE_IMAGE="${PREFIX}base:$SUITE"
PAUSE_TAG=3.10
PAUSE_SRC_REL="build/pause/linux/pause.c"
K8S_MODULE="k8s.io/kubernetes@v1.37.2"

# the run dir holds sockets: keep its path short whatever the cache's path is
RUN_DIR="/tmp/sreforge-images-$(printf '%s' "$IMAGES_DIR" | sha256sum | cut -c1-10)"
DOCKER_SOCK="$RUN_DIR/docker.sock"
ENGINE_CTD_SOCK="$RUN_DIR/containerd.sock"
CGROUP_PARENT="sreforge-images"

T0=$(date +%s)
OWN_ENGINE=0     # 1: this process started the engine and stops it at exit
DEBOOTSTRAP_DIR=""

fmt_secs() { printf '%dm%02ds' $(( $1 / 60 )) $(( $1 % 60 )); }
log() { printf '[images %s] %s\n' "$(fmt_secs $(( $(date +%s) - T0 )))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
since() { fmt_secs $(( $(date +%s) - $1 )); }

# builds run at a low priority (the daemons are started under it: their build steps are
# their children), so a build never starves a run or a test on the same machine
NICE=(nice -n "${SREFORGE_IMAGES_NICE:-10}")
if command -v ionice >/dev/null 2>&1; then NICE+=(ionice -c 3); fi

cleanup() {
  local rc=$?
  if [[ -n "$DEBOOTSTRAP_DIR" ]]; then remove_tree "$DEBOOTSTRAP_DIR"; fi
  if (( OWN_ENGINE )); then engine_stop; fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

LOCKED=0
take_lock() {
  (( LOCKED )) && return 0
  LOCKED=1
  mkdir -p "$IMAGES_DIR"
  exec 8>"$IMAGES_DIR/.lock"
  if ! flock -n 8; then
    log "another hack/images.sh holds $IMAGES_DIR/.lock; waiting"
    flock 8
  fi
}

# ------------------------------------------------------------------ engine
docker_() { DOCKER_HOST="$DOCKER_HOST_URL" docker "$@"; }

engine_answers() { docker_ version --format '{{.Server.Version}}' >/dev/null 2>&1; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Waits until the process in pidfile $1 has exited (at most $2 seconds).
wait_gone() {
  local pid n=0
  pid=$(cat "$1" 2>/dev/null) || return 0
  while kill -0 "$pid" 2>/dev/null; do
    (( n++ < $2 * 10 )) || return 1
    sleep 0.1
  done
}

# Sets DOCKER_HOST_URL; starts containerd + dockerd unless one runs for this cache.
engine_ensure() {
  if [[ -n "${SREFORGE_DOCKER_HOST:-}" ]]; then
    DOCKER_HOST_URL=$SREFORGE_DOCKER_HOST
    engine_answers || die "no Docker engine answers at SREFORGE_DOCKER_HOST=$DOCKER_HOST_URL"
    return 0
  fi
  DOCKER_HOST_URL="unix://$DOCKER_SOCK"
  if pid_alive "$RUN_DIR/dockerd.launch.pid" && engine_answers; then
    log "using the running engine ($DOCKER_HOST_URL)"
    return 0
  fi
  engine_stop quiet   # leftovers of an engine that died
  command -v dockerd >/dev/null || die "dockerd not found: apt-get install docker.io"
  command -v containerd >/dev/null || die "containerd not found: apt-get install containerd"
  local start; start=$(date +%s)
  mkdir -p "$RUN_DIR" "$IMAGES_DIR/engine" "$IMAGES_DIR/logs"
  chmod 700 "$RUN_DIR"
  # what the engine may leave on the host, to remove when it stops
  : >"$RUN_DIR/created"
  [[ -e /run/docker ]] || echo /run/docker >>"$RUN_DIR/created"
  [[ -e /run/docker/plugins ]] || echo /run/docker/plugins >>"$RUN_DIR/created"
  cat >"$RUN_DIR/containerd.toml" <<EOF
version = 2
root = "$IMAGES_DIR/engine/containerd"
state = "$RUN_DIR/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ENGINE_CTD_SOCK"
[ttrpc]
  address = "$ENGINE_CTD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$RUN_DIR/opt"
EOF
  # dockerd < 23 writes a trust key: to the data root, not /etc/docker
  local major; major=$(dockerd --version | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
  if [[ -n "$major" ]] && (( major < 23 )); then
    printf '{"deprecated-key-path": "%s"}\n' "$IMAGES_DIR/engine/key.json" >"$RUN_DIR/daemon.json"
  else
    echo '{}' >"$RUN_DIR/daemon.json"
  fi
  # (8>&-: the daemons must not hold the cache's lock)
  "${NICE[@]}" containerd --config "$RUN_DIR/containerd.toml" >"$IMAGES_DIR/logs/containerd.log" 2>&1 8>&- &
  echo $! >"$RUN_DIR/containerd.pid"
  OWN_ENGINE=1
  local n=0
  until [[ -S "$ENGINE_CTD_SOCK" ]]; do
    pid_alive "$RUN_DIR/containerd.pid" || die "containerd exited: $(tail -n 5 "$IMAGES_DIR/logs/containerd.log")"
    (( n++ < 100 )) || die "containerd did not serve $ENGINE_CTD_SOCK in 10 s"
    sleep 0.1
  done
  "${NICE[@]}" dockerd --config-file "$RUN_DIR/daemon.json" \
    --data-root "$IMAGES_DIR/engine/docker" --exec-root "$RUN_DIR/exec" \
    --pidfile "$RUN_DIR/dockerd.pid" -H "unix://$DOCKER_SOCK" \
    --containerd "$ENGINE_CTD_SOCK" --cgroup-parent "$CGROUP_PARENT" \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
    --userland-proxy=false --oom-score-adjust 0 \
    >"$IMAGES_DIR/logs/dockerd.log" 2>&1 8>&- &
  echo $! >"$RUN_DIR/dockerd.launch.pid"
  n=0
  until engine_answers; do
    pid_alive "$RUN_DIR/dockerd.launch.pid" || die "dockerd exited: $(tail -n 5 "$IMAGES_DIR/logs/dockerd.log")"
    (( n++ < 300 )) || die "dockerd did not answer on $DOCKER_SOCK in 30 s"
    sleep 0.1
  done
  log "engine up in $(since "$start"): dockerd $(docker_ version --format '{{.Server.Version}}') at $DOCKER_HOST_URL (data root $IMAGES_DIR/engine)"
}

# Stops dockerd, then its containerd, by PID; removes what they left on the host.
engine_stop() {
  local quiet=${1:-}
  local f pidf
  for pidf in dockerd.launch.pid containerd.pid; do
    f="$RUN_DIR/$pidf"
    if pid_alive "$f"; then
      kill -TERM "$(cat "$f")" 2>/dev/null || true
      if ! wait_gone "$f" 30; then
        log "$pidf: still running after 30 s; killing it"
        kill -KILL "$(cat "$f")" 2>/dev/null || true
        wait_gone "$f" 5 || true
      fi
      [[ -n "$quiet" ]] || log "stopped ${pidf%%.*} (pid $(cat "$f"))"
    fi
  done
  if [[ -f "$RUN_DIR/created" ]]; then
    # deepest first; only what the engine created and left empty
    sort -r "$RUN_DIR/created" | while read -r f; do rmdir "$f" 2>/dev/null || true; done
  fi
  # the cgroups of its containers (BuildKit's under <parent>/buildkit), deepest first
  local c
  for c in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
    [[ -d "$c" ]] || continue
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  if [[ -d "$RUN_DIR" ]]; then
    # dockerd leaves exec/netns/default, a bind mount of the host's network namespace
    unmount_under "$RUN_DIR"
    if grep -q " $RUN_DIR/" /proc/self/mounts; then
      log "mounts left under $RUN_DIR; not removing it"
    else
      rm -rf --one-file-system "$RUN_DIR"
    fi
  fi
  OWN_ENGINE=0
}

# Unmounts every mount point under dir $1, deepest first.
unmount_under() {
  local m
  while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done < <(
    awk -v d="$1/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
}

cmd_engine() {
  case "${1:-status}" in
    start)
      take_lock
      engine_ensure
      OWN_ENGINE=0   # leave it running
      printf 'DOCKER_HOST=%s\n' "$DOCKER_HOST_URL"
      ;;
    stop) take_lock; engine_stop ;;
    status)
      if pid_alive "$RUN_DIR/dockerd.launch.pid"; then
        printf 'running: DOCKER_HOST=unix://%s (pid %s)\n' "$DOCKER_SOCK" "$(cat "$RUN_DIR/dockerd.launch.pid")"
      else
        echo "not running"; return 1
      fi
      ;;
    *) die "engine start|stop|status, not $1" ;;
  esac
}

# -------------------------------------------------------------------- base
debian_mirror() {
  if [[ -n "${SREFORGE_DEBIAN_MIRROR:-}" ]]; then echo "$SREFORGE_DEBIAN_MIRROR"; return; fi
  local m=""
  if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
    # the URIs of the first deb822 stanza whose Suites has $SUITE itself
    m=$(awk -v s="$SUITE" '
      /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      END { if (uri != "" && ok) print uri }' /etc/apt/sources.list.d/*.sources | head -n1)
  fi
  if [[ -z "$m" && -f /etc/apt/sources.list ]]; then
    m=$(awk -v s="$SUITE" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

base_key() {
  printf '%s\n' "format=$BASE_FORMAT" "$SUITE" "$VARIANT" "${BASE_PACKAGES[@]}" | sort | sha256sum | cut -c1-16
}

# Removes dir $1 after unmounting whatever debootstrap left mounted under it.
remove_tree() {
  [[ -d "$1" ]] || return 0
  unmount_under "$1"
  rm -rf --one-file-system "$1"
}

make_rootfs() {
  local tar=$1 mirror start
  mirror=$(debian_mirror)
  command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"
  [[ $(id -u) == 0 ]] || die "debootstrap needs root"
  DEBOOTSTRAP_DIR=$(mktemp -d "$IMAGES_DIR/rootfs/.debootstrap.XXXXXX")
  local root="$DEBOOTSTRAP_DIR/root" include
  include=$(IFS=,; echo "${BASE_PACKAGES[*]}")
  start=$(date +%s)
  log "base: debootstrap --variant=$VARIANT $SUITE from $mirror (+ $include)"
  if ! "${NICE[@]}" debootstrap --variant="$VARIANT" --include="$include" --components=main \
      "$SUITE" "$root" "$mirror" >"$IMAGES_DIR/logs/debootstrap.log" 2>&1; then
    tail -n 20 "$IMAGES_DIR/logs/debootstrap.log" >&2
    die "debootstrap failed (log: $IMAGES_DIR/logs/debootstrap.log)"
  fi
  log "base: debootstrap done in $(since "$start")"
  # apt in an image build (the redis image) uses the same mirror and starts no service
  printf 'deb %s %s main\n' "$mirror" "$SUITE" >"$root/etc/apt/sources.list"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  # no documentation, no caches, no logs (what the slim images leave out, too)
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
    >"$root/etc/dpkg/dpkg.cfg.d/sreforge-nodoc"
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log "$root"/var/log/apt/* \
    "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
  : >"$root/etc/resolv.conf"; : >"$root/etc/hostname"
  tar --numeric-owner --xattrs --acls -C "$root" \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' \
    --exclude='./tmp/*' -cf "$tar.tmp" .
  mv -f "$tar.tmp" "$tar"
  remove_tree "$DEBOOTSTRAP_DIR"; DEBOOTSTRAP_DIR=""
  log "base: rootfs cached as $tar ($(du -h "$tar" | cut -f1))"
}

# Writes to dir $2 the certificates of the host's CA bundle that the rootfs tar $1 does not
# trust (e.g. a TLS-inspecting proxy's, which pip needs in the builds); prints their count.
extra_host_cas() {
  local bundle=${SREFORGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
  rm -rf "$2"; mkdir -p "$2"
  if [[ "$bundle" == none || ! -f "$bundle" ]]; then echo 0; return; fi
  tar -xOf "$1" ./etc/ssl/certs/ca-certificates.crt >"$2/.image-bundle"
  python3 - "$bundle" "$2/.image-bundle" "$2" <<'PY'
import pathlib
import re
import sys

pem = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
host = pem.findall(pathlib.Path(sys.argv[1]).read_text(errors="replace"))
image = {"".join(b.split()) for b in pem.findall(pathlib.Path(sys.argv[2]).read_text())}
n = 0
for block in host:
    if "".join(block.split()) not in image:
        n += 1
        (pathlib.Path(sys.argv[3]) / f"host-{n}.crt").write_text(block + "\n")
print(n)
PY
  rm -f "$2/.image-bundle"
}

cmd_base() {
  local key tar start have ncas ctx full_key rootfs_image
  key=$(base_key)
  tar="$IMAGES_DIR/rootfs/$SUITE-$VARIANT-$key.tar"
  mkdir -p "$IMAGES_DIR/logs" "$IMAGES_DIR/rootfs"
  if [[ -f "$tar" ]]; then
    log "base: rootfs cached ($tar)"
  else
    make_rootfs "$tar"
  fi
  ctx="$IMAGES_DIR/context/base-ca"
  ncas=$(extra_host_cas "$tar" "$ctx")
  full_key=$key
  if (( ncas > 0 )); then
    full_key="$key-ca-$(cat "$ctx"/*.crt | sha256sum | cut -c1-8)"
  fi
  engine_ensure
  have=$(docker_ image inspect --format '{{index .Config.Labels "dev.sreforge.base-key"}}' "$BASE_IMAGE" 2>/dev/null || true)
  if [[ "$have" == "$full_key" ]]; then
    log "base: $BASE_IMAGE is up to date ($full_key)"
    return 0
  fi
  start=$(date +%s)
  rootfs_image=$BASE_IMAGE
  (( ncas == 0 )) || rootfs_image="$BASE_IMAGE-debootstrap"
  docker_ import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change 'CMD ["bash"]' \
    --change "LABEL dev.sreforge.base-key=$key" \
    --change "LABEL org.opencontainers.image.description=\"debootstrap --variant=$VARIANT $SUITE + ${BASE_PACKAGES[*]}\"" \
    "$tar" "$rootfs_image" >/dev/null
  log "base: imported $rootfs_image in $(since "$start")"
  if (( ncas > 0 )); then
    # the builds reach PyPI through whatever the host trusts
    printf 'FROM %s\nCOPY *.crt /usr/local/share/ca-certificates/\nRUN update-ca-certificates\nLABEL dev.sreforge.base-key=%s\n' \
        "$rootfs_image" "$full_key" |
      docker_build "base-ca" -t "$BASE_IMAGE" -f - "$ctx"
    log "base: $BASE_IMAGE = $rootfs_image + $ncas CA certificate(s) the host trusts beyond Debian's"
  fi
}

# ------------------------------------------------------------------- build
# The Docker CLI that builds: BuildKit is needed (RUN --mount). A CLI >= 23 needs the
# buildx plugin for it; Debian's docker.io CLI (20.10, /usr/bin/docker) has it built in.
pick_docker_cli() {
  [[ -z "${DOCKER_CLI:-}" ]] || return 0
  if [[ -n "${DOCKER:-}" ]]; then DOCKER_CLI=$DOCKER; return 0; fi
  if docker buildx version >/dev/null 2>&1; then DOCKER_CLI=docker; return 0; fi
  local c v
  for c in $(type -ap docker) /usr/bin/docker; do
    v=$("$c" --version 2>/dev/null | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
    if [[ -n "$v" ]] && (( v < 23 )); then DOCKER_CLI=$c; return 0; fi
  done
  die "no Docker CLI that builds with BuildKit: install the buildx plugin, or use Debian's docker.io CLI (DOCKER=/usr/bin/docker)"
}

# docker_build LABEL ARGS...: a BuildKit build on the engine, output in logs/build-LABEL.log
docker_build() {
  local label=$1; shift
  pick_docker_cli
  local logf; logf="$IMAGES_DIR/logs/build-${label//[\/:]/_}.log"
  if ! DOCKER_HOST="$DOCKER_HOST_URL" DOCKER_BUILDKIT=1 "${NICE[@]}" "$DOCKER_CLI" build \
      --network host --progress plain "$@" >"$logf" 2>&1; then
    tail -n 25 "$logf" >&2
    die "$label: build failed (log: $logf)"
  fi
}

# Prints the plan: TAG<TAB>KIND<TAB>DOCKERFILE<TAB>SREFORGE_PATCH<TAB>SOURCE<TAB>COMMAND, one
# image a line, KIND being repo (context: the repository), runner (the same, its `runner`
# target), source (a fetched third-party service: SOURCE is its substrate folder, the
# context is staged by `sreforge sources context`, COMMAND is the image's CMD), redis,
# postgresql, prometheus or pause.
plan() {
  python3 - "$REPO_ROOT" "$PREFIX" "$PAUSE_TAG" "$(prometheus_version)" <<'PY'
import pathlib
import shlex
import sys
import tomllib

root, prefix, pause_tag, prom_version = pathlib.Path(sys.argv[1]), *sys.argv[2:]
rows: dict[str, tuple[str, ...]] = {}
# what a pod's command means by the scenario's placeholders (runtime/kube/render.py)
POD = {"{host}": "0.0.0.0", "{port}": "8080", "{data_dir}": "/tmp"}


def add(tag: str, kind: str, dockerfile: str, patch: str = "", source: str = "", cmd: str = "") -> None:
    rows.setdefault(prefix + tag, (kind, dockerfile, patch, source, cmd))


def pod_command(argv: list[str]) -> str:
    out = []
    for a in argv:
        for k, v in POD.items():
            a = a.replace(k, v)
        out.append(a)
    return shlex.join(out)


def image(name: str, source: str, tag: str, patch: str = "", command: list[str] = ()) -> None:
    if (root / source / "source.toml").is_file():
        add(f"{name}:{tag}", "source", "hack/images/source.Dockerfile", patch, source,
            pod_command(list(command)))
    else:
        add(f"{name}:{tag}", "repo", f"{source}/Dockerfile", patch)


add("operator:dev", "repo", "Dockerfile")
add("runner:dev", "runner", "Dockerfile")
for df in sorted(root.glob("substrate/*/Dockerfile")):
    add(f"{df.parent.name}:healthy", "repo", str(df.relative_to(root)))
deps: set[str] = set()
for toml in sorted(root.glob("scenarios/*/scenario.toml")):
    s = tomllib.loads(toml.read_text(encoding="utf-8"))
    if "kube" not in s.get("runtimes", ["local", "kube"]):
        continue  # local-only
    svc = s["service"]
    patch = (toml.parent / s.get("regression", "regression.patch")).relative_to(root)
    image(svc["name"], svc["source"], "healthy", command=svc["command"])
    image(svc["name"], svc["source"], s["name"], str(patch), svc["command"])
    for up in svc.get("upstreams", []):
        image(up["name"], up["source"], "healthy", command=up["command"])
    deps.update(svc.get("dependencies", []))
recipes = {"redis": "redis:7", "postgresql": "postgresql:15"}
for dep in sorted(deps):
    if dep not in recipes:
        sys.exit(f"no image recipe for dependency {dep!r} (hack/images.sh knows {sorted(recipes)})")
    add(recipes[dep], dep, f"hack/images/{dep}.Dockerfile")
add(f"prometheus:{prom_version}", "prometheus", "hack/images/prometheus.Dockerfile")
add(f"pause:{pause_tag}", "pause", "")
for tag, row in rows.items():
    print("\t".join(x or "-" for x in (tag, *row)))  # "-": empty (tabs would collapse)
PY
}

prometheus_version() {
  bash "$REPO_ROOT/hack/k8s-tools.sh" versions | awk '$1 == "prometheus" { print $2 }'
}

# The prometheus binary of hack/k8s-tools.sh's cache (built, never downloaded).
prometheus_binary() {
  local bin_dir v
  if bin_dir=$(bash "$REPO_ROOT/hack/k8s-tools.sh" bin-dir 2>/dev/null) && [[ -x "$bin_dir/prometheus" ]]; then
    readlink -f "$bin_dir/prometheus"; return 0
  fi
  v=$(prometheus_version)
  local p="${SREFORGE_TOOLS_DIR:-$HOME/.cache/sreforge/tools}/prometheus-$v/bin/prometheus"
  [[ -x "$p" ]] || die "no prometheus $v binary: build it with: bash hack/k8s-tools.sh"
  printf '%s\n' "$p"
}

# Copies $1 to $2 unless $2 has the same bytes (an unchanged context keeps its cache).
sync_file() {
  if ! cmp -s "$1" "$2"; then cp -f "$1" "$2.tmp" && mv -f "$2.tmp" "$2"; fi
}

image_id() { docker_ image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

build_one() {
  local tag=$1 kind=$2 dockerfile=$3 patch=$4 source=${5:-} command=${6:-}
  [[ "$patch" != - ]] || patch=""
  local start before after args=(-f "$REPO_ROOT/$dockerfile" --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$tag")
  local context=$REPO_ROOT
  start=$(date +%s)
  before=$(image_id "$tag")
  case "$kind" in
    repo) [[ -z "$patch" ]] || args+=(--build-arg "SREFORGE_PATCH=$patch") ;;
    runner) args+=(--target runner) ;;
    source)
      # the fetched release, staged (unchanged files keep their bytes: the cache holds)
      context="$IMAGES_DIR/context/${source##*/}"
      "$SREFORGE_PY" -m sreforge.cli sources context "${source##*/}" --root "$REPO_ROOT" \
          --dest "$context" >/dev/null || die "$tag: cannot stage ${source##*/}'s context"
      args+=(--build-arg "SREFORGE_COMMAND=$command")
      if [[ -n "$patch" ]]; then
        mkdir -p "$context/patches"
        local staged
        staged="patches/$(basename "$(dirname "$patch")").patch"
        sync_file "$REPO_ROOT/$patch" "$context/$staged"
        args+=(--build-arg "SREFORGE_PATCH=$staged")
      fi ;;
    redis|postgresql) context="$IMAGES_DIR/context/empty"; mkdir -p "$context" ;;
    prometheus)
      context="$IMAGES_DIR/context/prometheus"; mkdir -p "$context"
      sync_file "$(prometheus_binary)" "$context/prometheus" ;;
    *) die "$tag: unknown kind $kind" ;;
  esac
  docker_build "$tag" "${args[@]}" "$context"
  after=$(image_id "$tag")
  if [[ "$before" == "$after" ]]; then
    log "$tag: up to date ($(since "$start"), ${after:7:12})"
  else
    log "$tag: built in $(since "$start") (${after:7:12})"
    BUILT_CHANGED=$(( BUILT_CHANGED + 1 ))
  fi
}

# Resolves the image names given on the command line (with or without the prefix)
# against the plan; none given: all of them. Sets SELECTED (plan lines).
select_images() {
  local all; all=$(plan) || die "cannot read scenarios/*/scenario.toml"
  SELECTED=()
  if (( $# == 0 )); then
    mapfile -t SELECTED <<<"$all"
    return 0
  fi
  local want line found
  for want in "$@"; do
    [[ "$want" == "$PREFIX"* ]] || want="$PREFIX$want"
    found=""
    while IFS= read -r line; do
      if [[ "${line%%$'\t'*}" == "$want" ]]; then SELECTED+=("$line"); found=1; fi
    done <<<"$all"
    [[ -n "$found" ]] || die "no image $want (hack/images.sh list)"
  done
}

cmd_build() {
  select_images "$@"
  take_lock
  cmd_base
  local line tag kind dockerfile patch source command n=0 start
  start=$(date +%s)
  BUILT_CHANGED=0
  for line in "${SELECTED[@]}"; do
    IFS=$'\t' read -r tag kind dockerfile patch source command <<<"$line"
    [[ "$kind" == pause ]] && continue   # made by `load`: it is not a Docker image
    build_one "$tag" "$kind" "$dockerfile" "$patch" "$source" "$command"
    n=$(( n + 1 ))
  done
  # the images that rebuilt tags replaced (the build cache stays); never on a user's engine
  if (( BUILT_CHANGED )) && [[ -z "${SREFORGE_DOCKER_HOST:-}" ]]; then
    docker_ image prune -f >/dev/null
  fi
  log "build: $n image(s) in $(since "$start"), $BUILT_CHANGED new"
}

# -------------------------------------------------------------------- load
# containerd's name of a Docker reference (docker.io/ and library/ made explicit).
containerd_name() {
  local first=${1%%/*}
  if [[ "$1" == */* && ( "$first" == *.* || "$first" == *:* || "$first" == localhost ) ]]; then
    printf '%s\n' "$1"
  elif [[ "$1" == */* ]]; then
    printf 'docker.io/%s\n' "$1"
  else
    printf 'docker.io/library/%s\n' "$1"
  fi
}

# The pause image as an OCI archive: kubernetes' pause.c, gcc -static, umoci. Prints its path.
make_pause() {
  local tools="${SREFORGE_TOOLS_DIR:-$HOME/.cache/sreforge/tools}"
  local src="$tools/.gomodcache/$K8S_MODULE/$PAUSE_SRC_REL"
  [[ -f "$src" ]] || die "no $src: the k8s.io/kubernetes module comes with: bash hack/k8s-tools.sh"
  command -v gcc >/dev/null || die "gcc not found: apt-get install gcc libc6-dev"
  command -v umoci >/dev/null || die "umoci not found: apt-get install umoci"
  local key out
  key=$( { cat "$src"; gcc --version | head -n1; echo "$PAUSE_TAG"; } | sha256sum | cut -c1-16)
  out="$IMAGES_DIR/pause/pause-$PAUSE_TAG-$key.tar"
  if [[ -f "$out" ]]; then printf '%s\n' "$out"; return 0; fi
  local start work; start=$(date +%s)
  mkdir -p "$IMAGES_DIR/pause"
  work=$(mktemp -d "$IMAGES_DIR/pause/.work.XXXXXX")
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_TAG-sreforge" -o "$work/pause" "$src" \
    || die "gcc -static failed (libc6-dev installed?)"
  strip "$work/pause"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$PAUSE_TAG"
  umoci insert --image "$work/oci:$PAUSE_TAG" "$work/pause" /pause
  umoci config --image "$work/oci:$PAUSE_TAG" --config.entrypoint /pause --config.user 65535:65535 \
    --author "hack/images.sh" --history.comment "$K8S_MODULE $PAUSE_SRC_REL, gcc -Os -static"
  umoci gc --layout "$work/oci"
  tar --numeric-owner -C "$work/oci" -cf "$out.tmp" .
  mv -f "$out.tmp" "$out"
  rm -rf "$work"
  log "pause: $(containerd_name "${PREFIX}pause:$PAUSE_TAG") made in $(since "$start") ($out)" >&2
  printf '%s\n' "$out"
}

cmd_load() {
  local sock=$CONTAINERD_SOCK
  local names=()
  while (( $# )); do
    case "$1" in
      --address|-a) sock=${2:?--address needs a socket path}; shift 2 ;;
      --address=*) sock=${1#*=}; shift ;;
      *) names+=("$1"); shift ;;
    esac
  done
  [[ -S "$sock" ]] || die "no containerd socket at $sock (--address SOCK)"
  command -v "$CTR" >/dev/null || die "ctr not found: apt-get install containerd"
  select_images "${names[@]}"
  take_lock
  local stamps start present line tag kind id
  stamps="$IMAGES_DIR/loaded/$(printf '%s' "$sock" | sha256sum | cut -c1-10)"
  mkdir -p "$stamps"
  start=$(date +%s)
  present=$("$CTR" -a "$sock" -n k8s.io images ls -q) || die "ctr cannot list images on $sock"
  local batch=() ids=() pause_tar="" uptodate=0
  for line in "${SELECTED[@]}"; do
    IFS=$'\t' read -r tag kind _ <<<"$line"
    if [[ "$kind" == pause ]]; then
      pause_tar=$(make_pause)
      id="sha256:$(sha256sum "$pause_tar" | cut -d' ' -f1)"
    else
      [[ -n "${DOCKER_HOST_URL:-}" ]] || engine_ensure
      id=$(image_id "$tag")
      [[ -n "$id" ]] || die "$tag is not built (hack/images.sh build)"
    fi
    if [[ "$(cat "$stamps/${tag//[\/:]/_}" 2>/dev/null)" == "$id" ]] &&
        grep -qxF "$(containerd_name "$tag")" <<<"$present"; then
      uptodate=$(( uptodate + 1 ))
      [[ "$kind" == pause ]] && pause_tar=""
      continue
    fi
    if [[ "$kind" == pause ]]; then
      local t0; t0=$(date +%s)
      "$CTR" -a "$sock" -n k8s.io images import --base-name "$(containerd_name "${tag%:*}")" \
        "$pause_tar" >/dev/null || die "ctr import of $pause_tar failed"
      printf '%s\n' "$id" >"$stamps/${tag//[\/:]/_}"
      log "load: $tag imported in $(since "$t0")"
    else
      batch+=("$tag"); ids+=("$id")
    fi
  done
  if (( ${#batch[@]} )); then
    local t0 i; t0=$(date +%s)
    log "load: docker save | ctr import of ${#batch[@]} image(s): ${batch[*]}"
    docker_ save "${batch[@]}" | "$CTR" -a "$sock" -n k8s.io images import - >/dev/null ||
      die "docker save | ctr images import failed"
    for i in "${!batch[@]}"; do printf '%s\n' "${ids[$i]}" >"$stamps/${batch[$i]//[\/:]/_}"; done
    log "load: imported ${#batch[@]} image(s) in $(since "$t0")"
  fi
  log "load: $(( ${#SELECTED[@]} - uptodate )) imported, $uptodate up to date, into $sock (namespace k8s.io) in $(since "$start")"
}

# ----------------------------------------------------------------- commands
cmd_list() {
  select_images "$@"
  local line
  for line in "${SELECTED[@]}"; do printf '%s\n' "${line%%$'\t'*}"; done
}

cmd_all() {
  local sock=$CONTAINERD_SOCK
  while (( $# )); do
    case "$1" in
      --address|-a) sock=${2:?--address needs a socket path}; shift 2 ;;
      --address=*) sock=${1#*=}; shift ;;
      *) die "all takes no image names (use build/load)" ;;
    esac
  done
  cmd_build
  if [[ -S "$sock" ]]; then
    cmd_load --address "$sock"
  else
    log "no containerd socket at $sock: not loading (hack/images.sh load --address SOCK)"
  fi
  log "all done in $(since "$T0")"
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

main() {
  local cmd=${1:-all}
  (( $# == 0 )) || shift
  case "$cmd" in
    all) cmd_all "$@" ;;
    base) take_lock; cmd_base ;;
    build) cmd_build "$@" ;;
    load) cmd_load "$@" ;;
    list) cmd_list "$@" ;;
    engine) cmd_engine "$@" ;;
    -h|--help|help) usage ;;
    *) echo "unknown command: $cmd (try --help)" >&2; exit 2 ;;
  esac
}

main "$@"
