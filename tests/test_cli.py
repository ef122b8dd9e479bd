"""The console script's contract: --version, --help, and the exit code of usage errors."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from gpuplan import __version__, cli, errors


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_the_installed_distribution_has_the_version_the_package_states() -> None:
    """pyproject.toml takes its version from gpuplan.__version__, so the two cannot disagree."""
    from importlib import metadata

    assert metadata.version("gpuplan") == __version__


def test_help_lists_only_commands_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: gpuplan" in out
    for name in cli.COMMANDS:
        assert (f"  {name} " in out) == cli._available(name), name


@pytest.mark.parametrize("argv", [["no-such-command"], ["--no-such-option"]])
def test_usage_errors_exit_64_not_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(argv) == errors.EXIT_USAGE
    assert "Error:" in capsys.readouterr().err


def test_console_script_exits_with_contract_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "no-such-command"], capture_output=True, text=True
    )
    assert proc.returncode == 64
    assert "Traceback" not in proc.stderr


def test_help_does_not_import_heavy_libraries() -> None:
    """`gpuplan --help` must stay instant: no kubernetes client, pydantic or simulator at start-up."""
    code = (
        "import sys; from gpuplan import cli; cli.run(['--help']); "
        "print('loaded=' + ','.join(m for m in ('kubernetes', 'pydantic', 'deepdiff', 'pynvml', "
        "'gpuplan.sim') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "loaded="


def test_gpuplan_error_prints_one_error_line() -> None:
    err = errors.ConfigError(
        "unknown field 'drivr'", where="gpustack.yaml:7:3", hint="did you mean 'driver'?"
    )
    text = err.render()
    assert text.splitlines()[0] == "Error: gpustack.yaml:7:3: unknown field 'drivr'"
    assert "Hint: did you mean 'driver'?" in text


def test_group_without_subcommand_prints_help_and_exits_64(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpuplan state` alone is a usage error: the group's help, not an "Error: Usage:" line."""
    assert cli.run(["state"]) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("Usage: gpuplan state")
    assert "Error: Usage" not in err


@pytest.mark.parametrize(
    ("argv", "usage", "meant"),
    [
        (["plna"], "Usage: gpuplan ", "Did you mean 'plan'?"),
        (["drift", "reprot"], "Usage: gpuplan drift ", "Did you mean 'report'?"),
        (["state", "lsit"], "Usage: gpuplan state ", "Did you mean 'list'?"),
        (["sim", "strat"], "Usage: gpuplan sim ", "Did you mean 'start' or 'status'?"),
    ],
)
def test_a_mistyped_command_names_the_closest_ones(
    argv: list[str], usage: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(argv) == errors.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(usage)
    assert f"Error: No such command '{argv[-1]}'. {meant}" in err.splitlines()


def test_a_command_close_to_none_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["xyzzy"]) == errors.EXIT_USAGE
    assert "Error: No such command 'xyzzy'." in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    "group", [[], ["drift"], ["state"], ["sim"]], ids=["gpuplan", "drift", "state", "sim"]
)
def test_help_never_cuts_a_command_summary_short(
    group: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run([*group, "--help"]) == 0
    listing = capsys.readouterr().out.partition("\nCommands:\n")[2]  # the usage line ends in [ARGS]...
    assert listing
    assert [line for line in listing.splitlines() if line.rstrip().endswith("...")] == []


def _raising(exc: BaseException) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return fail


def test_ctrl_c_in_any_phase_exits_130_with_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not click's bare "Aborted." and exit 1; a phase that knows nothing changed says so itself."""
    (tmp_path / "gpustack.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gpuplan.planner.spec.model.read_spec_text", _raising(KeyboardInterrupt()))
    assert cli.run(["validate"]) == errors.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "Error: interrupted (Ctrl-C)\n"


def _aborted_by(cause: BaseException) -> click.Abort:
    """The Abort click.prompt raises, ``from None`` inside its handler of ``cause``."""
    try:
        try:
            raise cause
        except (KeyboardInterrupt, EOFError):
            raise click.Abort() from None
    except click.Abort as abort:
        return abort


@pytest.mark.parametrize(
    ("cause", "code", "err"),
    [
        (KeyboardInterrupt(), errors.EXIT_INTERRUPTED, "Error: interrupted (Ctrl-C)\n"),
        (EOFError(), errors.EXIT_ERROR, "Aborted.\n"),
    ],
    ids=["ctrl-c", "end-of-input"],
)
def test_a_prompt_ended_by_ctrl_c_exits_130_and_by_end_of_input_1(
    cause: BaseException,
    code: int,
    err: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """click.prompt turns both into Abort; only the cause tells them apart."""
    (tmp_path / "gpustack.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gpuplan.planner.spec.model.read_spec_text", _raising(_aborted_by(cause)))
    assert cli.run(["validate"]) == code
    assert capsys.readouterr().err == err


def test_help_lists_every_command_without_importing_one() -> None:
    """The command list comes from the CLI's own table: `gpuplan --help` imports no command module (each
    pulled in its own imports for one line of help) and no package metadata (the version is a constant)."""
    code = (
        "import sys; from gpuplan import cli; cli.run(['--help']); "
        "print('loaded=' + ','.join(sorted(m for m in sys.modules "
        "if m.startswith('gpuplan.commands.') or m == 'importlib.metadata')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "loaded=gpuplan.commands.group"
    assert all(f"  {name} " in proc.stdout for name in cli.COMMANDS)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_only_what_they_print_with(flag: str) -> None:
    """Logging (with the traceback module it imports), the commands' context, difflib's suggestions and shutil
    (click measures the terminal with it, importing the archive modules) were a third of `gpuplan --help`'s
    start-up beside `python -c pass`: each is imported once something needs it."""
    later = ("logging", "traceback", "gpuplan.context", "difflib", "shutil")
    code = (
        f"import sys; from gpuplan import cli; cli.run([{flag!r}]); "
        f"print('loaded=' + ','.join(m for m in {later!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "loaded="


def test_a_command_run_by_the_console_script_logs_at_gpuplan_log_s_level() -> None:
    code = (
        "import logging\nfrom gpuplan import cli\ncli._exit_without_teardown = lambda code: None\n"
        "try:\n    cli.main(['schema'])\nexcept SystemExit:\n    pass\n"
        "root = logging.getLogger()\nprint(logging.getLevelName(root.level), len(root.handlers))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GPUPLAN_LOG": "debug"},
    )
    assert proc.stdout.strip().splitlines()[-1] == "DEBUG 1"


def test_the_console_script_collects_young_objects_less_often_than_python_s_default() -> None:
    """A plan allocates a page of nodes at a time: at Python's 700 the collector's full passes over every
    loaded module were a tenth of a plan of 1,000 nodes."""
    code = (
        "import gc\nfrom gpuplan import cli\ncli._exit_without_teardown = lambda code: None\n"
        "default = gc.get_threshold()\n"
        "try:\n    cli.main(['--version'])\nexcept SystemExit:\n    pass\nprint(default, gc.get_threshold())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "(700, 10, 10) (20000, 10, 10)"


@pytest.mark.parametrize("columns", ["60", "200", ""])
def test_the_help_is_as_wide_as_click_makes_it(columns: str) -> None:
    """The group's help measures the terminal itself (no shutil), with click's rule: the same help as click's
    own width gives (``$COLUMNS``, else stdout's size, else 80; less 2, at most 78, at least 50)."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    env = {**env, "COLUMNS": columns} if columns else env
    clicks = "import click.formatting as f; f.FORCED_WIDTH = f.HelpFormatter().width; "
    helps = [
        subprocess.run(
            [sys.executable, "-c", f"{forced}from gpuplan import cli; cli.run(['--help'])"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
        for forced in ("", clicks)
    ]
    assert helps[0] == helps[1]
    assert max(len(line) for line in helps[0].splitlines()) <= (58 if columns == "60" else 78)


def test_the_plan_engine_imports_neither_deepdiff_nor_the_metrics_parser() -> None:
    """A plan of creates never diffs and scrapes nothing: deepdiff and prometheus_client's parser are imported
    where they are used, not by every command that loads the engine (together a tenth of a plan at 1,000
    nodes)."""
    code = (
        "import sys; import gpuplan.planner.driver.live_plan, gpuplan.planner.apply.walker; "
        "print('loaded=' + ','.join(m for m in ('deepdiff', 'prometheus_client') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "loaded="


@pytest.mark.parametrize(("argv", "code"), [(["--version"], 0), (["no-such-command"], 64)])
def test_the_console_script_exits_without_tearing_the_interpreter_down(argv: list[str], code: int) -> None:
    """Freeing every module and object a plan loaded took a tenth of it: once nothing is left to finish, the
    exit code and the flushed output are all a command leaves."""
    script = (
        "import atexit\natexit.register(lambda: print('torn down', flush=True))\n"
        f"from gpuplan import cli\ncli.main({argv!r})"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == code
    assert "torn down" not in proc.stdout
    assert (__version__ in proc.stdout) == (code == 0), proc.stdout


def test_a_thread_left_running_has_the_interpreter_exit_as_usual() -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait, args=(30,))
    worker.start()
    try:
        cli._exit_without_teardown(0)  # returns: the worker is no daemon and still runs
    finally:
        release.set()
        worker.join()
