"""``gpuplan state history|migrate|rbac``: a state's applied generations, its move between backends, and the
RBAC a team needs for a state in the cluster (design §7.2, §7.4).

Registered on the ``state`` group by :mod:`gpuplan.commands.state`. ``migrate`` holds the lock of both
states while it copies, and writes the very state it read (lineage and serial kept) under the target's write
rules: a target that holds another lineage, or a newer serial, refuses it. The source is left as it was, as
``terraform init -migrate-state`` leaves the old backend's copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuplan.commands.options import lock_timeout_option
from gpuplan.commands.state import require_state, state_location
from gpuplan.context import open_location, state_backend

if TYPE_CHECKING:
    from gpuplan.state.location import KubernetesLocation


@click.command("history", short_help="List the applied generations (number, serial, time, who, changes).")
@state_location
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of a table.")
@click.option(
    "--spec",
    "spec_of",
    metavar="N",
    type=click.IntRange(min=1),
    default=None,
    help="Print the spec generation N was applied with, as a gpustack.yaml (to keep a rollback to it).",
)
def history(spec: Path | None, state_path: Path | None, as_json: bool, spec_of: int | None) -> int:
    """The applied generations, oldest first: number (what `rollback --to N` takes), serial, time,
    user@host, the count of changes by action, and the outcome."""
    from gpuplan.views import state_history

    backend = state_backend(spec, state_path)
    try:
        current = require_state(backend) if spec_of is not None else backend.read()
    finally:
        backend.close()
    if spec_of is not None:
        assert current is not None  # require_state refuses without a state
        click.echo(state_history.render_spec(current.numbered(spec_of)), nl=False)
        return 0
    if as_json:
        click.echo(state_history.render_json(current, backend.where))
        return 0
    if current is None or not current.history:
        what = "no state" if current is None else "no applied generation yet"
        click.echo(f"{backend.where}: {what}.", err=True)
        return 0
    click.echo(state_history.render_text(current))
    return 0


@click.command("migrate", short_help="Move the state to another backend (lineage and serial kept).")
@click.option(
    "--to", "target_url", required=True, metavar="URL", help="PATH, file:///PATH or kubernetes://NS/NAME."
)
@state_location
@lock_timeout_option()
def migrate(target_url: str, spec: Path | None, state_path: Path | None, lock_timeout: float) -> int:
    """Copy the state to URL, locked at both ends; the source is left as it is."""
    from gpuplan.errors import StateError
    from gpuplan.state.location import describe, parse_location
    from gpuplan.state.model import content_key

    target_location = parse_location(target_url)
    source = state_backend(spec, state_path)
    if describe(target_location) == source.where:
        raise StateError("the state is already there", where=source.where, hint="pass another --to URL")
    target = open_location(target_location)
    try:
        with source.locked("state migrate", lock_timeout), target.locked("state migrate", lock_timeout):
            state = require_state(source)
            stored = target.read()
            target.write(state)
    finally:
        target.close()
        source.close()
    if stored is not None and stored.lineage == state.lineage and content_key(stored) == content_key(state):
        click.echo(f"{target.where} already holds this state (serial {stored.serial}); nothing was written.")
        return 0
    click.echo(
        f"Migrated state serial {state.serial} (lineage {state.lineage}) from {source.where} "
        f"to {target.where}."
    )
    click.echo(
        f"The copy at {source.where} was left as it is: point spec.state (or --state) at {target.where}, "
        "then remove it."
    )
    return 0


@click.command("rbac", short_help="Print the Role and RoleBinding a user of a kubernetes:// state needs.")
@state_location
@click.option("--user", help="The user to bind (as the cluster authenticates them).")
@click.option("--group", help="The group to bind.")
@click.option("--service-account", "service_account", metavar="NS/NAME", help="The service account to bind.")
@click.option(
    "--parts", type=click.IntRange(1, 64), default=8, show_default=True, help="Part Secrets to name."
)
def rbac(
    spec: Path | None,
    state_path: Path | None,
    user: str | None,
    group: str | None,
    service_account: str | None,
    parts: int,
) -> int:
    """The minimal Role (get, update, patch on the state's Secrets and Lease by name; create, which Kubernetes
    cannot limit by name) and its RoleBinding, as YAML for `kubectl apply -f -`."""
    from gpuplan.context import state_location as location_of
    from gpuplan.errors import UsageError
    from gpuplan.state.location import KubernetesLocation
    from gpuplan.views import state_rbac

    location = location_of(spec, state_path)
    if not isinstance(location, KubernetesLocation):
        raise UsageError(
            f"the state at {location} is a file: RBAC is for a state in the cluster",
            hint="pass --state kubernetes://NAMESPACE/NAME, or -f a spec whose spec.state is kubernetes",
        )
    given = [value for value in (user, group, service_account) if value]
    if len(given) > 1:
        raise UsageError("pass one of --user, --group and --service-account")
    click.echo(
        state_rbac.render(location, _subject(user, group, service_account, location), parts=parts), nl=False
    )
    return 0


def _subject(
    user: str | None, group: str | None, service_account: str | None, location: KubernetesLocation
) -> dict[str, str]:
    """The RoleBinding's subject; without one given, the group ``gpuplan:<name>``."""
    from gpuplan.errors import UsageError

    if user:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
    if service_account:
        namespace, _, name = service_account.partition("/")
        if not namespace or not name:
            raise UsageError(f"--service-account {service_account!r} is not NAMESPACE/NAME")
        return {"kind": "ServiceAccount", "namespace": namespace, "name": name}
    return {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Group",
        "name": group or f"gpuplan:{location.name}",
    }
