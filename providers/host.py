"""Who this host is, so the plan can tell whether gpuplan runs on one of the cluster's nodes.

Called by the ``plan`` command (through :mod:`gpuplan.planner.observe.driver_versions`): when this host is a
node of the cluster, NVML (:func:`gpuplan.providers.nvml.read_local_host`) can tell that node's driver version
(design §5). A node is this host when its name (or ``kubernetes.io/hostname`` label) is this host's name, or
when the kubelet's ``nodeInfo.machineID`` / ``nodeInfo.systemUUID`` equal this host's ``/etc/machine-id`` /
``/sys/class/dmi/id/product_uuid`` (the files the kubelet reads them from).

Seam for tests and rehearsals, beside NVML's: when ``GPUPLAN_NVML_FAKE`` names a fake NVML description
(:func:`gpuplan.providers.fake_nvml.load_description`), its optional ``hostname``, ``machine_id`` and
``system_uuid`` keys are this host's identity instead, so a fake host can pose as a simulated node.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from gpuplan.providers.nvml import FAKE_ENV

MACHINE_ID = Path("/etc/machine-id")
SYSTEM_UUID = Path("/sys/class/dmi/id/product_uuid")


@dataclass(frozen=True)
class HostIdentity:
    """This host's name and, when readable, the ids the kubelet reports for it."""

    hostname: str
    machine_id: str | None = None
    system_uuid: str | None = None


def local_identity() -> HostIdentity:
    """This host (or the fake one ``GPUPLAN_NVML_FAKE`` describes, when it names a hostname)."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        faked = _fake_identity(Path(fake))
        if faked is not None:
            return faked
    return HostIdentity(socket.gethostname(), _read(MACHINE_ID), _read(SYSTEM_UUID))


def _fake_identity(path: Path) -> HostIdentity | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # load_description reports an unreadable description when NVML is read
    if not isinstance(data, dict) or not data.get("hostname"):
        return None
    machine, uuid = data.get("machine_id"), data.get("system_uuid")
    return HostIdentity(str(data["hostname"]), str(machine) if machine else None, str(uuid) if uuid else None)


def _read(path: Path) -> str | None:
    """A one-line id file; None when absent or unreadable (product_uuid is root-only on most hosts)."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None
