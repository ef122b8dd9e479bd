"""``gpuplan state list|show|pull|push|rm``: read and edit the state; the stack's objects are never touched.

Loaded lazily by :mod:`gpuplan.cli`; the state layer (and so pydantic) is imported inside each command, so
``gpuplan --help`` stays light. The state is found as everywhere else (design §3.2): ``--state PATH``, else
``gpuplan.state.json`` beside ``-f SPEC``, else in the current folder. The commands that change the state
(``rm``, ``push``) hold the state lock while they do, as Terraform's ``state rm`` and ``state push`` do.

``force-unlock`` (:mod:`gpuplan.commands.force_unlock`) reuses :func:`state_location` from here;
``history``, ``migrate`` and ``rbac`` live in :mod:`gpuplan.commands.state_team`. A ``kubernetes://`` state
(design §7.2) is read and written the same way, through its backend.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuplan.commands.group import SuggestingGroup
from gpuplan.commands.options import lock_timeout_option
from gpuplan.context import state_backend

if TYPE_CHECKING:
    from gpuplan.state.backend import StateStore
    from gpuplan.state.model import ResourceRecord, StateFile

F = TypeVar("F", bound=Callable[..., Any])


def state_location(command: F) -> F:
    """The ``-f SPEC`` and ``--state PATH`` options that say where the state file is."""
    command = click.option(
        "--state",
        "state_path",
        type=click.Path(path_type=Path),
        help="State file or kubernetes://NS/NAME (default: spec.state, else beside the spec, or here).",
    )(command)
    command = click.option(
        "-f",
        "--file",
        "spec",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The stack spec; its folder holds the default state file.",
    )(command)
    return command


def _no_state(backend: StateStore) -> str:
    what = "No state at" if "://" in backend.where else "No state file at"
    return f"{what} {backend.where}: nothing is managed yet."


def require_state(backend: StateStore) -> StateFile:
    from gpuplan.errors import StateError

    current = backend.read()
    if current is None:
        raise StateError(_no_state(backend), hint="pass -f SPEC or --state PATH if the state is elsewhere")
    return current


@click.group("state", cls=SuggestingGroup)
def command() -> None:
    """Inspect, edit, move and secure the state (a file, or a Secret and a Lease in the cluster)."""


@command.command("list", short_help="List the managed objects' addresses (tainted ones marked).")
@state_location
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of one address a line.")
def list_(spec: Path | None, state_path: Path | None, as_json: bool) -> int:
    """The address of every managed object, one a line; tainted ones are marked."""
    backend = state_backend(spec, state_path)
    current = backend.read()
    if current is None:
        click.echo(_no_state(backend), err=True)
        if as_json:
            click.echo(json.dumps({"state": backend.where, "lineage": None, "serial": None, "resources": []}))
        return 0
    if as_json:
        resources = [
            {
                "address": r.address,
                "component": r.component,
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "status": r.status,
                "applied_serial": r.applied_serial,
            }
            for r in current.resources.values()
        ]
        click.echo(
            json.dumps(
                {
                    "state": backend.where,
                    "lineage": current.lineage,
                    "serial": current.serial,
                    "resources": resources,
                },
                indent=2,
            )
        )
        return 0
    for record in current.resources.values():
        click.echo(record.address + (" (tainted)" if record.status == "tainted" else ""))
    return 0


@command.command("show", short_help="Show one managed object's record.")
@click.argument("address")
@state_location
@click.option("--json", "as_json", is_flag=True, help="The record as JSON.")
def show(address: str, spec: Path | None, state_path: Path | None, as_json: bool) -> int:
    """One managed object's record: owned fields as applied, uid, resourceVersion, serial."""
    current = require_state(state_backend(spec, state_path))
    record = current.record(address)
    if as_json:
        click.echo(json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        click.echo(_render_record(record, current.serial))
    return 0


def _render_record(record: ResourceRecord, state_serial: int) -> str:
    import yaml

    facts = [
        ("component", record.component),
        ("apiVersion", record.api_version),
        ("kind", record.kind),
        ("namespace", record.namespace or "(cluster-scoped)"),
        ("name", record.name),
        ("status", record.status),
        ("uid", record.uid or "(unknown)"),
        ("resourceVersion", record.resource_version or "(unknown)"),
        ("generation", "(none)" if record.generation is None else str(record.generation)),
        ("applied at serial", f"{record.applied_serial} (state serial {state_serial})"),
    ]
    width = max(len(label) for label, _ in facts) + 2
    lines = [f"# {record.address}"] + [f"{label + ':':<{width}}{value}" for label, value in facts]
    owned = (
        yaml.safe_dump(record.owned, sort_keys=True, default_flow_style=False).rstrip()
        if record.owned
        else "{}"
    )
    lines += ["owned fields:"] + [f"  {line}" for line in owned.splitlines()]
    return "\n".join(lines)


@command.command("pull", short_help="Print the state as JSON.")
@state_location
def pull(spec: Path | None, state_path: Path | None) -> int:
    """Print the state as JSON (in the current format; an older file is shown migrated)."""
    from gpuplan.state.model import to_json

    backend = state_backend(spec, state_path)
    current = backend.read()
    if current is None:
        click.echo(_no_state(backend), err=True)
        return 0
    click.echo(to_json(current), nl=False)
    return 0


@command.command("push", short_help="Replace the state with FILE, after the lineage and serial checks.")
@click.argument("source", metavar="FILE")
@state_location
@click.option("--force", is_flag=True, help="Skip the lineage and serial checks and replace the state as is.")
@lock_timeout_option()
def push(source: str, spec: Path | None, state_path: Path | None, force: bool, lock_timeout: float) -> int:
    """Replace the state with FILE ("-" reads stdin), if its lineage matches and its serial is newer."""
    from gpuplan.errors import StateError
    from gpuplan.state.document import parse_state
    from gpuplan.state.model import content_key

    backend = state_backend(spec, state_path)
    new = parse_state(
        _read_source(source),
        source=source,
        hint="push a state file written by gpuplan (`gpuplan state pull` prints one)",
    )
    with backend.locked("state push", lock_timeout):
        try:
            stored = backend.read()
        except StateError:
            if not force:
                raise
            stored = None  # --force replaces a damaged state too (its bytes are kept as the backup)
        backend.write(new, force=force)
    if stored is not None and stored.lineage == new.lineage and content_key(stored) == content_key(new):
        click.echo(
            f"The state at {backend.where} already has this content (serial {stored.serial}); "
            "nothing was written."
        )
    else:
        click.echo(f"Pushed state serial {new.serial} (lineage {new.lineage}) to {backend.where}.")
    return 0


def _read_source(source: str) -> bytes:
    from gpuplan.errors import StateError

    if source == "-":
        return sys.stdin.buffer.read()
    from gpuplan.fileio import STATE_LIMIT, read_bounded

    return read_bounded(source, limit=STATE_LIMIT, what="state to push", error=StateError)


@command.command("rm", short_help="Forget objects, leaving the cluster as it is.")
@click.argument("addresses", nargs=-1, required=True)
@state_location
@lock_timeout_option()
def rm(addresses: tuple[str, ...], spec: Path | None, state_path: Path | None, lock_timeout: float) -> int:
    """Forget objects: remove their records from the state, leaving the cluster as it is."""
    backend = state_backend(spec, state_path)
    wanted = tuple(dict.fromkeys(addresses))
    with backend.locked("state rm", lock_timeout):
        current = require_state(backend)
        new = current.without(*wanted).next_serial()  # all or nothing: an unknown address removes none
        backend.write(new)
    for address in wanted:
        click.echo(f"Removed {address}")
    click.echo(
        f"Removed {len(wanted)} object(s) from the state (serial {current.serial} -> {new.serial}). "
        "The cluster was not changed; `gpuplan import` adopts them again."
    )
    return 0


def _register_team_commands() -> None:
    from gpuplan.commands import state_team  # it builds on this module's options

    for extra in (state_team.history, state_team.migrate, state_team.rbac):
        command.add_command(extra)


_register_team_commands()
