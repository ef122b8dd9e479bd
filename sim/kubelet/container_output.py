"""What each simulated container prints, by the program it runs: the lines ``kubectl logs`` shows.

A container's program is its pod's role for the main container (``images.identify``: device plugin, GFD,
DCGM exporter, driver, toolkit, validator, mig-manager) and, for init containers and sidecars, what
``checks.init_kind`` tells (the validator's driver/toolkit/cuda/plugin checks, driver-manager,
config-manager); anything else prints the ``echo`` lines of its shell script. Each program has *start* lines
(printed when the container starts), *ready* lines (once its outcome is Ready: the plugin registered, the
exporter listening), and prints the outcome's message (what the rules say the container reports: a wait, or
the error it crash-loops on) in its own log format; *exit* lines end a completed run.

The lines are modelled on what the real components print at start, in their log formats: klog for
NVIDIA/k8s-device-plugin (``cmd/nvidia-device-plugin/main.go``, ``internal/plugin/server.go``) and GFD
(``cmd/gpu-feature-discovery/main.go``), slog for NVIDIA/dcgm-exporter 4.x (``pkg/cmd/app.go``: ``level=INFO
msg="Starting dcgm-exporter" Version=...``), logrus for the container toolkit, validator and mig-manager
(NVIDIA/gpu-operator ``validator/main.go``), and the plain script output of the driver container
(NVIDIA/gpu-driver-container ``nvidia-driver``). Pure; called by ``gpuplan.sim.kubelet.output_writer``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpuplan.sim.kubelet import checks, images, nvidia_smi
from gpuplan.sim.kubelet.images import Obj, Role
from gpuplan.sim.kubelet.logs import Head
from gpuplan.sim.kubelet.state import NodeGpuState

KUBELET_BACKOFF = "back-off "  # the kubelet's CrashLoopBackOff message, not the container's


@dataclass(frozen=True)
class Context:
    """What a container's output may depend on."""

    pod: Obj
    container: Obj
    state: NodeGpuState
    now: datetime

    @property
    def tag(self) -> str:
        return images.parse_image(str(self.container.get("image", ""))).tag


def program(pod: Obj, container: Obj) -> str:
    """The program ``container`` of ``pod`` runs (a Role value, ``validation-<kind>``, or ``shell``)."""
    main = images.main_container(pod)
    if main is not None and main.get("name") == container.get("name"):
        role = images.identify(pod)
        return str(role) if role is not Role.OTHER else "shell"
    kind = checks.init_kind(container)
    if kind in checks.VALIDATION_COMPONENTS:
        return f"validation-{kind}"
    if kind in ("driver-manager", "config-manager"):
        return kind
    return "shell"


# -- log formats --------------------------------------------------------------------------------------------
# A line is (head, body): the head renders the time-dependent start of the line when it is read (the log
# store keeps the time once per line), the body is the rest, shared by every pod printing the same words.

Line = tuple[Head | None, str]


def _klog_head(severity: str) -> Head:
    return lambda when: f"{severity}{when:%m%d %H:%M:%S.%f}       1 "


_KLOG_HEADS = {"I": _klog_head("I"), "E": _klog_head("E"), "W": _klog_head("W")}


def _logrus_head(when: datetime) -> str:
    return f'time="{when:%Y-%m-%dT%H:%M:%SZ}" '


def _slog_head(when: datetime) -> str:
    return "time=" + when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z "


def klog(ctx: Context, where: str, message: str, severity: str = "I") -> Line:
    """``I1201 16:31:01.354371       1 main.go:235] message`` (klog's header, thread 1)."""
    return _KLOG_HEADS[severity], f"{where}] {message}"


def logrus(ctx: Context, message: str, level: str = "info") -> Line:
    quoted = f'"{message}"' if re.search(r"[\s\"=]", message) else message
    return _logrus_head, f"level={level} msg={quoted}"


def slog(ctx: Context, message: str, level: str = "INFO", **attrs: str) -> Line:
    extra = "".join(f" {k}={v}" for k, v in attrs.items())
    return _slog_head, f'level={level} msg="{message}"{extra}'


def plain(lines: list[str]) -> list[Line]:
    return [(None, line) for line in lines]


# -- per program ---------------------------------------------------------------------------------------------


def _device_plugin_start(ctx: Context) -> list[Line]:
    return [
        klog(ctx, "main.go:235", f'"Starting NVIDIA Device Plugin" version="{ctx.tag}"'),
        klog(ctx, "main.go:238", "Starting FS watcher for /var/lib/kubelet/device-plugins"),
        klog(ctx, "main.go:245", "Starting OS watcher."),
        klog(ctx, "main.go:260", "Starting Plugins."),
        klog(ctx, "main.go:317", "Loading configuration."),
        klog(ctx, "main.go:342", "Updating config with default resource matching patterns."),
        klog(ctx, "main.go:356", "Retrieving plugins."),
    ]


def _device_plugin_ready(ctx: Context) -> list[Line]:
    resource, socket = "nvidia.com/gpu", "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
    return [
        klog(ctx, "server.go:195", f"Starting GRPC server for '{resource}'"),
        klog(ctx, "server.go:139", f"Starting to serve '{resource}' on {socket}"),
        klog(ctx, "server.go:146", f"Registered device plugin for '{resource}' with Kubelet"),
    ]


def _mps_daemon_start(ctx: Context) -> list[Line]:
    return [
        klog(ctx, "main.go:78", f'"NVIDIA MPS Control Daemon" version="{ctx.tag}"'),
        klog(ctx, "main.go:99", "Starting OS watcher."),
        klog(ctx, "main.go:114", "Starting Daemons."),
        klog(ctx, "main.go:163", "Loading configuration."),
        klog(ctx, "main.go:200", "Retrieving MPS daemons."),
    ]


def _gfd_start(ctx: Context) -> list[Line]:
    lines = [
        klog(ctx, "main.go:163", "Starting OS watcher."),
        klog(ctx, "main.go:168", "Loading configuration."),
    ]
    if checks.has_nvml(ctx.pod, ctx.state):
        lines += [
            klog(ctx, "factory.go:48", "Detected NVML platform: found NVML library"),
            klog(
                ctx, "factory.go:48", "Detected non-Tegra platform: /sys/devices/soc0/family file not found"
            ),
        ]
    return [*lines, klog(ctx, "main.go:210", "Start running")]


def _gfd_ready(ctx: Context) -> list[Line]:
    output = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    return [
        klog(ctx, "main.go:274", "Creating Labels"),
        klog(ctx, "output.go:82", f"Writing labels to output file {output}"),
        klog(ctx, "main.go:283", "Sleeping for 60000000000"),
    ]


def _exporter_version(ctx: Context) -> str:
    match = re.match(r"^(\d+\.\d+\.\d+-\d+\.\d+\.\d+)", ctx.tag)
    return match.group(1) if match else ctx.tag


def _dcgm_exporter_start(ctx: Context) -> list[Line]:
    return [slog(ctx, "Starting dcgm-exporter", Version=_exporter_version(ctx))]


def _dcgm_exporter_ready(ctx: Context) -> list[Line]:
    collectors = images.env_value(ctx.container, "DCGM_EXPORTER_COLLECTORS") or (
        "/etc/dcgm-exporter/default-counters.csv"
    )
    # the rules' message for a Ready exporter ("Starting webserver on :9400") follows these
    return [
        slog(ctx, "DCGM successfully initialized!"),
        slog(ctx, "Collecting DCP Metrics"),
        slog(ctx, f"Falling back to metric file '{collectors}'"),
        slog(ctx, "Initializing system entities of type 'GPU'"),
        slog(ctx, "Pipeline starting"),
    ]


def _dcgm_start(ctx: Context) -> list[Line]:
    return plain([f"Started host engine version {ctx.tag.split('-')[0]} using port number: 5555"])


def _driver_version(ctx: Context) -> str:
    return ctx.tag.split("-")[0]


def _driver_start(ctx: Context) -> list[Line]:
    version, kernel = _driver_version(ctx), ctx.state.node.kernel
    return plain(
        [
            "DRIVER_ARCH is x86_64",
            f"Creating directory NVIDIA-Linux-x86_64-{version}",
            "Verifying archive integrity... OK",
            f"Uncompressing NVIDIA Accelerated Graphics Driver for Linux-x86_64 {version}",
            "",
            "========== NVIDIA Software Installer ==========",
            "",
            f"Starting installation of NVIDIA driver version {version} for Linux kernel version {kernel}",
            "",
            "Stopping NVIDIA persistence daemon...",
            "Unloading NVIDIA driver kernel modules...",
            "Unmounting NVIDIA driver rootfs...",
            "Checking NVIDIA driver packages...",
            "Updating the package cache...",
            "Resolving Linux kernel version...",
        ]
    )


def _driver_ready(ctx: Context) -> list[Line]:
    kernel = ctx.state.node.kernel
    return plain(
        [
            f"Proceeding with Linux kernel version {kernel}",
            "Installing Linux kernel headers...",
            "Installing Linux kernel module files...",
            "Generating Linux kernel version string...",
            "Compiling NVIDIA driver kernel modules...",
            "Relinking NVIDIA driver kernel modules...",
            f"Building NVIDIA driver package nvidia-modules-{kernel}...",
            "Installing NVIDIA driver kernel modules...",
            "Loading ipmi and i2c_core kernel modules...",
            "Loading NVIDIA driver kernel modules...",
            "+ modprobe nvidia",
            "+ modprobe nvidia-uvm",
            "+ modprobe nvidia-modeset",
            "Starting NVIDIA persistence daemon...",
            "Mounting NVIDIA driver rootfs...",
        ]
    )  # then the rules' message: "Done, now waiting for signal (...)"


def _toolkit_start(ctx: Context) -> list[Line]:
    return [
        logrus(ctx, "Parsing arguments"),
        logrus(ctx, "Starting nvidia-toolkit"),
        logrus(ctx, "Verifying Flags"),
        logrus(ctx, "Initializing"),
        logrus(ctx, "Installing NVIDIA container toolkit to '/usr/local/nvidia/toolkit'"),
    ]


def _toolkit_ready(ctx: Context) -> list[Line]:
    return [
        logrus(ctx, "Setting up runtime"),
        logrus(ctx, "Starting 'setup' for containerd"),
        logrus(ctx, "Loading config from /runtime/config-dir/config.toml"),
        logrus(ctx, "Sending SIGHUP signal to containerd"),
        logrus(ctx, "Successfully signaled containerd"),
        logrus(ctx, "Completed 'setup' for containerd"),
    ]  # then the rules' message: "Waiting for signal (...)"


def _mig_manager_start(ctx: Context) -> list[Line]:
    return [logrus(ctx, "Starting to watch for changes to the 'nvidia.com/mig.config' label")]


def _config_manager_start(ctx: Context) -> list[Line]:
    label = "nvidia.com/device-plugin.config"
    return [klog(ctx, "main.go:246", f"Waiting for change to '{label}' label")]


def _driver_manager_start(ctx: Context) -> list[Line]:
    return plain(
        [
            "Getting current value of the 'nvidia.com/gpu.deploy.operator-validator' node label",
            "Current value of 'nvidia.com/gpu.deploy.operator-validator=true'",
            "Auto eviction of GPU pods on node is disabled by the upgrade policy",
        ]
    )


def _smi_lines(ctx: Context, command: str) -> list[Line]:
    result = nvidia_smi.run([], ctx.state, ctx.now)
    return plain([f"running command {command}", *result.stdout.rstrip("\n").split("\n")])


def _validation_exit(kind: str) -> Callable[[Context], list[Line]]:
    def lines(ctx: Context) -> list[Line]:
        if kind == "driver":
            command = (
                "chroot with args [/host nvidia-smi]"
                if ctx.state.host_driver
                else ("chroot with args [/run/nvidia/driver nvidia-smi]")
            )
            return _smi_lines(ctx, command)
        if kind == "toolkit":
            return _smi_lines(ctx, "nvidia-smi")
        if kind == "cuda":
            return [logrus(ctx, "cuda workload validation is successful")]
        return [logrus(ctx, "device-plugin workload validation is successful")]

    return lines


def echo_lines(container: Obj) -> list[str]:
    """What the ``echo`` commands of a ``sh -c`` script print before it waits (loops print theirs while
    they wait, through the outcome's message)."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    script = words[-1] if len(words) >= 2 and words[-2] == "-c" else ""
    if not script or re.match(r"^\s*(until|while)\b", script):
        return []
    printed = []
    for command in re.split(r"[;&|\n]+", script):
        try:
            parts = shlex.split(command)
        except ValueError:
            continue
        if parts and parts[0] == "echo":
            printed.append(" ".join(p for p in parts[1:] if p not in ("-n", "-e")))
    return printed


def _shell_start(ctx: Context) -> list[Line]:
    return plain(echo_lines(ctx.container))


def _nothing(ctx: Context) -> list[Line]:
    return []


@dataclass(frozen=True)
class Program:
    start: Callable[[Context], list[Line]] = _nothing
    ready: Callable[[Context], list[Line]] = _nothing
    exit: Callable[[Context], list[Line]] = _nothing
    say: Callable[[Context, str, bool], Line] = lambda ctx, text, error: (None, text)


def _klog_say(where: str) -> Callable[[Context, str, bool], Line]:
    return lambda ctx, text, error: klog(ctx, where, text, "E" if error else "I")


def _logrus_say(ctx: Context, text: str, error: bool) -> Line:
    return logrus(ctx, text, "error" if error else "info")


def _slog_say(ctx: Context, text: str, error: bool) -> Line:
    return slog(ctx, text, "ERROR" if error else "INFO")


PROGRAMS: dict[str, Program] = {
    Role.DEVICE_PLUGIN: Program(_device_plugin_start, _device_plugin_ready, say=_klog_say("main.go:173")),
    Role.GFD: Program(_gfd_start, _gfd_ready, say=_klog_say("main.go:116")),
    Role.DCGM_EXPORTER: Program(_dcgm_exporter_start, _dcgm_exporter_ready, say=_slog_say),
    Role.DCGM: Program(_dcgm_start),
    Role.DRIVER: Program(_driver_start, _driver_ready),
    Role.TOOLKIT: Program(_toolkit_start, _toolkit_ready, say=_logrus_say),
    Role.VALIDATOR: Program(_shell_start),
    Role.MIG_MANAGER: Program(_mig_manager_start, say=_logrus_say),
    Role.MPS_CONTROL_DAEMON: Program(_mps_daemon_start, say=_klog_say("daemon.go:84")),
    "config-manager": Program(_config_manager_start, say=_klog_say("main.go:255")),
    "driver-manager": Program(_driver_manager_start),
    "shell": Program(_shell_start),
    **{
        f"validation-{kind}": Program(exit=_validation_exit(kind), say=_logrus_say)
        for kind in checks.VALIDATION_COMPONENTS
    },
}


def program_of(pod: Obj, container: Obj) -> Program:
    return PROGRAMS.get(program(pod, container), PROGRAMS["shell"])


def failure_text(message: str) -> str:
    """What a crashing container prints last: the rules' message (one log line per line of it), or, for an
    image fault (whose message is the kubelet's back-off), the process's plain exit."""
    if message.startswith(KUBELET_BACKOFF):
        return "fatal error: the process exited with status 1"
    return message
