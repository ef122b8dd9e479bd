"""`gpuplan sim start --detach | status | stop` in subprocesses, with kubectl against the running
simulator."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuplan import cli
from gpuplan.commands import sim as sim_commands
from gpuplan.sim import scenarios
from gpuplan.sim.testing import Kubectl

TIMEOUT = 120
ROOT = Path(__file__).resolve().parents[2]


def running(pid: int) -> bool:
    """Alive and not a zombie (the detached simulator's parent has exited; nobody may have reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


def gpuplan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


@pytest.mark.kubectl
def test_detached_simulator_start_status_kubectl_stop(tmp_path: Path, kubectl: Kubectl) -> None:
    config = tmp_path / "sim.kubeconfig"
    started = gpuplan("sim", "start", "--scenario", "lab", "--kubeconfig", str(config), "--detach")
    assert started.returncode == 0, started.stderr
    try:
        assert f"export KUBECONFIG={config}" in started.stdout
        record = json.loads((tmp_path / "sim.kubeconfig.sim.json").read_text())
        assert record["scenario"] == "lab" and record["url"].startswith("https://127.0.0.1:")
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "sim.kubeconfig.sim.json").stat().st_mode) == 0o600

        status = gpuplan("sim", "status", "--kubeconfig", str(config))
        assert status.returncode == 0, status.stdout + status.stderr
        assert (
            "Running:" in status.stdout and "scenario: lab" in status.stdout and "nodes: 1" in status.stdout
        )

        nodes = kubectl("get", "nodes", "-o", "name", kubeconfig=config)
        assert nodes.stdout.strip() == "node/lab-node"
    finally:
        stopped = gpuplan("sim", "stop", "--kubeconfig", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert "Stopped the simulator" in stopped.stdout
    assert not config.exists() and not (tmp_path / "sim.kubeconfig.sim.json").exists()
    assert not running(record["pid"])
    after = gpuplan("sim", "status", "--kubeconfig", str(config))
    assert after.returncode == 1 and "Not running" in after.stdout


def test_port_in_use_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gpuplan("sim", "start", "--port", str(port), "--kubeconfig", str(tmp_path / "k"), "--detach")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == f"Error: port {port} on 127.0.0.1 is already in use"
    assert "Traceback" not in result.stderr


def test_bad_scenario_names_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - name: n1\n    gpu: {model: rtx-9999}\n")
    result = gpuplan("sim", "start", "--scenario", str(bad), "--kubeconfig", str(tmp_path / "k"), "--detach")
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"Error: {bad}:3:") and "rtx-9999" in result.stderr
    assert not (tmp_path / "k").exists()


def test_stop_and_status_refuse_a_kubeconfig_not_from_gpuplan_sim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "config"
    foreign.write_text("apiVersion: v1\nkind: Config\ncurrent-context: prod\n")
    assert cli.run(["sim", "stop", "--kubeconfig", str(foreign)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {foreign} is not the kubeconfig of a simulator started by gpuplan sim")
    assert cli.run(["sim", "status", "--kubeconfig", str(foreign)]) == 1
    assert "Not running" in capsys.readouterr().out
    assert cli.run(["sim", "start", "--kubeconfig", str(foreign), "--detach"]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert foreign.read_text().endswith("current-context: prod\n")


def test_kubeconfig_is_required_and_never_taken_from_the_environment_for_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "real-config"))
    assert cli.run(["sim", "start"]) == 64
    assert "Error: --kubeconfig PATH is required" in capsys.readouterr().err


def test_help_does_not_import_the_simulator() -> None:
    code = (
        "import sys; from gpuplan import cli; cli.run(['sim', '--help']); "
        "print(any(m.startswith('gpuplan.sim') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    assert out.stdout.strip().endswith("False")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_foreground_simulator_ends_on_ctrl_c_or_sigterm_and_cleans_up(tmp_path: Path, sig: int) -> None:
    config = tmp_path / "fg.kubeconfig"
    record = tmp_path / "fg.kubeconfig.sim.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuplan", "sim", "start", "--kubeconfig", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""  # printed once the API answers
        assert first.startswith("Simulated cluster 'lab' running at https://127.0.0.1:"), first
        assert json.loads(record.read_text())["pid"] == proc.pid
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Simulator stopped." in out
    assert not config.exists() and not record.exists()


def test_stop_never_kills_a_process_that_reused_the_pid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale record whose pid now belongs to another process: stop removes the files and kills nothing."""
    config = tmp_path / "stale.kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: gpuplan-sim\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "stale.kubeconfig.sim.json").write_text(
            json.dumps({"pid": other.pid, "url": "https://x", "scenario": "lab"})
        )
        assert cli.run(["sim", "status", "--kubeconfig", str(config)]) == 1
        assert cli.run(["sim", "stop", "--kubeconfig", str(config)]) == 0
        assert "was not running" in capsys.readouterr().out
        assert other.poll() is None and not config.exists()
    finally:
        other.kill()
        other.wait()


def test_sigterm_ends_the_foreground_run_where_it_lands_and_cleans_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM's handler runs on the main thread wherever that thread is, so it must raise (as Ctrl-C does)
    rather than set an Event: Event.set() inside Event.wait() on the same thread deadlocks on the Event's
    lock. Here SIGTERM arrives right after the kubeconfig is written (the handler is called as the interpreter
    would call it): the run ends there, before the usage, and still stops the simulator and removes its
    files."""
    from gpuplan.sim.cluster import Simulator

    config = tmp_path / "fg.kubeconfig"
    stopped: list[Simulator] = []
    write_kubeconfig, stop = Simulator.write_kubeconfig, Simulator.stop

    def write_then_sigterm(sim: Simulator, path: str | Path) -> Path:
        write_kubeconfig(sim, path)
        assert config.exists()
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        raise AssertionError("the SIGTERM handler returned instead of ending the run")

    def record_stop(sim: Simulator) -> None:
        stopped.append(sim)
        stop(sim)

    monkeypatch.setattr(Simulator, "write_kubeconfig", write_then_sigterm)
    monkeypatch.setattr(Simulator, "stop", record_stop)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.run(["sim", "start", "--kubeconfig", str(config)]) == 0
    out = capsys.readouterr().out
    assert "running at" not in out and out.endswith("Simulator stopped.\n")
    assert len(stopped) == 1 and not config.exists() and not (tmp_path / "fg.kubeconfig.sim.json").exists()
    assert signal.getsignal(signal.SIGTERM) == before


def test_detached_start_creates_a_missing_kubeconfig_folder(tmp_path: Path) -> None:
    config = tmp_path / "missing" / "dir" / "kc"
    started = gpuplan("sim", "start", "--kubeconfig", str(config), "--detach")
    try:
        assert started.returncode == 0, started.stderr
        assert "Traceback" not in started.stderr and "internal error" not in started.stderr
        assert config.exists() and (tmp_path / "missing" / "dir" / "kc.sim.log").exists()
        assert gpuplan("sim", "status", "--kubeconfig", str(config)).returncode == 0
    finally:
        stopped = gpuplan("sim", "stop", "--kubeconfig", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert not config.exists()


def test_a_kubeconfig_folder_that_cannot_be_made_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    for detach in (["--detach"], []):
        assert cli.run(["sim", "start", "--kubeconfig", str(blocker / "sub" / "kc"), *detach]) == 1
        err = capsys.readouterr().err
        assert err.splitlines()[0].startswith(
            f"Error: cannot create the folder {blocker / 'sub'} for the kubeconfig"
        )
        assert "  Hint: pass --kubeconfig in a folder you can write" in err and "Traceback" not in err


def test_detached_start_works_from_a_folder_with_a_gpuplan_directory(tmp_path: Path) -> None:
    """From the repository root (which holds a ``gpuplan/`` folder without the mapped planner/, providers/,
    ...) the child ``python -m gpuplan`` once imported that folder and died; a decoy package plays it here."""
    decoy = tmp_path / "gpuplan"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy gpuplan/ folder was imported')\n")
    (decoy / "__main__.py").write_text("raise SystemExit('the decoy gpuplan/ folder was run')\n")
    config = tmp_path / "kc"
    entry_point = Path(sys.executable).with_name("gpuplan")
    started = subprocess.run(
        [str(entry_point), "sim", "start", "--kubeconfig", str(config), "--detach"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "decoy" not in (tmp_path / "kc.sim.log").read_text()
    finally:
        stopped = subprocess.run(
            [str(entry_point), "sim", "stop", "--kubeconfig", str(config)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert stopped.returncode == 0, stopped.stderr


@pytest.mark.parametrize("command", ["stop", "status"])
def test_stop_and_status_refuse_a_fifo_as_kubeconfig_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A FIFO where the kubeconfig should be is refused, never read (reading one waits for a writer)."""
    fifo = tmp_path / "kc"
    os.mkfifo(fifo)
    assert cli.run(["sim", command, "--kubeconfig", str(fifo)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err
    assert out.startswith("Not running") if command == "status" else err.startswith("Error:")


def test_start_help_and_readme_list_every_builtin_scenario() -> None:
    builtins = scenarios.names()
    assert {"lab", "mixed", "upgrade4", "drifted", "gpu-operator", "gpu-operator-bare"} <= set(builtins)
    help_text = " ".join(gpuplan("sim", "start", "--help").stdout.split())
    readme = (ROOT / "README.md").read_text()
    for name in builtins:
        assert name in help_text, name
        assert f"| `{name}` |" in readme, name
    assert "fleet-N" in help_text and "| `fleet-N` |" in readme


def test_start_help_reads_the_scenario_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rack42.yaml").write_text("nodes: []\n")
    monkeypatch.setattr(scenarios, "FOLDER", tmp_path)
    result = CliRunner().invoke(sim_commands.command, ["start", "--help"])
    assert "Built-in scenario (rack42, fleet-N" in " ".join(result.output.split())
