"""The ``gpuplan`` console script: global options, lazy sub-commands and the exit-code contract.

Sub-commands live one per module in :mod:`gpuplan.commands` and are imported only when invoked, so
``gpuplan --help`` never pays for the Kubernetes client, pydantic or the simulator. A command module that does
not exist yet is simply not listed.

Exit codes (design §4): 0 ok, 1 error, 2 changes or drift, 64 usage error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import click

from gpuplan import errors, version
from gpuplan.commands.group import SuggestingGroup

# command name -> (module in gpuplan.commands exporting ``command``, its one-line summary for ``--help``).
# The summaries live here, not in the modules, so that ``gpuplan --help`` imports none of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "Write a starter gpustack.yaml from the live cluster."),
    "validate": ("validate", "Check gpustack.yaml without a cluster."),
    "schema": ("schema", "Print the JSON Schema of gpustack.yaml."),
    "plan": ("plan", "Show what apply would change in the cluster, and why."),
    "apply": ("apply", "Apply a fresh plan (or PLANFILE), health-gated."),
    "show": ("show", "Show a plan saved with `gpuplan plan --out PLANFILE`."),
    "graph": ("graph", "Print the components' dependency graph and owners."),
    "import": ("import_", "Adopt a live object as ADDRESS, changing nothing."),
    "rollback": ("rollback", "Return to an earlier applied generation of the state."),
    "takeover": ("takeover", "Hand the installed GPU Operator's components to gpuplan in place."),
    "drift": ("drift", "Drift checks: a report, or a CronJob running it."),
    "inventory": ("inventory", "Show the GPUs of every node, or of this host."),
    "state": ("state", "Inspect and edit the state file, not the cluster."),
    "force-unlock": ("force_unlock", "Remove a state lock a run left behind."),
    "sim": ("sim", "Run the simulated GPU cluster."),
    "demo": ("demo", "A guided tour on a built-in simulated GPU cluster."),
}

DEBUG_LOG = "gpuplan-debug.log"
INTERRUPTED = "interrupted (Ctrl-C)"


def _module_name(command: str) -> str:
    return f"gpuplan.commands.{COMMANDS[command][0]}"


def _available(command: str) -> bool:
    return importlib.util.find_spec(_module_name(command)) is not None


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` (``$COLUMNS``, else stdout's terminal, else 80), without
    importing :mod:`shutil` and the archive modules it imports for the sake of one number."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpContext(click.Context):
    """The group's context: its help is as wide as click would make it, measured without :mod:`shutil`."""

    def make_formatter(self) -> click.HelpFormatter:
        width = self.terminal_width
        if width is None and click.formatting.FORCED_WIDTH is None:  # click's own width rule, unforced
            width = max(min(_terminal_columns(), self.max_content_width or 80) - 2, 50)
        return self.formatter_class(width=width, max_width=self.max_content_width)


class LazyGroup(SuggestingGroup):
    """A group whose sub-commands are imported on first use."""

    context_class = HelpContext

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _available(name))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module = importlib.import_module(_module_name(cmd_name))
        command: click.Command = module.command
        command.short_help = COMMANDS[cmd_name][1]
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`COMMANDS`, without importing a command module for its summary."""
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Ctrl-C in a phase that does not say more itself ends as one ``Error:`` line and exit 130, before
        click would turn it into a bare "Aborted." and exit 1."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise errors.Interrupted(INTERRUPTED) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _param, value: _print_version(ctx) if value and not ctx.resilient_parsing else None,
    help="Show the version and exit.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    envvar="KUBECONFIG",
    help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).",
)
@click.option("--context", help="Kubeconfig context to use.")
@click.option("--no-color", is_flag=True, envvar="NO_COLOR", help="Plain output without ANSI colours.")
@click.pass_context
def cli(ctx: click.Context, kubeconfig: str | None, context: str | None, no_color: bool) -> None:
    """Plan, apply and drift-check the NVIDIA GPU software stack on Kubernetes."""
    from gpuplan.context import Globals  # a command runs: worth importing now, not for --help

    _configure_logging()
    ctx.obj = Globals(kubeconfig=kubeconfig, context=context, color=not no_color)


def _print_version(ctx: click.Context) -> None:
    """``--version``, as click words it; the version is read only now (package metadata is slow to import)."""
    click.echo(f"gpuplan, version {version()}")
    ctx.exit()


def _report_bug(exc: BaseException) -> int:
    import traceback  # only a bug needs it (with linecache and tokenize, a tenth of --help's start-up)

    log_path = Path(os.environ.get("GPUPLAN_DEBUG_LOG", DEBUG_LOG))
    try:
        log_path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        where = f"; the traceback is in {log_path}"
    except OSError:
        where = ""
    click.echo(
        f"Error: internal error ({type(exc).__name__}: {exc}){where}. This is a bug in gpuplan.", err=True
    )
    return errors.EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return (and exit with) the contract's exit code."""
    _tune_collector()
    code = run(argv)
    _exit_without_teardown(code)
    sys.exit(code)


def _exit_without_teardown(code: int) -> None:
    """Exit with ``code`` at once when nothing is left to finish, its output flushed: tearing the interpreter
    down (every module and object a plan or an apply loaded, freed one by one) took 0.1 to 0.15 s of a
    1 s plan of 1,000 nodes. Every file, lock and connection a command holds is released by its own
    ``with`` blocks before :func:`run` returns; only a thread that is no daemon (work a command left
    running) has the interpreter exit as usual, waiting for it."""
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to say
            stream.flush()
    os._exit(code)


def _tune_collector() -> None:
    """Collect young objects every 20,000 allocations instead of 700 (mypy raises it too: ``mypy/main.py``).

    A command allocates in bursts: the planner's modules and pydantic models as they load, then every item
    of a page of nodes. At the default threshold the collector ran some 400 times in a plan of 1,000 nodes
    and its full passes walked every object loaded so far: 80 ms of a 0.75 s plan, 10 % of it. Objects are
    still freed by reference counting the moment they are dropped (a page before the next one is read); only
    cycles wait longer, and the older generations keep their default ratios."""
    import gc

    gc.set_threshold(20_000, 10, 10)


def _configure_logging() -> None:
    """``GPUPLAN_LOG``'s level on stderr (a no-op where logging is set up already, as under pytest). Called
    once a command is about to run, so that ``--help`` and ``--version`` import neither ``logging`` nor the
    ``traceback`` it imports: a third of their start-up."""
    import logging

    logging.basicConfig(
        level=os.environ.get("GPUPLAN_LOG", "WARNING").upper(),
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )


def run(argv: list[str] | None = None) -> int:
    """Like :func:`main` without exiting: the testable core."""
    try:
        result: Any = cli.main(args=argv, prog_name="gpuplan", standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help, --version and ctx.exit(n)
        return int(exc.exit_code)
    except click.Abort as exc:  # a prompt's Ctrl-C or end of input, or Ctrl-C while parsing the arguments
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            click.echo(errors.Interrupted(INTERRUPTED).render(), err=True)
            return errors.EXIT_INTERRUPTED
        click.echo("Aborted.", err=True)
        return errors.EXIT_ERROR
    except click.exceptions.NoArgsIsHelpError as exc:  # a group called without its sub-command
        click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message(), err=True)
        return errors.EXIT_USAGE
    except click.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"Error: {exc.format_message()}", err=True)
        return errors.EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        return errors.EXIT_ERROR
    except errors.GpuplanError as exc:
        click.echo(exc.render(), err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo(errors.Interrupted(INTERRUPTED).render(), err=True)
        return errors.EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the one place that turns bugs into a line and a log
        return _report_bug(exc)
    return int(result) if isinstance(result, int) else errors.EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    main()
