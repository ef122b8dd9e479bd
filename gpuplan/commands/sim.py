"""``gpuplan sim start|stop|status``: run the simulated GPU cluster in the foreground or in the background.

``start`` writes a kubeconfig for the simulator (mode 0600) and, next to it, a record
``<kubeconfig>.sim.json``
(pid, url, scenario, log path; mode 0600) that ``stop`` and ``status`` find it by. In the foreground it runs
until Ctrl-C or SIGTERM and then removes both files; ``--detach`` starts the same command as a background
process in its own session (output to ``<kubeconfig>.sim.log``), waits until the API answers and returns.
``stop`` ends the process of the record (SIGTERM, then SIGKILL after a grace period) and removes the
kubeconfig and the record; ``status`` says whether it runs (exit 0) or not (exit 1).

The simulator is imported inside the commands, so ``gpuplan --help`` never loads it (design §4).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import yaml

from gpuplan import errors
from gpuplan.commands.group import SuggestingGroup
from gpuplan.commands.snapshot import command as snapshot_command
from gpuplan.context import self_command

START_TIMEOUT = 60.0
KUBE_START_TIMEOUT = 300.0  # etcd and three Go programs, then every node registered through the API
STOP_GRACE = 10.0
# a real control plane stops its node agent (the loop may be in the middle of a burst of writes), then four
# programs one after the other; a SIGKILL would leave its folder of secrets behind in the temp directory
KUBE_STOP_GRACE = 60.0
KUBECONFIG_HELP = "Kubeconfig file the simulator writes (start) or was started with (stop, status)."


class SimCommandError(errors.GpuplanError):
    """``gpuplan sim`` cannot do what was asked (no such simulator, port in use, ...)."""


@click.group("sim", cls=SuggestingGroup)
def command() -> None:
    """Run the simulated GPU cluster (a real Kubernetes API with simulated GPU nodes)."""


command.add_command(snapshot_command)


class ScenarioOption(click.Option):
    """``--scenario``, whose help lists the scenario folder's files: read when the help is shown, so that
    ``gpuplan sim --help`` still loads nothing of the simulator."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from gpuplan.sim import scenarios

        names = ", ".join(scenarios.names())
        self.help = f"Built-in scenario ({names}, fleet-N for any N >= 1) or a scenario YAML file."
        return super().get_help_record(ctx)


@command.command("start")
@click.option("--scenario", cls=ScenarioOption, default="lab", show_default=True)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port on 127.0.0.1 (default: a free one)."
)
@click.option("--kubeconfig", "kubeconfig_opt", type=click.Path(dir_okay=False), help=KUBECONFIG_HELP)
@click.option("--detach", is_flag=True, help="Run in the background and return once the API answers.")
@click.option(
    "--control-plane",
    type=click.Choice(["builtin", "kube"]),
    default="builtin",
    show_default=True,
    help="builtin: the simulator's own API server and controllers. kube: a real kube-apiserver, etcd, "
    "kube-controller-manager and kube-scheduler (built by controlplane/build), the GPU nodes simulated.",
)
@click.option(
    "--kube-bin",
    type=click.Path(file_okay=False),
    help="Folder with etcd, kube-apiserver, kube-controller-manager and kube-scheduler for "
    "--control-plane kube (default: $GPUPLAN_KUBE_BIN, then controlplane/build's folder).",
)
@click.pass_context
def start(
    ctx: click.Context,
    scenario: str,
    port: int,
    kubeconfig_opt: str | None,
    detach: bool,
    control_plane: str,
    kube_bin: str | None,
) -> int:
    """Start a simulated cluster and write a kubeconfig for it."""
    path = _kubeconfig(ctx, kubeconfig_opt, allow_env=False)
    _check_can_start(path, port)
    from gpuplan.sim import scenario as scenario_mod

    scenario_mod.load_scenario(scenario)  # a bad scenario fails here, with its file:line:column
    plane = ControlPlaneChoice(control_plane, kube_bin)
    plane.check()  # missing programs fail here, before anything runs in the background
    _make_folder(path)
    if detach:
        return _start_detached(path, scenario, port, plane)
    return _run_foreground(path, scenario, port, plane)


@command.command("stop", short_help="Stop the simulator and remove its kubeconfig.")
@click.option("--kubeconfig", "kubeconfig_opt", type=click.Path(dir_okay=False), help=KUBECONFIG_HELP)
@click.pass_context
def stop(ctx: click.Context, kubeconfig_opt: str | None) -> int:
    """Stop the simulator started with this kubeconfig, and remove the kubeconfig."""
    path = _kubeconfig(ctx, kubeconfig_opt, allow_env=True)
    record = _read_record(path)
    pid = int(record["pid"])
    if _alive(pid) and _is_simulator(pid):
        _terminate(pid, KUBE_STOP_GRACE if record.get("controlPlane") == "kube" else STOP_GRACE)
        click.echo(f"Stopped the simulator (pid {pid}, scenario {record.get('scenario')}).")
    else:
        click.echo(f"The simulator (pid {pid}) was not running; removed its kubeconfig.")
    _remove_files(path)
    return errors.EXIT_OK


@command.command("status", short_help="Say whether the simulator runs (exit 0) or not (1).")
@click.option("--kubeconfig", "kubeconfig_opt", type=click.Path(dir_okay=False), help=KUBECONFIG_HELP)
@click.pass_context
def status(ctx: click.Context, kubeconfig_opt: str | None) -> int:
    """Say whether the simulator of this kubeconfig runs (exit 0) or not (exit 1)."""
    path = _kubeconfig(ctx, kubeconfig_opt, allow_env=True)
    record_path = _record_path(path)
    if not record_path.exists():
        click.echo(f"Not running: no simulator was started with {path}.")
        return errors.EXIT_ERROR
    record = _read_record(path)
    if not (_alive(int(record["pid"])) and _is_simulator(int(record["pid"]))):
        click.echo(
            f"Not running: the simulator (pid {record['pid']}) has exited; see {record.get('log', '-')}."
        )
        return errors.EXIT_ERROR
    try:
        info = (
            _kube_status(path, record)
            if record.get("controlPlane") == "kube"
            else _api_get(path, "/sim/v1/status")
        )
    except (OSError, ValueError) as exc:
        click.echo(
            f"Not running: pid {record['pid']} is alive but its API at {record['url']} does not answer "
            f"({exc})."
        )
        return errors.EXIT_ERROR
    click.echo(
        f"Running: {info['url']} (pid {record['pid']})\n  scenario: {info['scenario']}\n"
        f"  nodes: {info['nodes']}\n  uptime: {_uptime(float(info['uptimeSeconds']))}"
    )
    if record.get("controlPlane") == "kube":
        click.echo(f"  control plane: kube-apiserver {info['version']}, etcd, controller manager, scheduler")
    return errors.EXIT_OK


def _kube_status(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """What ``status`` says of a real control plane, read through its own API (it has no /sim/v1)."""
    version = _api_get(path, "/version")
    nodes = _api_get(path, "/api/v1/nodes?limit=500")
    count = len(nodes.get("items") or [])
    more = (nodes.get("metadata") or {}).get("remainingItemCount")
    return {
        "url": record["url"],
        "scenario": record.get("scenario"),
        "nodes": count + int(more or 0),
        "uptimeSeconds": max(0.0, time.time() - float(record.get("started") or time.time())),
        "version": str(version.get("gitVersion")),
    }


# -- start -------------------------------------------------------------------------------------------------
class ControlPlaneChoice:
    """``--control-plane`` and ``--kube-bin``: which cluster ``start`` runs."""

    def __init__(self, name: str, kube_bin: str | None) -> None:
        self.name = name
        self.kube_bin = kube_bin

    def check(self) -> None:
        if self.name == "kube":
            from gpuplan.sim.kube import binaries

            binaries.find(self.kube_bin)

    def argv(self) -> list[str]:
        """The options that start the same control plane in a detached process."""
        if self.name == "builtin":
            return []
        return ["--control-plane", self.name, *(["--kube-bin", self.kube_bin] if self.kube_bin else [])]

    def cluster(self, scenario: str, port: int) -> Any:
        """A Simulator, or a KubeCluster whose GPU nodes act through the real API server."""
        if self.name == "kube":
            from gpuplan.sim.kube.cluster import KubeCluster

            return KubeCluster(scenario, kube_bin=self.kube_bin, port=port)
        from gpuplan.sim.cluster import Simulator

        return Simulator(scenario, port=port)


def _run_foreground(path: Path, scenario: str, port: int, plane: ControlPlaneChoice) -> int:
    sim = plane.cluster(scenario, port)
    # SIGTERM ends the run as Ctrl-C does. The handler runs on the main thread between two bytecodes, so it
    # must take no lock: setting a threading.Event there deadlocked when the signal landed while the main
    # thread held that Event's own lock inside wait().
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            sim.start()
            sim.write_kubeconfig(path)
            log = os.environ.get("GPUPLAN_SIM_LOG", "")
            _write_record(
                path,
                {
                    "pid": os.getpid(),
                    "url": sim.url,
                    "scenario": scenario,
                    "controlPlane": plane.name,
                    **({"control": sim.control_url} if getattr(sim, "control_url", None) else {}),
                    "log": log,
                    "kubeconfig": str(path),
                    "started": time.time(),
                },
            )
            click.echo(_usage(sim.url, scenario, path, os.getpid()))
            _sleep_until_interrupted()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a repeated SIGTERM must not cut the cleanup short
            sim.stop()  # stopping is idempotent, so also safe after an interrupt half-way through start()
            _remove_own_files(path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo("Simulator stopped.")
    return errors.EXIT_OK


def _remove_own_files(path: Path) -> None:
    """Remove the kubeconfig and record this process wrote; an interrupt may have come before the record."""
    record = _record_path(path)
    if not record.exists() or _read_record(path).get("pid") == os.getpid():
        _remove_files(path)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM handler: raise KeyboardInterrupt where the main thread is, as SIGINT does."""
    raise KeyboardInterrupt(f"signal {signum}")


def _sleep_until_interrupted() -> None:
    """Block the main thread until a signal handler raises; the simulator serves from its own threads."""
    while True:
        time.sleep(3600)  # a signal interrupts the sleep and its handler raises here


def _start_detached(path: Path, scenario: str, port: int, plane: ControlPlaneChoice) -> int:
    log = path.with_name(path.name + ".sim.log")
    argv = self_command(
        "sim", "start", "--scenario", scenario, "--port", str(port), "--kubeconfig", str(path), *plane.argv()
    )
    try:
        out = open(log, "wb")
    except OSError as exc:
        raise SimCommandError(
            f"cannot write the simulator's log {log}: {exc.strerror or exc}",
            hint="pass --kubeconfig in a folder you can write",
        ) from None
    with out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "GPUPLAN_SIM_LOG": str(log)},
        )
    timeout = KUBE_START_TIMEOUT if plane.name == "kube" else START_TIMEOUT
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SimCommandError(
                "the simulator exited while starting", detail=_error_lines(log), hint=f"see {log}"
            )
        if _record_path(path).exists() and _ready(path, proc.pid):
            record = _read_record(path)
            click.echo(_usage(str(record["url"]), scenario, path, proc.pid))
            click.echo(f"Log: {log}\nStop it with: gpuplan sim stop --kubeconfig {path}")
            return errors.EXIT_OK
        time.sleep(0.1)  # polling another process: there is no event to wait on
    _terminate(proc.pid)
    raise SimCommandError(f"the simulator did not answer within {timeout:.0f}s", hint=f"see {log}")


def _ready(path: Path, pid: int) -> bool:
    try:
        if _read_record(path).get("pid") != pid:
            return False
        _api_get(path, "/version")
    except (OSError, ValueError, SimCommandError):
        return False
    return True


def _usage(url: str, scenario: str, path: Path, pid: int) -> str:
    return (
        f"Simulated cluster {scenario!r} running at {url} (pid {pid}).\n"
        f"Use it with:\n  export KUBECONFIG={path}\n  kubectl get nodes"
    )


def _check_can_start(path: Path, port: int) -> None:
    record = _record_path(path)
    if record.exists():
        pid = int(_read_record(path)["pid"])
        if _alive(pid):
            raise SimCommandError(
                f"a simulator (pid {pid}) is already running with {path}",
                hint=f"gpuplan sim stop --kubeconfig {path}",
            )
        _remove_files(path)
    elif path.exists() and not _is_sim_kubeconfig(path):
        raise SimCommandError(
            f"{path} exists and was not written by gpuplan sim; refusing to overwrite it",
            hint="pass --kubeconfig with a new path",
        )
    if port and not _port_free(port):
        raise SimCommandError(
            f"port {port} on 127.0.0.1 is already in use",
            hint="choose another --port, or omit it to use a free one",
        )


def _make_folder(path: Path) -> None:
    """Create the kubeconfig's folder: the record and the detached simulator's log are written next to it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SimCommandError(
            f"cannot create the folder {path.parent} for the kubeconfig: {exc.strerror or exc}",
            hint="pass --kubeconfig in a folder you can write",
        ) from None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# -- files -------------------------------------------------------------------------------------------------
def _kubeconfig(ctx: click.Context, option: str | None, *, allow_env: bool) -> Path:
    """The subcommand's --kubeconfig, else the global one; from $KUBECONFIG only where nothing is written."""
    if option:
        return Path(option)
    root = ctx.find_root()
    value = root.params.get("kubeconfig")
    from_env = root.get_parameter_source("kubeconfig") == click.core.ParameterSource.ENVIRONMENT
    if value and (allow_env or not from_env):
        return Path(value)
    raise errors.UsageError(
        "--kubeconfig PATH is required", hint="e.g. gpuplan sim start --kubeconfig ./sim.kubeconfig"
    )


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".sim.json")


def _write_record(path: Path, record: dict[str, Any]) -> None:
    target = _record_path(path)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(record, out, indent=2)
    os.replace(tmp, target)


def _read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(_read_small(_record_path(path)))
    except FileNotFoundError:
        raise SimCommandError(
            f"{path} is not the kubeconfig of a simulator started by gpuplan sim",
            detail=f"there is no {_record_path(path).name} next to it",
            hint="pass the --kubeconfig given to gpuplan sim start",
        ) from None
    except ValueError as exc:
        raise SimCommandError(f"{_record_path(path)} is not a gpuplan sim record: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        raise SimCommandError(f"{_record_path(path)} is not a gpuplan sim record (no pid)")
    return record


def _read_small(path: Path) -> str:
    """A kubeconfig or record this command wrote: a small regular file (a FIFO or device at the path is
    refused, not read); a missing one is FileNotFoundError, as the callers expect."""
    from gpuplan.fileio import MiB, read_text_bounded

    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    return read_text_bounded(path, limit=MiB, what="file", error=SimCommandError)


def _remove_files(path: Path) -> None:
    for target in (path, _record_path(path)):
        target.unlink(missing_ok=True)


def _is_sim_kubeconfig(path: Path) -> bool:
    try:
        config = yaml.safe_load(_read_small(path))
    except (OSError, yaml.YAMLError, errors.GpuplanError):
        return False
    return isinstance(config, dict) and config.get("current-context") == "gpuplan-sim"


# -- processes and the API ---------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    _reap(pid)
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ")[-1][:1] not in ("Z", "X")  # a zombie has already ended
    except OSError:
        return stat.parent.exists() or not Path("/proc/self").exists()


def _is_simulator(pid: int) -> bool:
    """The recorded pid still runs ``gpuplan sim start`` (not a process that reused the pid)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True  # no /proc (macOS): trust the record
    try:
        words = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"gpuplan" in b" ".join(words) and b"sim" in words and b"start" in words


def _reap(pid: int) -> None:
    """Collect our own exited child (a simulator detached from this very process, as in tests)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _terminate(pid: int, grace: float = STOP_GRACE) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)  # another process's exit has no event to wait on here
    os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _api_get(path: Path, url_path: str) -> dict[str, Any]:
    """GET ``url_path`` from the server of a gpuplan sim kubeconfig, with its token and CA."""
    config = yaml.safe_load(_read_small(path))
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    context = None
    if cluster.get("certificate-authority-data"):
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
    request = urllib.request.Request(
        cluster["server"] + url_path, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise ValueError(f"HTTP {exc.code}") from None
    return body


def _error_lines(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors_only = [line for line in lines if line.startswith("Error:") or line.startswith("  ")]
    return "\n".join(errors_only or lines[-5:])


def _uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )
