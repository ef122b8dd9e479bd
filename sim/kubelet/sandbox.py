"""The container a gpuplan pod's process runs in: a private mount namespace with the pod's files in place.

Run as ``python -P -m gpuplan.sim.kubelet.sandbox PLAN.json`` by ``gpuplan.sim.kubelet.processes``; it sets
the sandbox up and then ``execve``s the container's command, so the process the kubelet watches is the
command itself. Nothing of this is written to the host's filesystem:

1. a new user and mount namespace (``unshare(CLONE_NEWUSER | CLONE_NEWNS)``, mapping the caller to root as
   ``unshare --map-root-user`` does; a root caller without user namespaces keeps just the mount namespace),
   every mount private, and the process dies with its parent (``PR_SET_PDEATHSIG``);
2. a new root: a tmpfs holding every top-level directory of the host bound recursively (the interpreter,
   the installed package, ``/proc``, ``/dev`` ...), except ``/tmp`` and ``/run``, which start empty as in a
   container image (but for the interpreter's and the package's own folders when they live there, bound at
   the same place), and the pod's directory (token, CA, volumes) bound at ``/.kubelet``;
3. ``chroot`` into it, then every mount of the plan bound at its target: the service account at
   ``/var/run/secrets/kubernetes.io/serviceaccount``, each volume at its ``mountPath``. A target below a
   host directory (``/etc/gpuplan``) gets that directory replaced by a tmpfs into which its entries are
   bound back, so the new mount point is created in memory, never on the host;
4. ``chdir`` to the working directory and ``execve`` the command with exactly the plan's environment.

A failure before the exec is printed to stderr and ends the process with 128, as a container runtime's
start error does. Linux only (the simulator's processes need it).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
START_ERROR = 128
STAGE = "/.kubelet"
KEPT = "/.kubelet-kept"
EMPTY_AT_START = ("tmp", "run")

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            None,
        ),
        f"mount {source or fstype} on {target}",
    )


def bind(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND | MS_REC)


def enter_namespaces() -> None:
    """A user + mount namespace (root inside), or only a mount namespace for a root caller."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    else:
        _check(_libc.unshare(CLONE_NEWNS), "unshare the mount namespace")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def build_root(root: str, pod_dir: str) -> None:
    """The tmpfs root with the host's top-level directories bound in and the pod's directory staged."""
    mount("tmpfs", root, "tmpfs", 0)
    for entry in sorted(os.listdir("/")):
        host, inside = f"/{entry}", f"{root}/{entry}"
        if os.path.islink(host):
            os.symlink(os.readlink(host), inside)
        elif os.path.isdir(host):
            os.mkdir(inside)
            if entry in EMPTY_AT_START:
                os.chmod(inside, 0o1777 if entry == "tmp" else 0o755)
                continue
            try:
                bind(host, inside)
            except SandboxError:
                continue  # what cannot be bound is simply not in the container
    os.mkdir(root + STAGE)
    bind(pod_dir, root + STAGE)


def stage_kept(root: str, paths: list[str], mounts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Stage each host path the command needs (``interpreter_paths``) that the container's root would hide
    (under ``/tmp`` or ``/run``, which start empty, or under a volume's mount path, an emptyDir on /tmp):
    bound under ``/.kubelet-kept`` now, while the host's path is reachable, and put back at its own place
    by ``restore_kept`` once the volumes are mounted. (staged path, path) pairs."""
    targets = [os.path.normpath(str(entry["target"])) for entry in mounts]
    staged: list[tuple[str, str]] = []
    for path in sorted(paths, key=len):
        top = "/" + path.strip("/").split("/", 1)[0]
        hidden = top.strip("/") in EMPTY_AT_START or any(_under(path, target) for target in targets)
        if not hidden or not os.path.isdir(path) or any(_under(path, kept) for _, kept in staged):
            continue
        place = f"{KEPT}/{len(staged)}"
        os.makedirs(root + place)
        bind(path, root + place)
        staged.append((place, path))
    return staged


def restore_kept(staged: list[tuple[str, str]]) -> None:
    for place, path in staged:
        make_mount_point(path, True)
        bind(place, path)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def make_mount_point(target: str, is_dir: bool) -> None:
    """Create ``target`` (inside the new root) without writing to a host directory."""
    missing: list[str] = []
    path = os.path.realpath(target)
    while not os.path.lexists(path):
        missing.append(os.path.basename(path))
        path = os.path.dirname(path)
    if missing and os.stat(path).st_dev != os.stat("/").st_dev:
        shadow(path)
    for index, name in enumerate(reversed(missing)):
        path = os.path.join(path, name)
        last = index == len(missing) - 1
        if last and not is_dir:
            Path(path).touch()
        else:
            os.mkdir(path)


def shadow(directory: str) -> None:
    """Replace a host directory by a tmpfs holding its entries bound back in (writable in memory only)."""
    keep = f"{STAGE}/.shadow{abs(hash(directory))}"
    os.mkdir(keep)
    bind(directory, keep)
    mount("tmpfs", directory, "tmpfs", 0)
    for entry in os.listdir(keep):
        source, inside = f"{keep}/{entry}", f"{directory}/{entry}"
        if os.path.islink(source):
            os.symlink(os.readlink(source), inside)
            continue
        if stat.S_ISDIR(os.lstat(source).st_mode):
            os.mkdir(inside)
        else:
            Path(inside).touch()
        bind(source, inside)


def place_mounts(mounts: list[dict[str, Any]]) -> None:
    for entry in mounts:
        source = f"{STAGE}/{entry['source']}"
        make_mount_point(entry["target"], os.path.isdir(source))
        bind(source, os.path.realpath(entry["target"]))


def run(plan: dict[str, Any]) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    enter_namespaces()
    root = plan["root"]
    build_root(root, plan["pod_dir"])
    staged = stage_kept(root, plan.get("keep") or [], plan["mounts"])
    os.chroot(root)
    os.chdir("/")
    place_mounts(plan["mounts"])
    restore_kept(staged)
    workdir = plan.get("workdir") or "/"
    if not os.path.isdir(workdir):
        make_mount_point(workdir, True)
    os.chdir(workdir)
    argv = plan["argv"]
    os.execve(argv[0], argv, plan["env"])


def probe() -> None:
    """What ``available`` runs in a child: the namespaces and one tmpfs mount, then exit 0."""
    enter_namespaces()
    mount("tmpfs", "/tmp", "tmpfs", 0)


@functools.cache
def available() -> str | None:
    """None when this host can run sandboxes, else why not (no user or mount namespaces: an unprivileged
    container, a kernel with them off). Tried once, in a child process, since entering namespaces cannot be
    undone."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux mount namespaces, not {sys.platform}"
    child = subprocess.run(
        [sys.executable, "-P", "-m", "gpuplan.sim.kubelet.sandbox", "--probe"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return None if child.returncode == 0 else " ".join(child.stderr.split())[-300:] or "the probe failed"


def main() -> None:
    if sys.argv[1:] == ["--probe"]:
        try:
            probe()
        except (OSError, SandboxError) as exc:
            print(f"cannot make a sandbox here: {exc}", file=sys.stderr, flush=True)
            os._exit(START_ERROR)
        return
    plan = json.loads(Path(sys.argv[1]).read_text())
    try:
        run(plan)
    except (OSError, SandboxError) as exc:
        print(f"failed to start container process: {exc}", file=sys.stderr, flush=True)
        os._exit(START_ERROR)


if __name__ == "__main__":
    main()
