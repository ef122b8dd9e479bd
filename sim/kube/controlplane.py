"""The real control plane's four processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

They run inside the private network namespace (``netns``), so their well-known ports never collide with
anything on the machine and the API server may bind every address there. Identity and access are a real
cluster's: the API server authenticates bearer tokens from a static token file (the cluster's admin in
``system:masters``, the controller manager and the scheduler under the user names the bootstrap RBAC policy
binds, ``system:kube-controller-manager`` and ``system:kube-scheduler``, and the simulated nodes' agent),
authorises with ``Node,RBAC`` as kubeadm configures it, and signs service-account tokens with a key made for
this cluster. Everything secret lives in a 0700 folder removed at :meth:`ControlPlane.stop`.

Flags follow kubeadm's static pod manifests (``cmd/kubeadm/app/phases/controlplane/manifests.go``) where they
apply to a one-machine cluster; the few differences are said where they are made.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.sim.api import certs
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.kube.sizing import Sizing

# Ports inside the private namespace (the programs' defaults).
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
API_PORT = 6443
# The API server's address for in-cluster clients (the `kubernetes` Service's endpoint): a pod-network
# address, since endpoints may not be loopback addresses (pkg/apis/discovery/validation).
ADVERTISE_ADDRESS = "198.18.0.1"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the first address of the range: the `kubernetes` Service's ClusterIP
NODES_USER = "gpuplan-sim-nodes"
ADMIN_USER = "gpuplan-admin"
START_TIMEOUT = 180.0
_PR_SET_PDEATHSIG = 1
STOP_GRACE = 10.0


class ControlPlaneError(GpuplanError):
    """A control-plane program failed to start or to become ready."""


@dataclass
class Credentials:
    """The bearer tokens of the cluster's identities, made fresh for each cluster."""

    admin: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    nodes: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    controller_manager: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    scheduler: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def token_file(self) -> str:
        """kube-apiserver's --token-auth-file: token,user,uid,"group,..." per line."""
        rows = [
            (self.admin, ADMIN_USER, "system:masters"),
            # The simulated nodes create the scenario's objects and act for every node; a kubelet's own
            # identity (system:node:NAME) could act for one node only.
            (self.nodes, NODES_USER, "system:masters"),
            (self.controller_manager, "system:kube-controller-manager", ""),
            (self.scheduler, "system:kube-scheduler", ""),
        ]
        return "".join(f'{token},{user},{user},"{groups}"\n' for token, user, groups in rows)


class ControlPlane:
    """etcd and the three Kubernetes programs, started in order and stopped in reverse."""

    def __init__(
        self, binaries: dict[str, Path], *, workdir: Path | None = None, sizing: Sizing | None = None
    ) -> None:
        """``sizing``: the settings for the cluster's number of nodes (a lab's by default)."""
        self.binaries = binaries
        self.sizing = sizing or Sizing(nodes=1)
        self.credentials = Credentials()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpuplan-kube-"))
        os.chmod(self.workdir, 0o700)
        self.logs = self.workdir / "logs"
        self.serving = certs.generate(
            ips=("127.0.0.1", ADVERTISE_ADDRESS, SERVICE_IP),
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def url(self) -> str:
        """The API server's URL inside the private namespace."""
        return f"https://127.0.0.1:{API_PORT}"

    @property
    def ca_pem(self) -> bytes:
        return self.serving.ca_pem

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> ControlPlane:
        deadline = time.monotonic() + timeout
        try:
            files = self._write_files()
            self._spawn("etcd", self._etcd_args())
            self._wait("etcd", deadline, lambda: _http_ok(f"http://127.0.0.1:{ETCD_CLIENT_PORT}/health"))
            self._spawn("kube-apiserver", self._apiserver_args(files))
            self._wait("kube-apiserver", deadline, lambda: self._api_ok("/readyz"))
            self._spawn("kube-controller-manager", self._controller_manager_args(files))
            self._spawn("kube-scheduler", self._scheduler_args(files))
            # Pods cannot be created in a namespace before its `default` ServiceAccount exists (the
            # ServiceAccount admission plugin), which the controller manager makes: a cluster is ready
            # for a workload once `default` has one, as kubeadm's and kind's waits have it.
            self._wait(
                "kube-controller-manager",
                deadline,
                lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Each program in reverse order, one after the other: the API server shuts down cleanly only while
        etcd still answers it (stopped together, it waits out its etcd timeouts)."""
        for _name, proc in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._processes.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The end of a program's log, for an error message."""
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- files ---------------------------------------------------------------------------------------
    def _write_files(self) -> dict[str, Path]:
        pki = self.workdir / "pki"
        pki.mkdir(mode=0o700, exist_ok=True)
        self.logs.mkdir(mode=0o700, exist_ok=True)
        signer = certs.new_signing_key()
        files = {
            "ca": _write(pki / "ca.crt", self.serving.ca_pem),
            "cert": _write(pki / "apiserver.crt", self.serving.cert_pem),
            "key": _write(pki / "apiserver.key", self.serving.key_pem),
            "sa_key": _write(pki / "sa.key", certs.private_pem(signer)),
            "sa_pub": _write(pki / "sa.pub", certs.public_pem(signer)),
            "tokens": _write(pki / "tokens.csv", self.credentials.token_file().encode()),
        }
        for name, token in (
            ("controller-manager", self.credentials.controller_manager),
            ("scheduler", self.credentials.scheduler),
        ):
            files[name] = write_kubeconfig(self.workdir / f"{name}.kubeconfig", self.url, token, self.ca_pem)
        return files

    # -- the programs' flags -------------------------------------------------------------------------
    def _etcd_args(self) -> list[str]:
        peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
        client = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
        return [
            "--name=gpuplan",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=gpuplan={peer}",
            # A throwaway cluster on one machine: no fsync per write (a crash loses the cluster anyway).
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self, files: dict[str, Path]) -> list[str]:
        return [
            f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
            f"--secure-port={API_PORT}",
            "--bind-address=0.0.0.0",  # every address of the private namespace, its pod network too
            f"--advertise-address={ADVERTISE_ADDRESS}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--tls-cert-file={files['cert']}",
            f"--tls-private-key-file={files['key']}",
            f"--client-ca-file={files['ca']}",
            f"--token-auth-file={files['tokens']}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",  # the NVIDIA driver, toolkit and device plugin run privileged
            f"--service-account-key-file={files['sa_pub']}",
            f"--service-account-signing-key-file={files['sa_key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--profiling=false",
        ]

    def _controller_manager_args(self, files: dict[str, Path]) -> list[str]:
        return [
            *_component_args(files["controller-manager"]),
            f"--service-account-private-key-file={files['sa_key']}",
            f"--root-ca-file={files['ca']}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=gpuplan-sim",
            *self.sizing.controller_manager_args(),
        ]

    def _scheduler_args(self, files: dict[str, Path]) -> list[str]:
        return [*_component_args(files["scheduler"]), *self.sizing.scheduler_args()]

    # -- processes -----------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "ab")
        with log:
            proc = subprocess.Popen(
                [str(self.binaries[name]), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        self._processes.append((name, proc))

    def _wait(self, name: str, deadline: float, ready: Any) -> None:
        proc = dict(self._processes)[name]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with status {proc.returncode} while starting",
                    detail=self.log_tail(name),
                    hint=f"the whole log is {self.logs / (name + '.log')}",
                )
            if ready():
                return
            time.sleep(0.1)  # another process: there is no event to wait on
        raise ControlPlaneError(
            f"{name} was not ready in time",
            detail=self.log_tail(name),
            hint="see its log in the cluster folder",
        )

    def _api_ok(self, path: str) -> bool:
        return _http_ok(self.url + path, token=self.credentials.admin, ca_pem=self.ca_pem)


def _component_args(kubeconfig: Path) -> list[str]:
    """What the controller manager and the scheduler share: one identity for the API server and for
    checking their own callers, loopback serving, and one instance (no leader election to wait out)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--profiling=false",
    ]


def _die_with_parent() -> None:
    """In the child before exec: a SIGKILLed cluster process takes its control plane with it, instead of
    leaving etcd and the API server running with nobody to stop them."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _write(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _http_ok(url: str, *, token: str | None = None, ca_pem: bytes | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cadata=ca_pem.decode()) if ca_pem else None
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as answer:
            body = answer.read()
    except (OSError, urllib.error.URLError):
        return False
    if url.endswith("/health"):
        with contextlib.suppress(ValueError):
            return bool(json.loads(body).get("health") == "true")
        return False
    return True
