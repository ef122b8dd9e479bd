"""The state lock: one holder at a time, named in the refusal; dead holders never block; force-unlock by
ID."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import select
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpuplan.errors import StateError, StateLockedError
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.lock import LockInfo

HOLDER = """
import sys
from pathlib import Path
from gpuplan.state.local import LocalFileBackend
info = LocalFileBackend(Path(sys.argv[1])).lock("apply")
print(info.id, flush=True)
sys.stdin.read()  # hold the lock until killed
"""


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalFileBackend]:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    yield backend
    backend.close()


@pytest.fixture
def other_run(tmp_path: Path) -> Iterator[LocalFileBackend]:
    """A second backend on the same state: its own descriptors, so it contends like another process."""
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    yield backend
    backend.close()


def _first_line(process: subprocess.Popen[str], timeout: float = 60) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the child did not report within the deadline"
    return process.stdout.readline().strip()


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait(timeout=30)
    return process.pid


def test_the_lock_record_names_its_holder(backend: LocalFileBackend) -> None:
    info = backend.lock("apply")
    record = json.loads(backend.lock_path.read_text())
    assert record == {
        "id": info.id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "user": info.user,
        "operation": "apply",
        "created": info.created,
        "version": info.version,
    }
    assert uuid.UUID(info.id).version == 4
    assert datetime.fromisoformat(info.created.replace("Z", "+00:00")).tzinfo is not None
    backend.unlock(info.id)


def test_a_second_run_is_refused_with_the_holder_and_a_force_unlock_hint(
    backend: LocalFileBackend, other_run: LocalFileBackend
) -> None:
    info = backend.lock("apply")
    with pytest.raises(StateLockedError) as caught:
        other_run.lock("plan")
    error = caught.value
    assert (
        error.summary == f"state is locked by pid {os.getpid()} on host {socket.gethostname()} "
        f"(operation apply, since {info.created}, lock ID {info.id})"
    )
    assert error.hint == f"gpuplan force-unlock {info.id} if you are sure no other run is using it"


def test_unlock_removes_the_record_and_frees_the_lock(
    backend: LocalFileBackend, other_run: LocalFileBackend
) -> None:
    info = backend.lock("apply")
    backend.unlock(info.id)
    assert not backend.lock_path.exists()
    again = other_run.lock("plan")
    assert again.broken is None
    with pytest.raises(StateError, match=f"lock ID {info.id} is not held by this run"):
        backend.unlock(info.id)
    other_run.unlock(again.id)


def test_the_context_manager_releases_the_lock_when_the_block_fails(
    backend: LocalFileBackend, other_run: LocalFileBackend
) -> None:
    with pytest.raises(RuntimeError), backend.locked("apply") as info:
        assert backend.lock_holder() == info
        raise RuntimeError("apply failed")
    with other_run.locked("plan") as info2:
        assert info2.broken is None


def test_a_holder_process_blocks_others_until_it_is_killed_then_its_lock_is_broken(
    backend: LocalFileBackend, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(backend.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lock_id = _first_line(child)
        with pytest.raises(StateLockedError) as caught:
            backend.lock("apply")
        assert f"state is locked by pid {child.pid} on host {socket.gethostname()}" in caught.value.summary
        assert lock_id in caught.value.summary
    finally:
        child.kill()
        child.wait(timeout=30)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
    capsys.readouterr()
    with caplog.at_level(logging.DEBUG):
        info = backend.lock("apply")
    assert info.broken is not None
    assert (info.broken.id, info.broken.pid) == (lock_id, child.pid)
    # the user is told in one line on stderr, not through logging (the CLI's log format is for debugging)
    out, err = capsys.readouterr()
    assert out == "" and not caplog.records
    assert err == (
        f"Note: broke the state lock held by pid {child.pid} on host {socket.gethostname()} (operation "
        f"apply, since {info.broken.created}, lock ID {lock_id}): the process is gone.\n"
    )
    assert json.loads(backend.lock_path.read_text())["id"] == info.id
    backend.unlock(info.id)


def test_a_record_naming_a_dead_pid_here_is_stale_even_while_its_flock_is_inherited(
    backend: LocalFileBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = LockInfo.for_this_process("apply").model_copy(update={"pid": _dead_pid()})
    inherited = os.open(
        backend.lock_path, os.O_RDWR | os.O_CREAT, 0o600
    )  # e.g. a forked child of the dead run
    try:
        fcntl.flock(inherited, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(inherited, dead.model_dump_json().encode())
        info = backend.lock("plan")
        assert info.broken == dead
        assert backend.lock_holder() == info.model_copy(
            update={"broken": None}
        )  # the file has the new record
        note = capsys.readouterr().err
        assert note == f"Note: broke the state lock held by {dead.describe()}: the process is gone.\n"
        backend.unlock(info.id)
    finally:
        os.close(inherited)


@pytest.mark.parametrize("holder_is", ["alive-here", "on-another-host"])
def test_a_held_flock_with_a_live_or_remote_holder_is_respected(
    backend: LocalFileBackend, holder_is: str
) -> None:
    record = LockInfo.for_this_process("apply")
    if holder_is == "on-another-host":
        record = record.model_copy(update={"host": "other-host", "pid": _dead_pid()})
    fd = os.open(backend.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, record.model_dump_json().encode())
        with pytest.raises(StateLockedError, match=f"lock ID {record.id}"):
            backend.lock("plan")
    finally:
        os.close(fd)


def test_an_unreadable_record_under_a_held_flock_is_still_a_lock(backend: LocalFileBackend) -> None:
    fd = os.open(backend.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StateLockedError, match="its lock record is unreadable"):
            backend.lock("plan")
    finally:
        os.close(fd)


def test_a_record_from_another_host_under_a_free_flock_is_taken_over_with_a_note(
    backend: LocalFileBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its pid cannot be checked from here, but no process holds the lock file: its run ended without
    unlocking."""
    remote = LockInfo.for_this_process("apply").model_copy(update={"host": "other-host", "pid": os.getpid()})
    backend.lock_path.write_text(remote.model_dump_json())
    info = backend.lock("plan")
    assert info.broken == remote
    assert capsys.readouterr().err == (
        f"Note: broke the state lock held by {remote.describe()}: its run ended "
        "without releasing it (no process holds the lock file any more).\n"
    )
    backend.unlock(info.id)


def test_force_unlock_needs_the_right_id(
    backend: LocalFileBackend, other_run: LocalFileBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    info = backend.lock("apply")
    with pytest.raises(StateError) as caught:
        other_run.force_unlock("not-the-id")
    assert f"the lock ID is {info.id}" in caught.value.detail
    assert backend.lock_path.exists()
    removed = other_run.force_unlock(info.id)
    assert removed.id == info.id and not backend.lock_path.exists()
    # the next run locks a fresh file although the old holder still keeps its flock on the unlinked one
    taken = other_run.lock("plan")
    assert taken.broken is None
    capsys.readouterr()
    backend.unlock(info.id)  # the old holder finishing must not remove the new holder's lock
    assert backend.lock_holder() == taken
    assert capsys.readouterr().err == (
        f"Warning: the state lock of this run (lock ID {info.id}) was removed by "
        "`gpuplan force-unlock` while the run held it; another run may have used "
        "the state since.\n"
    )
    other_run.unlock(taken.id)


def test_force_unlock_without_a_lock_is_an_error(backend: LocalFileBackend) -> None:
    with pytest.raises(StateError, match="the state is not locked"):
        backend.force_unlock(str(uuid.uuid4()))


def test_the_memory_backend_locks_the_same_way() -> None:
    memory = MemoryBackend()
    with memory.locked("apply") as info:
        with pytest.raises(StateLockedError, match=f"lock ID {info.id}"):
            memory.lock("plan")
        with pytest.raises(StateError, match="does not match"):
            memory.force_unlock("wrong")
    planning = memory.lock("plan")
    assert memory.force_unlock(planning.id) == planning
    memory.unlock(memory.lock("apply").id)
    with pytest.raises(StateError, match="is not held"):
        memory.unlock(planning.id)


def test_a_held_lock_is_waited_for_up_to_the_timeout_and_taken_when_freed() -> None:
    """--lock-timeout: the second run retries while the first holds the lock, and takes it once freed."""
    from gpuplan.state.backend import MemoryBackend, hold_lock

    backend = MemoryBackend()
    first = backend.lock("apply")
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the first run finishes while the second waits
        waits.append(seconds)
        now[0] += seconds
        if len(waits) == 3:
            backend.unlock(first.id)

    with hold_lock(backend, "plan", 30.0, clock=lambda: now[0], sleep=sleep) as info:
        assert info.operation == "plan"
    assert len(waits) == 3 and all(0 < wait <= 0.2 for wait in waits)


def test_a_lock_still_held_at_the_timeout_is_refused_naming_the_holder_and_the_wait() -> None:
    from gpuplan.errors import StateLockedError
    from gpuplan.state.backend import MemoryBackend, hold_lock

    backend = MemoryBackend()
    backend.lock("apply")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with (
        pytest.raises(StateLockedError) as caught,
        hold_lock(backend, "plan", 2.0, clock=lambda: now[0], sleep=sleep),
    ):
        pass
    assert (
        "operation apply" in caught.value.summary
        and "waited 2s for it (--lock-timeout)" in caught.value.detail
    )
    assert now[0] == pytest.approx(2.0)


def test_a_wait_tries_again_no_sooner_than_the_backend_says_the_lock_could_be_free() -> None:
    """A Lease says when it expires: the waiting run reads it again then, not five times a second."""
    from gpuplan.errors import StateLockedError
    from gpuplan.state.backend import hold_lock

    class Leased:
        tries = 0

        def lock(self, operation: str) -> LockInfo:
            self.tries += 1
            if self.tries < 3:
                error = StateLockedError("state is locked by a Lease")
                error.retry_after = 0.9
                raise error
            return LockInfo.for_this_process(operation)

        def unlock(self, lock_id: str) -> None:
            pass

    now, waits = [0.0], []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    with hold_lock(Leased(), "plan", 30.0, clock=lambda: now[0], sleep=sleep):
        pass
    assert waits == [0.9, 0.9]


def test_without_a_timeout_a_held_lock_is_refused_at_once() -> None:
    from gpuplan.errors import StateLockedError
    from gpuplan.state.backend import MemoryBackend, hold_lock

    backend = MemoryBackend()
    backend.lock("apply")
    slept: list[float] = []
    with pytest.raises(StateLockedError), hold_lock(backend, "plan", clock=lambda: 0.0, sleep=slept.append):
        pass
    assert slept == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("30s", 30.0), ("5m", 300.0), ("1m30s", 90.0), ("1.5s", 1.5), ("2h", 7200.0), ("12", 12.0)],
)
def test_lock_timeouts_read_as_durations(text: str, seconds: float) -> None:
    from gpuplan.commands.options import Duration

    assert Duration().convert(text, None, None) == seconds


def test_a_bad_lock_timeout_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplan import cli

    spec = tmp_path / "gpustack.yaml"
    spec.write_text("kind: GPUStack\n")
    assert cli.run(["plan", "-f", str(spec), "--lock-timeout", "soon"]) == 64
    assert "'soon' is not a duration" in capsys.readouterr().err


def test_plan_waits_for_the_lock_timeout_then_names_the_holder(
    backend: LocalFileBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    """The flag reaches the lock: a plan with --lock-timeout refuses after it, naming the live holder."""
    from gpuplan import cli

    spec = backend.path.with_name("gpustack.yaml")
    spec.write_text("apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec: {}\n")
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(backend.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            _first_line(child)
            assert cli.run(["plan", "-f", str(spec), "--lock-timeout", "0.3s"]) == 1
            err = capsys.readouterr().err
            assert (
                f"state is locked by pid {child.pid}" in err and "waited 0.3s for it (--lock-timeout)" in err
            )
        finally:
            child.kill()


def test_a_lock_file_that_cannot_be_made_says_the_folder_must_be_writable(
    backend: LocalFileBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Any, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("gpuplan.state.lock.os.open", refuse)
    with pytest.raises(StateError, match="cannot open the lock file: Read-only file system") as caught:
        backend.lock("plan")
    assert "--state" in caught.value.hint
