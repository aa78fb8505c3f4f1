"""The operator's pods on a read-only root filesystem, as a kubelet runs them.

Every container the operator renders sets `readOnlyRootFilesystem: true`; on a real node
anything it writes outside its volumes fails. The patch overlay's init container once had
no writable /tmp, so `vet_patch` (which makes a temporary directory) failed with "No usable
temporary directory found" and every non-empty fix ended NoRedeploy, while every test
passed on hosts with a writable /tmp. Here the init containers' exact commands run in a
root filesystem that is read-only except their volume mounts: a private mount namespace
(`unshare --mount`), a read-only tmpfs as `/`, the host's /usr, /etc, /dev, /proc and the
Python install bound read-only, each volumeMount bound where the spec mounts it, then
`chroot` and `setpriv` to the pod's non-root uid with only the container's environment.
The one thing the image would provide that the host lends instead is the interpreter with
the sreforge package (on PYTHONPATH) and the service's source at /app.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.kubeenv import REPO_ROOT

import sreforge
from sreforge.runtime import ci
from sreforge.runtime.kube import config, render
from sreforge.scenarios import load_scenario

SCENARIO = load_scenario(REPO_ROOT / "scenarios" / "latency-cache-stampede")
CFG = config.OperatorConfig()
INCIDENT: dict[str, Any] = {
    "metadata": {"name": "inc", "namespace": "ns", "uid": "u-1"},
    "spec": {"scenario": SCENARIO.name},
}
UID = 10001

# Builds the container's root in the mount namespace, then runs the command in it.
SANDBOX = r"""
set -eu
R=$1; shift
mount -t tmpfs -o mode=0755,size=4m sreforge-root "$R"
ro() { mkdir -p "$R$2"; mount --rbind "$1" "$R$2"; mount -o remount,bind,ro "$R$2"; }
rw() { mkdir -p "$R$2"; mount --bind "$1" "$R$2"; }
for d in bin lib lib32 lib64 sbin; do
  if [ -L "/$d" ]; then cp -P "/$d" "$R/$d"; elif [ -d "/$d" ]; then ro "/$d" "/$d"; fi
done
ro /usr /usr; ro /etc /etc; ro /dev /dev; ro /proc /proc
while [ "$1" != "--" ]; do
  case "$1" in
    ro) ro "$2" "$3" ;;
    rw) rw "$2" "$3" ;;
  esac
  shift 3
done
shift
mount -o remount,ro "$R"
exec chroot "$R" "$@"
"""


def _readonly_boxes(pod: dict[str, Any]) -> list[dict[str, Any]]:
    boxes = [*(pod.get("initContainers") or []), *pod["containers"]]
    return [b for b in boxes if (b.get("securityContext") or {}).get("readOnlyRootFilesystem")]


def _pod_specs() -> dict[str, dict[str, Any]]:
    dep = {
        "metadata": {"name": "catalog", "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "catalog"}},
                "spec": {"containers": [{"name": "catalog", "image": "sreforge/catalog:healthy"}]},
            }
        },
    }
    over = render.overlay_template(
        dep,
        "catalog",
        CFG,
        "cm",
        None,
        "sub",
        SCENARIO.protected,
        incident=INCIDENT["metadata"]["name"],
        scenario=SCENARIO.name,
    )
    specs = {
        "overlay": over["spec"]["template"]["spec"],
        "ci": render.render_ci_job(INCIDENT, "sub", SCENARIO, CFG, "cm")["spec"]["template"][
            "spec"
        ],
    }
    for runner in ("builtin", "k6"):
        objs = render.render_load(
            INCIDENT,
            SCENARIO.load,
            "http://catalog:8080",
            runner,
            CFG,
            prometheus_url="http://prom:9090",
        )
        job = next(o for o in objs if o["kind"] == "Job")
        specs[f"load-{runner}"] = job["spec"]["template"]["spec"]
    return specs


def test_every_read_only_container_has_a_writable_tmp_and_home() -> None:
    specs = _pod_specs()
    checked = 0
    for what, pod in specs.items():
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for box in _readonly_boxes(pod):
            where = f"{what}/{box['name']}"
            mounts = {m["mountPath"]: m for m in box.get("volumeMounts") or []}
            assert "/tmp" in mounts, f"{where}: no /tmp mount"
            tmp = mounts["/tmp"]
            assert not tmp.get("readOnly"), where
            assert volumes[tmp["name"]]["emptyDir"]["sizeLimit"], where
            env = {e["name"]: e.get("value") for e in box.get("env") or []}
            home = env.get("HOME")
            assert home is not None, f"{where}: no HOME"
            writable = [
                p
                for p, m in mounts.items()
                if not m.get("readOnly") and "emptyDir" in volumes[m["name"]]
            ]
            assert any(home == p or home.startswith(p + "/") for p in writable), where
            checked += 1
    assert checked >= 6  # overlay 2, CI 3, each load Job 1


def test_overlay_tmp_volume_comes_off_with_the_overlay() -> None:
    pod = _pod_specs()["overlay"]
    assert {"name": config.TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    dep = {"spec": {"template": {"spec": pod}}}
    base = render.overlay_template(dep, "catalog", CFG, None, None, None, [])
    assert "volumes" not in base["spec"]["template"]["spec"]


def _sandbox_usable(tmp: Path) -> str | None:
    """Why the sandbox cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for a private mount namespace and chroot"
    for tool in ("unshare", "chroot", "setpriv", "git"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "x", str(tmp)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"unshare --mount failed: {probe.stderr.strip()}"


def run_container(
    box: dict[str, Any],
    volumes: dict[str, Path],
    image: dict[str, Path],
    root: Path,
) -> subprocess.CompletedProcess[str]:
    """`box`'s command in a read-only root, as uid UID, its volumeMounts bound from
    `volumes` (emptyDirs writable, configMaps and readOnly mounts not), `image`'s paths
    read-only, and only its own environment (plus the image's PATH and PYTHONPATH)."""
    py_prefix = Path(sys.base_prefix)
    venv = Path(sys.prefix)
    package_root = Path(sreforge.__file__).resolve().parents[1]
    binds = [("ro", py_prefix, py_prefix), ("ro", venv, venv), ("ro", package_root, package_root)]
    binds += [("ro", src, Path(dst)) for dst, src in image.items()]
    for m in box.get("volumeMounts") or []:
        host = volumes[m["name"]]
        mode = "ro" if m.get("readOnly") or host.name.startswith("cm-") else "rw"
        binds.append((mode, host, Path(m["mountPath"])))
    env = [f"{e['name']}={e['value']}" for e in box.get("env") or []]
    env += [f"PATH={venv}/bin:/usr/bin:/bin", f"PYTHONPATH={package_root}"]
    assert not any(e.startswith("TMPDIR=") for e in env)
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX, "sandbox"]
    argv.append(str(root))
    for mode, src, dst in binds:
        argv += [mode, str(src), str(dst)]
    argv += ["--", "setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    argv += ["env", "-i", *env, *box["command"]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_overlay_init_containers_run_on_a_read_only_root(tmp_path: Path) -> None:
    """The overlay's two init containers, exact commands, in a read-only root: the source is
    copied and the fix applied (vet_patch's temporary directory in the /tmp emptyDir). The
    same patch container without that mount fails as it did on a real kubelet, which proves
    the root really was read-only."""
    root = tmp_path / "root"
    root.mkdir()
    why = _sandbox_usable(root)
    if why is not None:
        pytest.skip(why)
    # the regressed image's source tree at /app, readable by the pod's uid
    app = tmp_path / "app"
    shutil.copytree(REPO_ROOT / "substrate" / "catalog", app)
    ci.apply_patch(app, SCENARIO.regression_path.read_text())
    fix = SCENARIO.directory / "fixes" / "restore-simplecache.patch"
    cm = tmp_path / "cm-patch"
    cm.mkdir()
    (cm / config.PATCH_KEY).write_text(fix.read_text())
    volumes = {config.PATCH_VOLUME: cm}
    for name in (config.SRC_VOLUME, config.TMP_VOLUME):
        volumes[name] = tmp_path / name
        volumes[name].mkdir(mode=0o777)
        volumes[name].chmod(0o777)  # an emptyDir is world-writable
    for d in (tmp_path, app, cm):
        d.chmod(0o755)
    pod = _pod_specs()["overlay"]
    source, patch = pod["initContainers"]
    assert (source["name"], patch["name"]) == ("sreforge-source", "sreforge-patch")
    image = {CFG.source_dir: app}

    copied = run_container(source, volumes, image, root)
    assert copied.returncode == 0, copied.stderr
    src = volumes[config.SRC_VOLUME]
    assert "SimpleCache" not in (src / "catalog" / "app.py").read_text()

    no_tmp = {
        **patch,
        "volumeMounts": [m for m in patch["volumeMounts"] if m["mountPath"] != "/tmp"],
    }
    refused = run_container(no_tmp, volumes, {}, root)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "No usable temporary directory found" in refused.stderr
    assert not list(volumes[config.TMP_VOLUME].iterdir())

    applied = run_container(patch, volumes, {}, root)
    assert applied.returncode == 0, applied.stderr
    assert "SimpleCache" in (src / "catalog" / "app.py").read_text()
    owners = {p.stat().st_uid for p in src.rglob("*")}
    assert owners == {UID}  # written by the pod's uid, not by root
