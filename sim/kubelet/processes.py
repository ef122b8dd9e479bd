"""Pods of gpuplan's own image really run their command: a local process in a sandbox, as a container would.

When the main container of a pod whose image's repository ends in ``gpuplan`` (``gpuplan:<version>``, the
image ``gpuplan drift cronjob`` renders and deploy/Dockerfile builds) is to start, the kubelet runs its
``command`` + ``args`` (the image's ``ENTRYPOINT ["gpuplan"]`` / ``CMD ["--help"]`` where the pod gives
none) with this interpreter: ``gpuplan ...`` and ``python -m gpuplan ...`` become ``python -P -m gpuplan
...`` (as ``gpuplan.context.self_command`` runs gpuplan), ``python`` is this interpreter, anything else is
run as found on the image's PATH. The process runs in ``gpuplan.sim.kubelet.sandbox``: its own mount
namespace and root, where

- ``/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`` hold a token from
  ``issue_token(namespace, serviceAccountName, pod)`` (bound to the pod), the simulator's CA and the pod's
  namespace (unless the pod sets ``automountServiceAccountToken: false``);
- the configMap, secret and emptyDir volumes are files at their ``mountPath`` (``items`` and ``subPath``
  honoured), bound from a per-pod temporary directory (an emptyDir lives as long as the pod);
- the environment is the image's (``PATH``, ``HOME``, ``LANG``, unbuffered Python that writes no bytecode),
  ``HOSTNAME``, the ``kubernetes`` Service's ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``
  (the address the runner was told to ``serve``: the simulator's 127.0.0.1 and port, or the real API
  server's endpoint, since no kube-proxy routes the Service's ClusterIP here), then the container's
  ``envFrom`` and ``env`` (values, ``configMapKeyRef``, ``secretKeyRef``, ``fieldRef``);
  a reference to a missing ConfigMap, Secret or key keeps the container from starting
  (``CreateContainerConfigError``), as the kubelet does;
- the working directory is ``workingDir``, else the image's ``/tmp``.

Its stdout and stderr go line by line into the kubelet's log store (``logs.ContainerLogs``); its exit code
(128 + the signal for a killed one) becomes the container's terminated state (``completion``). Nothing
blocks the loop thread: the process is spawned with ``subprocess.Popen``, its output read by threads, and
its exit handed back to the loop with ``Loop.call_later``. A deleted pod's process gets SIGTERM, then
SIGKILL after the pod's grace period; ``close`` (the simulator's stop) ends every process, waiting for each.

Owned by ``gpuplan.sim.kubelet.runtime.KubeletRuntime`` (``processes``); ``gpuplan.sim.cluster`` gives it
the API's address, the CA and the token issuer once the server runs; ``gpuplan.sim.agent.NodeAgent``
gives them before its kubelets handle any pod.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers.cache import Key, Obj, resource_type
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.kubelet import images
from gpuplan.sim.kubelet.logs import ContainerLogs
from gpuplan.sim.kubelet.outcomes import PodOutcome, exited

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_WORKDIR = "/tmp"  # deploy/Dockerfile's WORKDIR
IMAGE_ENTRYPOINT = ["gpuplan"]
IMAGE_CMD = ["--help"]
CLOSE_TIMEOUT = 5.0
TokenIssuer = Callable[[str, str, Obj], str]
"""(namespace, service account, pod) -> a token bound to the pod, as the kubelet asks TokenRequest for."""


class ContainerConfigError(Exception):
    """What keeps the kubelet from creating the container (a missing ConfigMap, Secret or key)."""


@dataclass
class _Run:
    key: Key
    uid: str
    run: int
    container: str
    process: subprocess.Popen[bytes]
    stopping: bool = False
    readers: list[threading.Thread] = field(default_factory=list)


class ProcessRunner:
    """The real processes of the pods on every simulated node (started and watched from the loop)."""

    def __init__(self, loop: Loop, logs: ContainerLogs, on_exit: Callable[[Key], None]) -> None:
        """``on_exit(key)``: called on the loop thread when a pod's process ended."""
        self.loop = loop
        self.logs = logs
        self.on_exit = on_exit
        self.api_host = "127.0.0.1"
        self.api_port: int | None = None
        self.ca_pem: bytes = b""
        self.issue_token: TokenIssuer = lambda namespace, account, pod: ""
        self._runs: dict[str, _Run] = {}  # pod uid -> its current process
        self._exits: dict[tuple[str, int], int] = {}  # (pod uid, run) -> exit code
        self._dirs: dict[str, Path] = {}  # pod uid -> its directory (volumes, token, roots)
        self._lock = threading.Lock()
        self._closed = False

    def serve(self, *, host: str, port: int, ca_pem: bytes, issue_token: TokenIssuer) -> None:
        """Where processes find the API (an address its serving certificate names, reachable from the
        processes' network), its CA, and who issues their tokens."""
        self.api_host, self.api_port, self.ca_pem, self.issue_token = host, port, ca_pem, issue_token

    # -- the runtime's questions ---------------------------------------------------------------------
    def outcome(self, key: Key, pod: Obj, run: int, outcome: PodOutcome) -> PodOutcome:
        """``outcome`` of a gpuplan pod's rules, with its process: started when the container is to run,
        the exit once it ended."""
        if outcome.phase != "Running" or outcome.waiting_reason or outcome.crash_looping:
            return outcome
        uid = str(pod["metadata"].get("uid", ""))
        code = self._exits.get((uid, run))
        if code is not None:
            return exited(outcome.init_done, code)
        current = self._runs.get(uid)
        if current is not None and current.run == run:
            return outcome
        try:
            self._spawn(key, pod, run)
        except ContainerConfigError as exc:
            return PodOutcome("Pending", False, outcome.init_done, "CreateContainerConfigError", str(exc))
        return outcome

    def running(self) -> list[str]:
        """Uids of the pods whose process is alive (tests wait on it)."""
        with self._lock:
            return sorted(uid for uid, r in self._runs.items() if r.process.poll() is None)

    def pid(self, uid: str) -> int | None:
        """The process id of the pod's current process (what a test checks is gone)."""
        with self._lock:
            run = self._runs.get(uid)
        return run.process.pid if run is not None else None

    def stop(self, uid: str, grace_seconds: float) -> None:
        """The pod went away: SIGTERM its process, SIGKILL after ``grace_seconds``, then drop its files."""
        with self._lock:
            run = self._runs.pop(uid, None)
            directory = self._dirs.pop(uid, None)
        self._exits = {k: v for k, v in self._exits.items() if k[0] != uid}
        if run is None:
            _remove_dir(directory)
            return
        run.stopping = True
        threading.Thread(
            target=_terminate,
            args=(run.process, grace_seconds, directory),
            name="gpuplan-sim-kill",
            daemon=True,
        ).start()

    def close(self) -> None:
        """The simulator stops: every process ends (SIGTERM, then SIGKILL), and its files go."""
        with self._lock:
            self._closed = True
            runs, self._runs = list(self._runs.values()), {}
            directories, self._dirs = list(self._dirs.values()), {}
        for run in runs:
            run.stopping = True
            _signal(run.process, signal.SIGTERM)
        for run in runs:
            _terminate(run.process, CLOSE_TIMEOUT, None)
        for directory in directories:
            _remove_dir(directory)

    # -- starting ------------------------------------------------------------------------------------
    def _spawn(self, key: Key, pod: Obj, run: int) -> None:
        container = images.main_container(pod) or {}
        uid = str(pod["metadata"].get("uid", ""))
        env = self._environment(pod, container)
        directory = self._pod_dir(pod)
        root = directory / f"root-{run}"
        root.mkdir()
        plan = {
            "root": str(root),
            "pod_dir": str(directory),
            "mounts": self._mounts(pod, container, directory),
            "workdir": container.get("workingDir") or IMAGE_WORKDIR,
            "argv": command_line(container),
            "env": env,
            "keep": interpreter_paths(),
        }
        plan_file = directory / f"plan-{run}.json"
        plan_file.write_text(json.dumps(plan))
        name = str(container.get("name", ""))
        if self.logs.has(uid, name):
            self.logs.restart(uid, name)
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "gpuplan.sim.kubelet.sandbox", str(plan_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={"PATH": IMAGE_PATH},
        )
        entry = _Run(key, uid, run, name, process)
        with self._lock:
            if self._closed:
                _terminate(process, 0, None)
                return
            self._runs[uid] = entry
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            reader = threading.Thread(
                target=self._read, args=(entry, stream), name="gpuplan-sim-log", daemon=True
            )
            reader.start()
            entry.readers.append(reader)
        threading.Thread(target=self._wait, args=(entry,), name="gpuplan-sim-wait", daemon=True).start()

    def _read(self, entry: _Run, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            if not entry.stopping:
                self.logs.write(entry.uid, entry.container, raw.decode(errors="replace").rstrip("\n"))
        stream.close()

    def _wait(self, entry: _Run) -> None:
        code = entry.process.wait()
        for reader in entry.readers:
            reader.join()
        if entry.stopping:
            return
        self.logs.finish(entry.uid, entry.container)
        exit_code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number
        self.loop.call_later(0, lambda: self._exited(entry, exit_code))

    def _exited(self, entry: _Run, code: int) -> None:
        with self._lock:
            if self._runs.get(entry.uid) is not entry:
                return
            del self._runs[entry.uid]
        self._exits[(entry.uid, entry.run)] = code
        self.on_exit(entry.key)

    # -- the container's world -----------------------------------------------------------------------
    def _pod_dir(self, pod: Obj) -> Path:
        uid = str(pod["metadata"].get("uid", ""))
        with self._lock:
            directory = self._dirs.get(uid)
        if directory is not None:
            return directory
        directory = Path(tempfile.mkdtemp(prefix=f"gpuplan-pod-{pod['metadata']['name']}-"))
        spec = pod.get("spec") or {}
        if spec.get("automountServiceAccountToken") is not False:
            namespace = str(pod["metadata"].get("namespace", "default"))
            account = str(spec.get("serviceAccountName") or "default")
            files = {
                "token": self.issue_token(namespace, account, pod).encode(),
                "ca.crt": self.ca_pem,
                "namespace": namespace.encode(),
            }
            _write_files(directory / "serviceaccount", files)
        for volume in spec.get("volumes") or []:
            files_of = self._volume_files(pod, volume)
            if files_of is not None:
                _write_files(directory / "volumes" / volume["name"], files_of)
        with self._lock:
            self._dirs[uid] = directory
        return directory

    def _volume_files(self, pod: Obj, volume: Obj) -> dict[str, bytes] | None:
        """The files of a configMap, secret or emptyDir volume (None for other kinds: not mounted)."""
        namespace = str(pod["metadata"].get("namespace", "default"))
        if "emptyDir" in volume:
            return {}
        for kind, name_field in (("configMap", "name"), ("secret", "secretName")):
            source = volume.get(kind)
            if source is None:
                continue
            obj = self._get(kind, namespace, str(source.get(name_field, "")))
            if obj is None:
                if source.get("optional"):
                    return {}
                raise ContainerConfigError(f'{kind.lower()} "{source.get(name_field)}" not found')
            data = _data(kind, obj)
            items = source.get("items")
            if not items:
                return data
            return {item["path"]: data[item["key"]] for item in items if item.get("key") in data}
        return None

    def _mounts(self, pod: Obj, container: Obj, directory: Path) -> list[dict[str, str]]:
        mounts = []
        if (directory / "serviceaccount").is_dir():
            mounts.append({"source": "serviceaccount", "target": SERVICE_ACCOUNT_DIR})
        for mount in container.get("volumeMounts") or []:
            source = Path("volumes") / mount["name"]
            if not (directory / source).is_dir():
                continue
            if mount.get("subPath"):
                source = source / mount["subPath"]
            mounts.append({"source": str(source), "target": mount["mountPath"]})
        return mounts

    def _environment(self, pod: Obj, container: Obj) -> dict[str, str]:
        env = {
            "PATH": IMAGE_PATH,
            "HOSTNAME": str(pod["metadata"]["name"]),
            "HOME": "/",  # deploy/Dockerfile's USER 65532 has no passwd entry: its home is /
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if self.api_port is not None:
            env |= {
                "KUBERNETES_SERVICE_HOST": self.api_host,
                "KUBERNETES_SERVICE_PORT": str(self.api_port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(self.api_port),
                "KUBERNETES_PORT": f"tcp://{self.api_host}:{self.api_port}",
            }
        namespace = str(pod["metadata"].get("namespace", "default"))
        for source in container.get("envFrom") or []:
            env |= self._env_from(namespace, source)
        for entry in container.get("env") or []:
            value = self._env_value(pod, namespace, entry)
            if value is not None:
                env[entry["name"]] = value
        return env

    def _env_from(self, namespace: str, source: Obj) -> dict[str, str]:
        for kind, field_name in (("configMap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(field_name)
            if ref is None:
                continue
            obj = self._get(kind, namespace, str(ref.get("name", "")))
            if obj is None:
                if ref.get("optional"):
                    return {}
                raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
            prefix = str(source.get("prefix") or "")
            return {prefix + k: v.decode(errors="replace") for k, v in _data(kind, obj).items()}
        return {}

    def _env_value(self, pod: Obj, namespace: str, entry: Obj) -> str | None:
        if "value" in entry:
            return str(entry["value"])
        source = entry.get("valueFrom") or {}
        if "fieldRef" in source:
            return field_value(pod, str(source["fieldRef"].get("fieldPath", "")))
        for kind, field_name, shown in (
            ("configMap", "configMapKeyRef", "ConfigMap"),
            ("secret", "secretKeyRef", "Secret"),
        ):
            ref = source.get(field_name)
            if ref is None:
                continue
            obj = self._get(kind, namespace, str(ref.get("name", "")))
            data = _data(kind, obj) if obj is not None else {}
            if ref.get("key") in data:
                return data[ref["key"]].decode(errors="replace")
            if ref.get("optional"):
                return None
            if obj is None:
                raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
            raise ContainerConfigError(
                f"couldn't find key {ref.get('key')} in {shown} {namespace}/{ref.get('name')}"
            )
        return ""

    def _get(self, kind: str, namespace: str, name: str) -> Obj | None:
        rt = resource_type(self.loop.store.registry, "v1", "ConfigMap" if kind == "configMap" else "Secret")
        try:
            found: Obj = self.loop.store.get(rt, namespace, name)
        except store_mod.ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return found


def command_line(container: Obj) -> list[str]:
    """The argv the container runs here: gpuplan and python resolved to this interpreter."""
    command = list(container.get("command") or [])
    args = container.get("args")
    if not command:
        command, args = list(IMAGE_ENTRYPOINT), (IMAGE_CMD if args is None else args)
    words = [str(w) for w in command + list(args or [])]
    gpuplan = [sys.executable, "-P", "-m", "gpuplan"]  # as gpuplan.context.self_command runs gpuplan
    program = os.path.basename(words[0])
    if program == "gpuplan":
        return gpuplan + words[1:]
    if program.startswith("python"):
        if words[1:3] == ["-m", "gpuplan"]:
            return gpuplan + words[3:]
        return [sys.executable, *words[1:]]
    found = shutil.which(words[0], path=IMAGE_PATH) if "/" not in words[0] else words[0]
    return [found or words[0], *words[1:]]


def field_value(pod: Obj, path: str) -> str:
    """The downward API's ``fieldRef`` values."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": (pod.get("status") or {}).get("podIP"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix, values in (
        ("metadata.labels", meta.get("labels")),
        ("metadata.annotations", meta.get("annotations")),
    ):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((values or {}).get(path[len(prefix) + 2 : -2], ""))
    return ""


def _data(kind: str, obj: Obj) -> dict[str, bytes]:
    if kind == "secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    files = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    files |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    return files


def _write_files(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate(process: subprocess.Popen[bytes], grace_seconds: float, directory: Path | None) -> None:
    """SIGTERM, then SIGKILL once ``grace_seconds`` passed; the pod's files go after it exited."""
    _signal(process, signal.SIGTERM)
    try:
        process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        process.wait()
    _remove_dir(directory)


def _remove_dir(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def interpreter_paths() -> list[str]:
    """What the sandbox must keep visible for this interpreter to run gpuplan: its environment, its base
    installation and the folder holding the gpuplan package (an editable install's source tree). Any of
    them may live under /tmp, which a container's root starts without (a CI checkout in /tmp, say)."""
    import gpuplan

    package = Path(gpuplan.__file__).resolve().parent
    found = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, package.parent)}
    return sorted(found)
