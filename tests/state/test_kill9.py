"""``kill -9`` of a writer at any moment leaves a complete state and a complete backup (crash safety).

Writers are forked children (no interpreter start-up per kill), killed either after deterministic varying
delays while they write in a loop, or exactly before each system call of one write.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from gpuplan.state import files
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import ResourceRecord, StateFile, make_address

KILLS = 50
RECORDS = 80  # enough that a write takes a while, so the kills land in different phases of it
FORK = multiprocessing.get_context("fork")


def _record(n: int, serial: int) -> ResourceRecord:
    name = f"ds-{n:03d}"
    return ResourceRecord(
        address=make_address("devicePlugin", "DaemonSet", "gpu-operator", name),
        component="devicePlugin",
        api_version="apps/v1",
        kind="DaemonSet",
        namespace="gpu-operator",
        name=name,
        applied_serial=serial,
        owned={
            "spec": {
                "template": {
                    "metadata": {"annotations": {"serial": str(serial)}},
                    "spec": {"containers": [{"name": name, "args": ["x"] * 20}]},
                }
            }
        },
    )


def _next(state: StateFile) -> StateFile:
    """The next generation: every write changes a record, so every write is real (never a no-op)."""
    bumped = state.next_serial()
    return bumped.with_record(_record(bumped.serial % RECORDS, bumped.serial))


def _seed(path: Path) -> StateFile:
    state = StateFile.new().with_records(_record(n, 1) for n in range(RECORDS)).next_serial()
    LocalFileBackend(path).write(state)
    return state


def _write_forever(path: Path, started: Event) -> None:
    backend = LocalFileBackend(path)
    state = backend.read()
    assert state is not None
    while True:
        state = _next(state)
        backend.write(state)
        started.set()


def _write_once_dying_at(path: Path, step: int, started: Event) -> None:
    """One write that SIGKILLs itself just before its ``step``-th fsync/replace call."""
    calls = {"n": 0}

    def dying(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if calls["n"] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            calls["n"] += 1
            return real(*args)

        return call

    files.os.fsync = dying(os.fsync)  # type: ignore[assignment]  # the forked child's own copy only
    files.os.replace = dying(os.replace)  # type: ignore[assignment]
    backend = LocalFileBackend(path)
    state = backend.read()
    assert state is not None
    started.set()
    backend.write(_next(state))


def _run_and_kill(target: Callable[..., None], *args: Any, delay: float | None) -> int | None:
    started = FORK.Event()
    process = FORK.Process(target=target, args=(*args, started))
    process.start()
    assert started.wait(timeout=60), "the writer did not start"
    if delay is not None:
        # The kill point: a deterministic spread of moments inside the writer's loop, not a wait for anything.
        time.sleep(delay)
        os.kill(process.pid or 0, signal.SIGKILL)
    process.join(timeout=60)
    code = process.exitcode
    process.close()
    return code


def _check_consistent(backend: LocalFileBackend, lineage: str, at_least: int) -> StateFile:
    state = backend.read()  # parses, or the test fails with the StateError
    assert state is not None and state.lineage == lineage
    assert state.serial >= at_least
    assert all(record.applied_serial <= state.serial for record in state.resources.values())
    backup = backend.read_backup()
    if backup is not None:  # the previous generation, or the current one when killed between the two renames
        assert backup.lineage == lineage and backup.serial <= state.serial
    return state


def test_a_writer_killed_at_varying_moments_always_leaves_a_valid_state_and_backup(tmp_path: Path) -> None:
    path = tmp_path / "gpuplan.state.json"
    seeded = _seed(path)
    backend = LocalFileBackend(path)
    serial = seeded.serial
    for kill in range(KILLS):
        delay = (kill * 7 % 25) / 1000  # 0 to 24 ms, in a scrambled but fixed order
        assert _run_and_kill(_write_forever, path, delay=delay) == -signal.SIGKILL
        serial = _check_consistent(backend, seeded.lineage, serial).serial
    assert serial > seeded.serial  # the writers did make progress between kills
    final = _next(backend.read() or seeded)
    backend.write(final)
    assert backend.read() == final
    assert not [p.name for p in tmp_path.iterdir() if ".tmp." in p.name]  # the orphans were cleaned up


@pytest.mark.parametrize("step", range(7), ids=lambda step: f"before-call-{step}")
def test_a_writer_killed_before_each_system_call_of_a_write(tmp_path: Path, step: int) -> None:
    path = tmp_path / "gpuplan.state.json"
    seeded = _seed(path)
    second = _next(seeded)
    LocalFileBackend(path).write(second)  # so that a backup exists before the killed write
    code = _run_and_kill(_write_once_dying_at, path, step, delay=None)
    backend = LocalFileBackend(path)
    state = _check_consistent(backend, seeded.lineage, second.serial)
    # Six calls per write (backup: fsync, replace, fsync folder; state: the same); step 6 is past the last.
    assert code == (0 if step == 6 else -signal.SIGKILL)
    assert state.serial == (second.serial + 1 if step >= 5 else second.serial)
