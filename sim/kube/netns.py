"""A private network namespace for the real control plane and the simulated pods.

kube-apiserver refuses to proxy to a pod whose IP is not a global unicast address ("address not allowed":
``pkg/registry/core/pod/strategy.go`` ResourceLocation), so the simulated pods cannot keep the loopback IPs
they have on the built-in control plane. They take addresses from 198.18.0.0/15 (RFC 2544's benchmarking
block, never routed on the internet) instead; to keep those addresses off the machine's real network, the
control plane and the pods live in a network namespace of their own, where the whole block is a local route
on the loopback interface (Linux's "AnyIP": any address in it can be bound without being added one by one).
Nothing outside that namespace reaches it; the API server's port is brought out by ``relay``.

:func:`enter` moves the calling thread, and so every thread and child process it starts afterwards, into a
new namespace: call it on the main thread before any other thread exists. As root it needs nothing else;
otherwise it asks for an unprivileged user namespace too (where the kernel allows them).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess

from gpuplan.errors import GpuplanError

POD_CIDR = "198.18.0.0/15"
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


class NamespaceError(GpuplanError):
    """The private network namespace could not be made."""


def enter(pod_cidr: str = POD_CIDR) -> None:
    """Unshare the network namespace, bring its loopback up and route ``pod_cidr`` to it."""
    ip = shutil.which("ip")
    if ip is None:
        raise NamespaceError(
            "the 'ip' command (iproute2) is not installed",
            hint="install iproute2: the real control plane configures its private network with it",
        )
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNET) != 0:
        first = ctypes.get_errno()
        if first != errno.EPERM or libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise NamespaceError(
                f"cannot make a private network namespace: {os.strerror(code)}",
                hint="run as root, or allow unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)",
            )
        _map_identity(uid, gid)
    for argv in (
        [ip, "link", "set", "lo", "up"],
        [ip, "route", "add", "local", pod_cidr, "dev", "lo"],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NamespaceError(
                f"{' '.join(argv[1:])} failed in the private network namespace: {done.stderr.strip()}",
                hint="the control plane needs CAP_NET_ADMIN in its own network namespace",
            )


def _map_identity(uid: int, gid: int) -> None:
    """Map this user to root inside the new user namespace, so ``ip`` may configure the namespace."""
    with open("/proc/self/setgroups", "w") as handle:
        handle.write("deny")
    with open("/proc/self/uid_map", "w") as handle:
        handle.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as handle:
        handle.write(f"0 {gid} 1")
