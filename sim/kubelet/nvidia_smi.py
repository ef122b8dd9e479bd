"""What ``nvidia-smi`` prints in a simulated container: the node's GPUs as the node's driver reports them.

Derived from the node's :class:`~gpuplan.sim.kubelet.state.NodeGpuState` (GPU models, UUIDs, bus IDs, the
loaded driver) and the GPU catalog (``gpuplan.sim.catalog``: names, memory); the CUDA version is the newest
one the driver's branch supports (``gfd.cuda_version``, NVML's cudaDriverVersion). Forms covered: the default
table, ``-L`` and ``--query-gpu=...`` with ``--format=csv[,noheader][,nounits]``. With no working driver it
fails as the real one does (exit 9, "couldn't communicate with the NVIDIA driver"). Layout after the
580-branch ``nvidia-smi``; pure functions, called by ``gpuplan.sim.kubelet.exec`` and the validator's
container output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpuplan.sim.kubelet import mig
from gpuplan.sim.kubelet.gfd import cuda_version
from gpuplan.sim.kubelet.state import GpuDevice, NodeGpuState

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n"
)
NO_DRIVER_EXIT = 9
BAD_FIELD_EXIT = 2
_RULE = "+-----------------------------------------------------------------------------------------+"
_GPU_RULE = "+-----------------------------------------+------------------------+----------------------+"
_GPU_SEP = "|=========================================+========================+======================|"
IDLE_MEMORY_MIB = 1  # what an idle GPU without processes shows as used


@dataclass(frozen=True)
class SmiResult:
    stdout: str
    stderr: str = ""
    exit_code: int = 0


def run(args: list[str], state: NodeGpuState, now: datetime) -> SmiResult:
    """``nvidia-smi ARGS`` on ``state``'s node."""
    if not state.driver_works() or state.driver_version is None:
        return SmiResult(NO_DRIVER, "", NO_DRIVER_EXIT)
    if "-L" in args or "--list-gpus" in args:
        return SmiResult(
            "".join(
                f"GPU {g.index}: {g.model.name} (UUID: {g.uuid})\n{mig.smi_lines(state, g)}"
                for g in state.gpus
            )
        )
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is not None:
        csv_format = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
        return _query(query, csv_format, state)
    return SmiResult(table(state, now))


def table(state: NodeGpuState, now: datetime) -> str:
    """The default ``nvidia-smi`` table (GPUs, then an empty process list)."""
    driver = state.driver_version or ""
    major, minor = cuda_version(driver)
    lines = [
        now.strftime("%a %b %e %H:%M:%S %Y"),
        _RULE,
        f"| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {f'{major}.{minor}':<9}|",
        _GPU_RULE,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        _GPU_SEP,
    ]
    for gpu in state.gpus:
        lines += _gpu_rows(gpu, state)
    lines += [
        "",
        _RULE,
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        _RULE,
    ]
    return "\n".join(lines) + "\n"


def _gpu_rows(gpu: GpuDevice, state: NodeGpuState) -> list[str]:
    model = gpu.model
    fault = state.gpu_faults.get(gpu.index)
    temp = int(fault.temperature) if fault is not None and fault.temperature is not None else 34
    util = int(fault.utilization) if fault is not None and fault.utilization is not None else 0
    mig = "Disabled" if model.mig_capable else "N/A"
    fan = "N/A" if model.hbm else "30%"
    memory = f"{IDLE_MEMORY_MIB}MiB / {model.memory_mib:>6}MiB"
    power = f"{model.idle_power_w}W / {model.power_limit_w:>4}W"
    return [
        f"|{gpu.index:>4}  {model.name[:31]:<31}{'On':>3} |{gpu.pci_bus_id:>19} {'Off':>3} |{'N/A':>21} |",
        f"|{fan:>4}  {temp:>3}C    P8 {power:>23} |{memory:>23} |{util:>7}%{'Default':>13} |",
        f"|{'':41}|{'':24}|{mig:>21} |",
        _GPU_RULE,
    ]


_FIELDS: dict[str, tuple[str, Callable[[GpuDevice, NodeGpuState], str]]] = {
    "name": ("name", lambda g, s: g.model.name),
    "gpu_name": ("name", lambda g, s: g.model.name),
    "uuid": ("uuid", lambda g, s: g.uuid),
    "gpu_uuid": ("uuid", lambda g, s: g.uuid),
    "index": ("index", lambda g, s: str(g.index)),
    "driver_version": ("driver_version", lambda g, s: s.driver_version or ""),
    "pci.bus_id": ("pci.bus_id", lambda g, s: g.pci_bus_id),
    "memory.total": ("memory.total [MiB]", lambda g, s: f"{g.model.memory_mib} MiB"),
    "memory.used": ("memory.used [MiB]", lambda g, s: f"{IDLE_MEMORY_MIB} MiB"),
    "memory.free": ("memory.free [MiB]", lambda g, s: f"{g.model.memory_mib - IDLE_MEMORY_MIB} MiB"),
    "compute_cap": ("compute_cap", lambda g, s: f"{g.model.cc_major}.{g.model.cc_minor}"),
    "count": ("count", lambda g, s: str(len(s.gpus))),
}


def _query(query: str, csv_format: str, state: NodeGpuState) -> SmiResult:
    fields = [f.strip() for f in query.split(",") if f.strip()]
    unknown = [f for f in fields if f not in _FIELDS]
    if unknown:
        message = (
            f'Field "{unknown[0]}" is not a valid field to query.\n\n'
            "Run 'nvidia-smi --help-query-gpu' for a list of valid fields.\n"
        )
        return SmiResult(message, "", BAD_FIELD_EXIT)
    if "csv" not in csv_format.split(","):
        return SmiResult('"--format" option must be specified with the query.\n', "", BAD_FIELD_EXIT)
    options = set(csv_format.split(","))
    rows = []
    if "noheader" not in options:
        rows.append(", ".join(_FIELDS[f][0] for f in fields))
    for gpu in state.gpus:
        values = [_FIELDS[f][1](gpu, state) for f in fields]
        if "nounits" in options:
            values = [v.removesuffix(" MiB") for v in values]
        rows.append(", ".join(values))
    return SmiResult("".join(row + "\n" for row in rows))
