"""The kubelet part of the stand-in: one thread per pod runs its containers as processes.

A container is ``command + args`` (or the image's entrypoint/cmd) exec'd with no shell,
``python``/``python3`` being this interpreter (and first on PATH), in a local directory
standing for the image (``Image.root``). Absolute paths under a volume's mountPath or the
image's own path are rewritten to local directories; Service addresses to the stand-in's
proxies; ``0.0.0.0:<containerPort>`` / ``127.0.0.1:<containerPort>`` to the local port the
stand-in chose for that containerPort. Status is written through the real API as a
kubelet does (phase, conditions, container states, termination messages).

Stand-in simplifications (also said where they happen): probes are polled at most every
second whatever periodSeconds says; restart back-off is 2 s doubling to 30 s; a
terminationGracePeriodSeconds above 5 s is cut to 5 s; securityContext and resources are
ignored (there is no container).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sreforge.runtime.process import Managed, free_port, tail

from .api import ApiError

if TYPE_CHECKING:
    from .standin import StandIn

log = logging.getLogger("standin.pods")

TICK = 0.2
PROBE_PERIOD_CAP = 1.0
BACKOFF_START, BACKOFF_CAP = 2.0, 30.0
GRACE_CAP = 5.0
TERMINATION_MESSAGE_MAX = 4096
FALLBACK_LOG_LINES = 80
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Image:
    """What the stand-in knows of an image: a local tree standing for its filesystem.

    ``path`` is where those files live inside the image (its WORKDIR, e.g. ``/app``);
    ``workdir`` the default cwd (default ``path``); ``command``/``args`` its
    ENTRYPOINT/CMD; ``env`` its ENV (values may use ``path``, which is rewritten).
    """

    root: Path
    path: str = "/app"
    workdir: str | None = None
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class PodConfigError(RuntimeError):
    """The pod cannot be run by the stand-in (reason, message go to the status)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _exit_code(returncode: int) -> int:
    """Popen's -N (killed by signal N) is 128+N in a container status."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by pid (a container: the stand-in's own child)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # not a group leader after all: the process alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def make_rewriter(
    paths: dict[str, Path], ports: dict[int, int], services: list[tuple[list[str], int, int]]
) -> Callable[[str], str]:
    """A function rewriting paths, the pod's own ports and Service addresses in a string.

    ``paths`` maps absolute in-container paths (mountPaths, the image path, the
    termination-message file) to local ones; a prefix matches at a path boundary only.
    ``services`` lists ``(names, service port, proxy port)``.
    """
    subs: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = []
    svc_map: dict[str, str] = {}
    for names, svc_port, local in services:
        for name in names:
            svc_map[f"{name}:{svc_port}"] = f"127.0.0.1:{local}"
    for cport, local in ports.items():
        for host in ("0.0.0.0", "127.0.0.1", "localhost"):
            svc_map.setdefault(f"{host}:{cport}", f"127.0.0.1:{local}")
    if svc_map:
        alts = "|".join(re.escape(k) for k in sorted(svc_map, key=len, reverse=True))
        svc_re = re.compile(rf"(?<![\w.-])(?:{alts})(?!\d)")
        subs.append((svc_re, lambda m: svc_map[m.group(0)]))
    usable = {p.rstrip("/"): local for p, local in paths.items() if p.rstrip("/")}
    if usable:
        alts = "|".join(re.escape(k) for k in sorted(usable, key=len, reverse=True))
        path_re = re.compile(rf"(?<![\w.\-/])(?:{alts})(?![\w.\-])")
        subs.append((path_re, lambda m: str(usable[m.group(0)])))

    def rewrite(value: str) -> str:
        for pattern, repl in subs:
            value = pattern.sub(repl, value)
        return value

    return rewrite


def expand_vars(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (``$$`` escapes; unknown references stay)."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$\(\w+\)|\$\((\w+)\)", repl, value)


@dataclass
class Container:
    spec: dict[str, Any]
    init: bool
    proc: Managed | None = None
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    restarts: int = 0
    next_start: float = 0.0
    backoff: float = BACKOFF_START
    done: bool = False  # terminated and will not be restarted
    probe_ok: int = 0
    probe_fail: int = 0
    live_fail: int = 0
    next_probe: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"standin://{self.spec.get('image', '')}",
            "ready": self.ready,
            "restartCount": self.restarts,
            "started": self.proc is not None and self.proc.alive(),
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            out["containerID"] = f"standin://{self.proc.pid}"
        return out


class PodRunner(threading.Thread):
    """Runs one pod bound to the stand-in's node, until it is deleted."""

    def __init__(self, standin: StandIn, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.standin = standin
        self.api = standin.api
        self.pod = pod
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        self.annotations: dict[str, str] = dict(meta.get("annotations") or {})
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.inits = [Container(c, True) for c in spec.get("initContainers") or []]
        self.mains = [Container(c, False) for c in spec.get("containers") or []]
        self.dir: Path = (
            standin.work_dir / "pods" / self.namespace / f"{self.pod_name}-{self.uid[:8]}"
        )
        self.ports: dict[int, int] = {}  # containerPort -> local port
        self.named_ports: dict[str, int] = {}  # port name -> containerPort
        self.mounts: dict[str, Path] = {}  # volume name -> local dir
        self.phase = "Pending"
        self.initialized = False
        self.running = False  # main containers started
        self.terminating = False
        self.deleting = threading.Event()
        self.gone = threading.Event()  # the pod no longer exists in the API
        self._transitions: dict[str, tuple[str, str]] = {}
        self._written = ""
        self.start_time = now_rfc3339()
        self.pod_message = ""
        self.pod_reason = ""
        status = pod.get("status") or {}
        if status.get("phase") in TERMINAL:
            # a pod that finished before this stand-in started: nothing to run again
            self.phase = status["phase"]

    # ------------------------------------------------------------ from the watch
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        meta = pod["metadata"]
        self.labels = dict(meta.get("labels") or {})
        self.annotations = dict(meta.get("annotations") or {})
        if meta.get("deletionTimestamp"):
            self.deleting.set()

    def vanish(self) -> None:
        """The pod was removed from the API (or this stand-in stops): kill, no writes."""
        self.gone.set()
        self.deleting.set()

    # ------------------------------------------------------------ views
    @property
    def ready(self) -> bool:
        return (
            self.running
            and not self.terminating
            and self.phase == "Running"
            and all(c.ready for c in self.mains)
        )

    def local_port(self, port: int | str) -> int | None:
        """The local port standing for a containerPort (a number or a port name)."""
        if isinstance(port, str):
            if port.isdigit():
                port = int(port)
            elif port in self.named_ports:
                port = self.named_ports[port]
            else:
                return None
        return self.ports.get(port)

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.inits + self.mains if c.proc is not None]

    def live_pids(self) -> list[int]:
        return [
            c.proc.pid for c in self.inits + self.mains if c.proc is not None and c.proc.alive()
        ]

    # ------------------------------------------------------------ thread
    def run(self) -> None:
        try:
            if self.phase not in TERMINAL:
                self._run()
        except Exception as e:  # a bug here must not kill the stand-in; say it in status
            log.exception("pod %s/%s", self.namespace, self.pod_name)
            self.pod_reason, self.pod_message = "StandInError", f"stand-in: {e}"
            self._write_status()
        finally:
            self._stop_processes()
            self.standin.changed()
        while not self.deleting.wait(1.0):
            pass
        self._confirm_deletion()

    def _run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for c in self.inits + self.mains:
            for p in c.spec.get("ports") or []:
                cport = int(p["containerPort"])
                self.ports.setdefault(cport, free_port())
                if p.get("name"):
                    self.named_ports[p["name"]] = cport
        self._write_status()
        while not self.deleting.is_set():
            try:
                self._prepare_volumes()
                break
            except PodConfigError as e:
                self._all_waiting(e.reason, str(e))
                self._write_status()
                self.deleting.wait(2.0)
        if not self._run_inits():
            return
        self.initialized = True
        self.running = True
        self.phase = "Running"
        while not self.deleting.is_set():
            changed = False
            for c in self.mains:
                changed |= self._step(c)
            if self._all_done():
                self.phase = (
                    "Succeeded"
                    if all(c.state.get("terminated", {}).get("exitCode") == 0 for c in self.mains)
                    else "Failed"
                )
                self.running = False
                self._write_status()
                self.standin.changed()
                return
            if changed:
                self._write_status()
                self.standin.changed()
            self.deleting.wait(TICK)
        self._terminate()

    # ------------------------------------------------------------ init containers
    def _run_inits(self) -> bool:
        for c in self.inits:
            while not self.deleting.is_set():
                if c.proc is None and not c.done and time.monotonic() >= c.next_start:
                    self._start(c)
                    self._write_status()
                if c.proc is not None and not c.proc.alive():
                    code = self._finish(c)
                    if code == 0:
                        c.done = True
                        self._write_status()
                        break
                    if self.restart_policy == "Never":
                        self.phase = "Failed"
                        c.done = True
                        for m in self.mains:
                            m.state = {"waiting": {"reason": "PodInitializing"}}
                        self._write_status()
                        return False
                    self._back_off(c)
                    self._write_status()
                elif c.done:  # could not start under restartPolicy Never
                    self.phase = "Failed"
                    self._write_status()
                    return False
                self.deleting.wait(TICK)
            if self.deleting.is_set():
                return False
        for m in self.mains:
            m.state = {"waiting": {"reason": "ContainerCreating"}}
        return True

    # ------------------------------------------------------------ main containers
    def _step(self, c: Container) -> bool:
        now = time.monotonic()
        if c.done:
            return False
        if c.proc is None:
            if now >= c.next_start:
                self._start(c)
                return True
            return False
        if not c.proc.alive():
            code = self._finish(c)
            restart = self.restart_policy == "Always" or (
                self.restart_policy == "OnFailure" and code != 0
            )
            if restart:
                self._back_off(c)
            else:
                c.done = True
            return True
        return self._probe(c, now)

    def _all_done(self) -> bool:
        return bool(self.mains) and all(c.done for c in self.mains)

    def _back_off(self, c: Container) -> None:
        """Stand-in back-off: 2 s doubling to 30 s (kubelet: 10 s to 5 min)."""
        c.last_state = c.state
        c.restarts += 1
        c.proc = None
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {c.backoff:.0f}s restarting failed container={c.name} "
                f"pod={self.pod_name}_{self.namespace}({self.uid})",
            }
        }
        c.next_start = time.monotonic() + c.backoff
        c.backoff = min(BACKOFF_CAP, c.backoff * 2)

    def _probe(self, c: Container, now: float) -> bool:
        """Readiness (and liveness) probes; True when the container's readiness changed."""
        if now < c.next_probe or c.proc is None:
            return False
        changed = False
        readiness = c.spec.get("readinessProbe")
        started_at = c.state.get("running", {}).get("_t", now)
        if readiness is None:
            changed = not c.ready
            c.ready = True
        elif now - started_at >= float(readiness.get("initialDelaySeconds", 0)):
            if self._check(c, readiness):
                c.probe_ok, c.probe_fail = c.probe_ok + 1, 0
                if not c.ready and c.probe_ok >= int(readiness.get("successThreshold", 1)):
                    c.ready = changed = True
            else:
                c.probe_ok, c.probe_fail = 0, c.probe_fail + 1
                if c.ready and c.probe_fail >= int(readiness.get("failureThreshold", 3)):
                    c.ready, changed = False, True
        liveness = c.spec.get("livenessProbe")
        if liveness is not None and now - started_at >= float(
            liveness.get("initialDelaySeconds", 0)
        ):
            if self._check(c, liveness):
                c.live_fail = 0
            else:
                c.live_fail += 1
                if c.live_fail >= int(liveness.get("failureThreshold", 3)):
                    log.info("%s/%s %s: liveness failed, killing", *self._id(c))
                    c.live_fail = 0
                    c.proc.stop(timeout=self._grace())
        periods = [
            float(p.get("periodSeconds", 10)) for p in (readiness, liveness) if p is not None
        ]
        # stand-in: at most a second between probes, whatever periodSeconds says
        c.next_probe = now + min([PROBE_PERIOD_CAP, *periods])
        return changed

    def _id(self, c: Container) -> tuple[str, str, str]:
        return self.namespace, self.pod_name, c.name

    def _check(self, c: Container, probe: dict[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        if http := probe.get("httpGet"):
            port = self.local_port(http.get("port", 0)) or int(http.get("port", 0))
            path = http.get("path", "/")
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}{path}",
                headers={h["name"]: h["value"] for h in http.get("httpHeaders") or []},
            )
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    return bool(200 <= resp.status < 400)
            except urllib.error.HTTPError as e:
                return 200 <= e.code < 400
            except (OSError, ValueError):
                return False
        if tcp := probe.get("tcpSocket"):
            port = self.local_port(tcp.get("port", 0)) or int(tcp.get("port", 0))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=timeout):
                    return True
            except OSError:
                return False
        if ex := probe.get("exec"):
            argv, cwd, env = self._command(c, ex.get("command") or [])
            try:
                res = subprocess.run(
                    argv,
                    cwd=cwd,
                    env={**os.environ, **env},
                    timeout=timeout,
                    check=False,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                )
            except (OSError, subprocess.TimeoutExpired):
                return False
            return res.returncode == 0
        return True  # grpc probes: not supported by the stand-in, counted as passing

    # ------------------------------------------------------------ processes
    def _image(self, c: Container) -> Image:
        ref = c.spec.get("image", "")
        image = self.standin.images.get(ref)
        if image is None:
            raise PodConfigError(
                "ErrImagePull",
                f"stand-in: image {ref!r} is not in the stand-in's image map "
                f"(known: {', '.join(sorted(self.standin.images)) or 'none'})",
            )
        return image

    def _termination_file(self, c: Container) -> Path:
        return self.dir / "termination" / c.name

    def _paths(self, c: Container, image: Image) -> dict[str, Path]:
        paths: dict[str, Path] = {image.path: image.root}
        for m in c.spec.get("volumeMounts") or []:
            if m["name"] not in self.mounts:
                raise PodConfigError(
                    "CreateContainerConfigError",
                    f"container {c.name}: volumeMount {m['name']!r} names no volume of the pod",
                )
            local = self.mounts[m["name"]] / m.get("subPath", "")
            paths[m["mountPath"]] = local
        tm = c.spec.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        paths[tm] = self._termination_file(c)
        return paths

    def _command(self, c: Container, argv: list[str]) -> tuple[list[str], Path, dict[str, str]]:
        """(argv, cwd, env) of a container or of an exec probe in it, all rewritten."""
        image = self._image(c)
        paths = self._paths(c, image)
        rewrite = make_rewriter(paths, self.ports, self.standin.service_addresses(self.namespace))
        env = self._env(c, image, rewrite)
        argv = [rewrite(expand_vars(a, env)) for a in argv]
        workdir = c.spec.get("workingDir") or image.workdir or image.path
        cwd = Path(rewrite(workdir))
        if not any(cwd.is_relative_to(p) for p in paths.values()):
            # a directory of the image the stand-in has no tree for: an empty one
            cwd = self.dir / "rootfs" / workdir.lstrip("/")
        cwd.mkdir(parents=True, exist_ok=True)
        return argv, cwd, env

    def _env(self, c: Container, image: Image, rewrite: Callable[[str], str]) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        env: dict[str, str] = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOSTNAME": self.pod_name,
        }
        env.update({k: rewrite(v) for k, v in image.env.items()})
        for src in c.spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if ref := src.get("configMapRef"):
                data = self._config(c, "configmaps", ref["name"], ref.get("optional", False))
            elif ref := src.get("secretRef"):
                data = self._config(c, "secrets", ref["name"], ref.get("optional", False))
            else:
                continue
            env.update({prefix + k: rewrite(v) for k, v in data.items()})
        for e in c.spec.get("env") or []:
            if "valueFrom" in e:
                value = self._value_from(c, e["name"], e["valueFrom"])
                if value is None:
                    continue
            else:
                value = expand_vars(e.get("value", ""), env)
            env[e["name"]] = rewrite(value)
        own = [int(p["containerPort"]) for p in c.spec.get("ports") or []]
        if own:
            env["PORT"] = str(self.ports[own[0]])
            env["HOST"] = "127.0.0.1"
        return env

    def _config(self, c: Container, kind: str, name: str, optional: bool) -> dict[str, str]:
        try:
            obj = self.api.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except ApiError as e:
            if e.status == 404 and optional:
                return {}
            raise PodConfigError(
                "CreateContainerConfigError",
                f"container {c.name}: {kind[:-1]} {name!r} not found",
            ) from None
        data = dict(obj.get("data") or {})
        if kind == "secrets":
            return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
        return data

    def _value_from(self, c: Container, name: str, src: dict[str, Any]) -> str | None:
        if ref := src.get("fieldRef"):
            return self._field(ref["fieldPath"])
        for key, kind in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
            if ref := src.get(key):
                data = self._config(c, kind, ref["name"], ref.get("optional", False))
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise PodConfigError(
                        "CreateContainerConfigError",
                        f"container {c.name}: env {name}: key {ref['key']!r} "
                        f"not in {kind[:-1]} {ref['name']!r}",
                    )
                return data[ref["key"]]
        return None  # resourceFieldRef: not supported by the stand-in

    def _field(self, path: str) -> str:
        meta = self.pod["metadata"]
        simple: dict[str, str] = {
            "metadata.name": self.pod_name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.standin.node_name,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        if path in simple:
            return simple[path]
        if m := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        return ""

    def _start(self, c: Container) -> None:
        try:
            image = self._image(c)
            argv = list(c.spec.get("command") or image.command)
            argv += list(c.spec.get("args") or ([] if c.spec.get("command") else image.args))
            if not argv:
                raise PodConfigError(
                    "CreateContainerError", f"container {c.name}: no command, args or image cmd"
                )
            argv, cwd, env = self._command(c, argv)
            tm = self._termination_file(c)
            tm.parent.mkdir(parents=True, exist_ok=True)
            tm.write_bytes(b"")
            c.proc = Managed(
                f"{self.namespace}/{self.pod_name}/{c.name}",
                argv,
                log_path=self.dir / "logs" / f"{c.name}.log",
                cwd=cwd,
                env=env,
            )
        except PodConfigError as e:
            c.state = {"waiting": {"reason": e.reason, "message": str(e)}}
            c.next_start = time.monotonic() + 2.0
            return
        except OSError as e:  # exec failed: kubelet's StartError
            c.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": f"stand-in: exec failed: {e}",
                    "startedAt": now_rfc3339(),
                    "finishedAt": now_rfc3339(),
                }
            }
            if self.restart_policy == "Never":
                c.done = True
            else:
                self._back_off(c)
            return
        log.info("%s/%s %s: started pid %d: %s", *self._id(c), c.proc.pid, argv)
        c.state = {"running": {"startedAt": now_rfc3339(), "_t": time.monotonic()}}
        c.probe_ok = c.probe_fail = c.live_fail = 0
        c.next_probe = 0.0

    def _finish(self, c: Container) -> int:
        """Record a container's exit (state terminated with code and message)."""
        assert c.proc is not None
        code = _exit_code(c.proc.proc.returncode)
        c.proc.stop()  # closes its log
        c.ready = False
        message = self._termination_message(c, code)
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.state.get("running", {}).get("startedAt", now_rfc3339()),
            "finishedAt": now_rfc3339(),
            "containerID": f"standin://{c.proc.pid}",
        }
        if code > 128:
            terminated["signal"] = code - 128
        if message:
            terminated["message"] = message
        c.state = {"terminated": terminated}
        log.info("%s/%s %s: exited %d", *self._id(c), code)
        return code

    def _termination_message(self, c: Container, code: int) -> str:
        """The terminationMessagePath file (at most 4096 bytes, as kubelet), or the log
        tail when the policy is FallbackToLogsOnError and the file is empty."""
        try:
            data = self._termination_file(c).read_bytes()[:TERMINATION_MESSAGE_MAX]
        except OSError:
            data = b""
        text = data.decode("utf-8", "replace")
        if (
            not text
            and code != 0
            and c.spec.get("terminationMessagePolicy") == ("FallbackToLogsOnError")
        ):
            assert c.proc is not None
            text = tail(c.proc.log_path, FALLBACK_LOG_LINES)[-TERMINATION_MESSAGE_MAX:]
        return text

    def _all_waiting(self, reason: str, message: str) -> None:
        for c in self.inits + self.mains:
            c.state = {"waiting": {"reason": reason, "message": message}}

    def _grace(self) -> float:
        grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        meta_grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if meta_grace is not None:
            grace = meta_grace
        # stand-in: never more than 5 s
        return min(GRACE_CAP, float(grace))

    def _stop_processes(self, grace: float | None = None) -> None:
        """SIGTERM every running container, SIGKILL what is left after grace.

        A container is its own session, so its process group (id = the PID of the
        process the stand-in started) holds what it forked, like a container's cgroup;
        the group is signalled only while that process is not yet reaped, so the id is
        still ours.
        """
        procs = [c.proc for c in self.inits + self.mains if c.proc is not None]
        alive = [p for p in procs if p.alive()]
        for p in alive:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + (self._grace() if grace is None else grace)
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.proc.wait(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.alive():
                _signal_group(p.pid, signal.SIGKILL)
            p.stop(timeout=2.0)  # reaps it; closes the log

    def _terminate(self) -> None:
        """The pod is being deleted: out of the endpoints first, then the processes."""
        self.terminating = True
        for c in self.mains:
            c.ready = False
        self.standin.changed()
        if not self.gone.is_set():
            self._write_status()
        self._stop_processes()
        for c in self.inits + self.mains:
            if c.proc is not None and "running" in c.state:
                self._finish(c)

    def _confirm_deletion(self) -> None:
        """As the kubelet: remove the pod object once its processes are gone."""
        self._stop_processes(grace=0.0)
        if self.gone.is_set() or self.standin.stopping:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}"
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        for _attempt in range(5):
            try:
                self.api.request("DELETE", path, body)
                return
            except ApiError as e:
                if e.status in (404, 409):
                    return
                log.warning("delete %s: %s", path, e)
            except OSError as e:
                log.warning("delete %s: %s", path, e)
            time.sleep(1.0)

    # ------------------------------------------------------------ volumes
    def _prepare_volumes(self) -> None:
        for vol in self.pod["spec"].get("volumes") or []:
            local = self.dir / "volumes" / vol["name"]
            local.mkdir(parents=True, exist_ok=True)
            if "configMap" in vol:
                src = vol["configMap"]
                self._write_keys(local, "configmaps", src["name"], src)
            elif "secret" in vol:
                src = vol["secret"]
                self._write_keys(local, "secrets", src["secretName"], src)
            elif "projected" in vol:
                for source in vol["projected"].get("sources") or []:
                    if cm := source.get("configMap"):
                        self._write_keys(local, "configmaps", cm["name"], cm)
                    elif sec := source.get("secret"):
                        self._write_keys(local, "secrets", sec["name"], sec)
                    elif dapi := source.get("downwardAPI"):
                        self._write_downward(local, dapi)
                    elif tok := source.get("serviceAccountToken"):
                        self._write_token(local, tok)
            elif "downwardAPI" in vol:
                self._write_downward(local, vol["downwardAPI"])
            elif not {"emptyDir", "hostPath"} & set(vol):
                kinds = sorted(set(vol) - {"name"})
                raise PodConfigError(
                    "CreateContainerConfigError",
                    f"stand-in: volume {vol['name']!r}: type {kinds} is not supported "
                    "(emptyDir, configMap, secret, projected, downwardAPI are)",
                )
            # hostPath: a private directory (the stand-in never touches host paths)
            self.mounts[vol["name"]] = local

    def _write_keys(self, local: Path, kind: str, name: str, src: dict[str, Any]) -> None:
        optional = bool(src.get("optional", False))
        try:
            obj = self.api.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except ApiError as e:
            if e.status == 404 and optional:
                return
            if e.status == 404:
                raise PodConfigError(
                    "ContainerCreating",
                    f'MountVolume.SetUp failed: {kind[:-1]} "{name}" not found',
                ) from None
            raise
        data: dict[str, bytes] = {
            k: v.encode() if kind == "configmaps" else base64.b64decode(v)
            for k, v in (obj.get("data") or {}).items()
        }
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        items = src.get("items")
        wanted = [(i["key"], i["path"], i.get("mode")) for i in items] if items else None
        if wanted is None:
            wanted = [(k, k, None) for k in data]
        mode = src.get("defaultMode", 0o644)
        for key, rel, item_mode in wanted:
            if key not in data:
                if optional:
                    continue
                raise PodConfigError(
                    "ContainerCreating",
                    f'MountVolume.SetUp failed: key "{key}" not in {kind[:-1]} "{name}"',
                )
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data[key])
            dest.chmod(item_mode if item_mode is not None else mode)

    def _write_downward(self, local: Path, src: dict[str, Any]) -> None:
        for item in src.get("items") or []:
            if ref := item.get("fieldRef"):
                dest = local / item["path"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                path = ref["fieldPath"]
                if path in ("metadata.labels", "metadata.annotations"):
                    values = self.pod["metadata"].get(path.split(".")[1]) or {}
                    text = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
                else:
                    text = self._field(path)
                dest.write_text(text)

    def _write_token(self, local: Path, src: dict[str, Any]) -> None:
        sa = self.pod["spec"].get("serviceAccountName", "default")
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [src["audience"]] if src.get("audience") else [],
                "expirationSeconds": int(src.get("expirationSeconds", 3607)),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod_name,
                    "uid": self.uid,
                },
            },
        }
        try:
            res = self.api.request(
                "POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{sa}/token", body
            )
        except (ApiError, OSError) as e:
            raise PodConfigError(
                "ContainerCreating", f"stand-in: token of serviceaccount {sa!r}: {e}"
            ) from None
        (local / src.get("path", "token")).write_text(res["status"]["token"])

    # ------------------------------------------------------------ status
    def _condition(self, kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = self._transitions.get(kind)
        if prev is None or prev[0] != status:
            self._transitions[kind] = (status, now_rfc3339())
        cond = {"type": kind, "status": status, "lastTransitionTime": self._transitions[kind][1]}
        if reason and not ok:
            cond["reason"] = reason
        return cond

    def status(self) -> dict[str, Any]:
        ready = self.ready
        conditions = [
            self._condition("PodReadyToStartContainers", True),
            self._condition("Initialized", self.initialized, "ContainersNotInitialized"),
            self._condition("Ready", ready, "ContainersNotReady"),
            self._condition("ContainersReady", ready, "ContainersNotReady"),
            self._condition("PodScheduled", True),
        ]

        def clean(c: Container) -> dict[str, Any]:
            s = c.status()
            if "running" in s["state"]:
                s["state"] = {"running": {"startedAt": s["state"]["running"]["startedAt"]}}
            return s

        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "containerStatuses": [clean(c) for c in self.mains],
            "qosClass": (self.pod.get("status") or {}).get("qosClass", "BestEffort"),
        }
        if self.inits:
            status["initContainerStatuses"] = [clean(c) for c in self.inits]
        if self.pod_reason:
            status["reason"], status["message"] = self.pod_reason, self.pod_message
        return status

    def _write_status(self) -> None:
        if self.gone.is_set() or self.standin.stopping:
            return
        status = self.status()
        text = json.dumps(status, sort_keys=True)
        if text == self._written:
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}/status"
        for _attempt in range(3):
            try:
                # the uid makes it a precondition: never the status of a namesake pod
                self.api.merge_patch(path, {"metadata": {"uid": self.uid}, "status": status})
                self._written = text
                return
            except ApiError as e:
                if e.status in (404, 409):
                    self.vanish()
                    return
                log.warning("status %s: %s", path, e)
            except OSError as e:
                log.warning("status %s: %s", path, e)
            time.sleep(0.5)
