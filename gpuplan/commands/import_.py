"""``gpuplan import -f SPEC ADDRESS KIND/[NAMESPACE/]NAME``: adopt an existing object into the state.

Reads the live object, checks that ADDRESS is a desired object of a component owned by gpuplan (else the
error lists the valid addresses), records the object under its live identity (state lock held, serial + 1)
and prints what the next plan will do with it. The cluster is never changed. An unreachable cluster, a
missing object or a bad address is one ``Error:`` line, exit 1, and nothing written.
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option


@click.command(name="import")
@spec_option()
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else gpuplan.state.json beside the spec).",
)
@click.argument("address")
@click.argument("object_ref", metavar="KIND/[NAMESPACE/]NAME")
@lock_timeout_option()
@click.pass_context
def command(
    ctx: click.Context,
    spec_file: Path,
    state_path: Path | None,
    address: str,
    object_ref: str,
    lock_timeout: float,
) -> int:
    """Adopt the live object KIND/[NAMESPACE/]NAME as ADDRESS, without changing the cluster."""
    from gpuplan.context import Globals, state_backend
    from gpuplan.errors import ConfigError, ProviderError
    from gpuplan.planner.observe import adopt
    from gpuplan.planner.plan import build as plan
    from gpuplan.planner.spec import model as spec_mod
    from gpuplan.providers.snapshot import ObjectKey
    from gpuplan.state.model import StateFile

    spec = spec_mod.load_spec(spec_file)
    target = adopt.import_target(address, spec.desired_objects())
    key = adopt.parse_object_ref(object_ref, api_version=str(target.manifest["apiVersion"]))
    if key.kind != target.address.kind:
        raise ConfigError(
            f"{address} is a {target.address.kind}, but {object_ref} names a {key.kind}",
            hint=f"import a {target.address.kind}, e.g. {target.address.kind}/NAMESPACE/NAME",
        )
    with nothing_changed(READING), Globals.of(ctx).reader() as provider:
        live = provider.read(key)
        if live is None:
            raise ProviderError(
                f"no {adopt.describe(key.kind, key.namespace, key.name)} in the cluster",
                hint=f"check the name and namespace: kubectl get {key.kind.lower()} -A",
            )
        desired_key = ObjectKey.of(target.manifest)
        live_at_desired = live if desired_key == key else provider.read(desired_key)
    backend = state_backend(spec_file, state_path)
    with backend.locked("import", lock_timeout):
        state = backend.read() or StateFile.new()
        record = adopt.record_imported(target.address.component, live, serial=state.serial + 1)
        adopt.check_importable(state, target, record)
        backend.write(state.with_record(record).next_serial())
    preview = plan.decide(target, record, live_at_desired, nodes=(), labelled=live_at_desired is not None)
    click.echo(
        f"Imported {adopt.describe(key.kind, key.namespace, key.name)} into the state as {record.address} "
        f"(state serial {state.serial} -> {state.serial + 1}). The cluster was not changed."
    )
    symbol = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "adopt": "<=", "no-op": "="}
    click.echo(
        f"Next plan: {symbol[preview.action]} {preview.action} {preview.address}: {preview.reason_text}."
    )
    return 0
