"""``gpuplan force-unlock LOCK_ID``: remove a state lock whose run will never release it.

Loaded lazily by :mod:`gpuplan.cli`. A lock whose holder died is taken over by the next run on its own (the
OS lock dies with its process, see :mod:`gpuplan.state.lock`), so this is for the rest: a run on another host
that lost its machine, or a hung run the user chose to abandon. The lock is removed only when LOCK_ID is the
ID of the lock on the state (the one a blocked run's error names), as ``terraform force-unlock`` does; the
cluster is never touched.
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuplan.commands.state import state_location
from gpuplan.context import state_backend


@click.command("force-unlock")
@click.argument("lock_id")
@state_location
def command(lock_id: str, spec: Path | None, state_path: Path | None) -> int:
    """Remove the state lock LOCK_ID left by a run that will not release it."""
    backend = state_backend(spec, state_path)
    still_running = backend.lock_is_held()
    holder = backend.force_unlock(lock_id)
    if still_running:
        click.echo(
            f"Warning: a live process still held {backend.lock_where}. If the run of pid "
            f"{holder.pid} is still going, it may yet write the state.",
            err=True,
        )
    click.echo(
        f"Removed lock {holder.id} of pid {holder.pid} on host {holder.host} "
        f"(operation {holder.operation}, since {holder.created})."
    )
    click.echo("The state is unlocked; the cluster was not changed.")
    return 0
