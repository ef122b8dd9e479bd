"""What ``kubectl exec`` runs in a simulated container, and the kubelets' face for the streaming subresources.

:func:`run` plays the container's filesystem: ``nvidia-smi`` (``nvidia_smi``) where the NVIDIA container
runtime or the image puts it (every NVIDIA component's image, the CUDA samples, any pod run by an NVIDIA
runtime handler), a few shell basics (``true``, ``false``, ``echo``, ``hostname``, ``cat /etc/os-release``,
``nvidia-smi`` through ``sh -c``), and for anything else containerd's answer when the binary is missing
(``exec: "x": executable file not found in $PATH``), which reaches kubectl as an InternalError.

:class:`KubeletStreams` is what the API server's ``pods/log`` and ``pods/exec`` use: the log store (locked
for readers on other threads) and ``exec``, which runs on the loop thread through ``run_sync`` because the
node states belong to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from gpuplan.sim.kubelet import checks, images, nvidia_smi
from gpuplan.sim.kubelet.images import Obj, Role
from gpuplan.sim.kubelet.logs import ContainerLogs
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState

T = TypeVar("T")
_OS_NAMES = {"ubuntu": ("Ubuntu", "ubuntu"), "rhel": ("Red Hat Enterprise Linux", "rhel")}


@dataclass(frozen=True)
class ExecResult:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    error: str | None = None  # the runtime could not start the command


def has_nvidia_smi(pod: Obj, container: Obj, state: NodeGpuState) -> bool:
    """NVIDIA images ship it; the NVIDIA runtime mounts the host's into any container it runs."""
    main = images.main_container(pod)
    is_main = main is not None and main.get("name") == container.get("name")
    if is_main and images.identify(pod) is not Role.OTHER:
        return True
    image = images.parse_image(str(container.get("image", "")))
    if image.repository.startswith("nvidia/") or image.name in ("cuda", "cuda-sample", "gpu-operator"):
        return True
    return checks.pod_handler(pod, state) in NVIDIA_HANDLERS


def not_found(pod: Obj, container: Obj, binary: str) -> ExecResult:
    seed = f"{pod['metadata'].get('uid', '')}/{container.get('name', '')}/{binary}".encode()
    exec_id = hashlib.sha256(seed).hexdigest()
    return ExecResult(
        exit_code=126,
        error=(
            f'failed to exec in container: failed to start exec "{exec_id}": OCI runtime exec failed: exec '
            f'failed: unable to start container process: exec: "{binary}": executable file not found in '
            "$PATH: unknown"
        ),
    )


def run(pod: Obj, container: Obj, command: list[str], state: NodeGpuState, now: datetime) -> ExecResult:
    """``command`` in ``container`` of ``pod`` on ``state``'s node."""
    binary, args = command[0], command[1:]
    name = binary.rsplit("/", 1)[-1]
    if name in ("sh", "bash") and len(args) >= 2 and args[0] == "-c":
        return run(pod, container, args[1].split(), state, now) if args[1].strip() else ExecResult()
    if name == "nvidia-smi" and has_nvidia_smi(pod, container, state):
        result = nvidia_smi.run(args, state, now)
        return ExecResult(result.stdout, result.stderr, result.exit_code)
    if name == "true":
        return ExecResult()
    if name == "false":
        return ExecResult(exit_code=1)
    if name == "echo":
        return ExecResult(" ".join(args) + "\n")
    if name == "hostname":
        return ExecResult(str(pod["metadata"].get("name", "")) + "\n")
    if name == "cat" and args == ["/etc/os-release"]:
        return ExecResult(os_release(state))
    return not_found(pod, container, binary)


def os_release(state: NodeGpuState) -> str:
    """/etc/os-release of an image built on the node's OS flavour (``ubuntu24.04`` -> Ubuntu 24.04)."""
    flavour = str(getattr(state.node, "os", "ubuntu24.04"))
    family = flavour.rstrip("0123456789.")
    version = flavour[len(family) :]
    pretty, ident = _OS_NAMES.get(family, (family.capitalize(), family))
    return f'PRETTY_NAME="{pretty} {version}"\nNAME="{pretty}"\nVERSION_ID="{version}"\nID={ident}\n'


class KubeletStreams:
    """The kubelets' logs and exec, for the API server's connection threads."""

    def __init__(
        self,
        logs: ContainerLogs,
        states: dict[str, NodeGpuState],
        run_sync: Callable[[Callable[[], Any]], Any],
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        down: set[str] | None = None,
    ) -> None:
        """``states`` and ``down`` (the nodes whose kubelet is stopped) belong to the loop thread."""
        self.logs = logs
        self._states, self._run_sync, self._clock = states, run_sync, wall_clock
        self._down = down if down is not None else set()

    def reachable(self, node: str) -> bool:
        """Whether the kubelet of ``node`` answers (it runs there and the node is not down)."""
        answer: bool = self._run_sync(lambda: node in self._states and node not in self._down)
        return answer

    def exec(self, pod: dict[str, Any], container: str, command: list[str]) -> ExecResult:
        spec = pod.get("spec") or {}
        found = next(
            (
                c
                for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                if c.get("name") == container
            ),
            {"name": container},
        )

        def on_loop() -> ExecResult:
            state = self._states.get(str(spec.get("nodeName", "")))
            if state is None:
                return ExecResult(error=f'container not found ("{container}")')
            return run(pod, found, command, state, self._clock())

        result: ExecResult = self._run_sync(on_loop)
        return result
