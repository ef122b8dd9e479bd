"""The write rules every backend keeps: no-op writes, serial and lineage checks, --force (Terraform's
rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import StateError
from gpuplan.state.backend import MemoryBackend, StateBackend
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile


@pytest.fixture(params=["memory", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StateBackend:
    if request.param == "memory":
        return MemoryBackend()
    return LocalFileBackend(tmp_path / "gpuplan.state.json")


def _stored_generations(backend: StateBackend) -> object:
    """Something that changes exactly when the backend really stores a state."""
    if isinstance(backend, MemoryBackend):
        return backend.writes
    path = backend.path  # type: ignore[attr-defined]
    return path.stat().st_ino, path.read_bytes()


def test_both_backends_implement_the_protocol(backend: StateBackend) -> None:
    assert isinstance(backend, StateBackend)


def test_no_state_reads_as_none_and_any_first_state_is_written(backend: StateBackend) -> None:
    assert backend.read() is None
    state = StateFile.new().next_serial()
    backend.write(state)
    assert backend.read() == state


def test_a_write_with_equal_content_writes_nothing_and_keeps_the_serial(
    backend: StateBackend, make_record
) -> None:
    state = StateFile.new().with_record(make_record()).next_serial()
    backend.write(state)
    before = _stored_generations(backend)
    backend.write(state.next_serial())  # same content, higher serial: still nothing to write
    backend.write(state)
    assert _stored_generations(backend) == before
    stored = backend.read()
    assert stored is not None and stored.serial == state.serial


def test_a_changed_state_needs_a_higher_serial(backend: StateBackend, make_record) -> None:
    state = StateFile.new().next_serial().next_serial().next_serial()  # serial 3
    backend.write(state)
    with pytest.raises(StateError, match="state serial 2 is older than the stored serial 3"):
        backend.write(state.with_record(make_record()).model_copy(update={"serial": 2}))
    with pytest.raises(StateError, match="state serial 3 equals the stored serial but the content differs"):
        backend.write(state.with_record(make_record()))
    newer = state.with_record(make_record()).next_serial()
    backend.write(newer)
    assert backend.read() == newer


def test_a_state_of_another_lineage_is_refused_naming_both(backend: StateBackend) -> None:
    ours = StateFile.new().next_serial()
    backend.write(ours)
    theirs = StateFile.new().next_serial().next_serial()
    with pytest.raises(StateError) as caught:
        backend.write(theirs)
    assert ours.lineage in caught.value.summary and theirs.lineage in caught.value.summary
    assert backend.read() == ours


def test_force_skips_the_lineage_and_serial_checks(backend: StateBackend, make_record) -> None:
    backend.write(StateFile.new().next_serial().next_serial())
    foreign = StateFile.new().with_record(make_record()).next_serial()
    backend.write(foreign, force=True)
    assert backend.read() == foreign


def test_a_file_another_writer_replaced_is_read_again_before_the_next_write(
    tmp_path: Path, make_record
) -> None:
    """A backend does not parse again the state it wrote last, but only while the file still holds it."""
    path = tmp_path / "gpuplan.state.json"
    ours, theirs = LocalFileBackend(path), LocalFileBackend(path)
    state = StateFile.new().next_serial()
    ours.write(state)
    newer = state.with_record(make_record()).next_serial()
    theirs.write(newer)
    with pytest.raises(StateError, match="state serial 2 equals the stored serial but the content differs"):
        ours.write(state.next_serial())
    assert ours.read() == newer
