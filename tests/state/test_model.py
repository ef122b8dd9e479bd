"""The state model: identity, immutable updates, serialisation and the address contract (design §3.2,
§3.3)."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import ValidationError

from gpuplan.errors import StateError
from gpuplan.state.document import parse_state
from gpuplan.state.model import (
    FORMAT_VERSION,
    HISTORY_LIMIT,
    JournalEntry,
    ResourceRecord,
    StateFile,
    content_key,
    make_address,
    to_document,
    to_json,
)


def test_new_state_has_a_fresh_uuid_lineage_and_serial_zero() -> None:
    first, second = StateFile.new(), StateFile.new()
    assert uuid.UUID(first.lineage).version == 4
    assert first.lineage != second.lineage
    assert (first.serial, first.format_version, first.resources) == (0, FORMAT_VERSION, {})


def test_addresses_follow_design_3_3() -> None:
    assert make_address("gfd", "DaemonSet", "gpu-operator", "gfd") == "gfd/DaemonSet/gpu-operator/gfd"
    assert make_address("toolkit", "RuntimeClass", None, "nvidia") == "toolkit/RuntimeClass/nvidia"


def test_a_record_whose_address_does_not_match_its_object_is_refused(make_record) -> None:
    good = make_record()
    with pytest.raises(ValidationError, match="does not match its object"):
        ResourceRecord.model_validate({**good.model_dump(), "address": "gfd/DaemonSet/gpu-operator/other"})


def test_records_refuse_unknown_fields_and_are_frozen(make_record) -> None:
    record = make_record()
    with pytest.raises(ValidationError, match="Extra inputs"):
        ResourceRecord.model_validate({**record.model_dump(), "colour": "green"})
    with pytest.raises(ValidationError, match="frozen"):
        record.uid = "x"  # type: ignore[misc]


def test_updates_return_new_states_and_leave_the_original_alone(make_record) -> None:
    base = StateFile.new()
    grown = base.with_record(make_record("b")).with_record(make_record("a")).next_serial()
    assert base.resources == {} and base.serial == 0
    assert list(grown.resources) == [make_record("a").address, make_record("b").address]  # sorted
    assert grown.serial == 1
    shrunk = grown.without(make_record("a").address)
    assert list(shrunk.resources) == [make_record("b").address]
    assert len(grown.resources) == 2
    assert shrunk.tainted(make_record("b").address).record(make_record("b").address).status == "tainted"
    assert shrunk.record(make_record("b").address).status == "ready"


def test_unknown_address_names_the_nearest_ones(make_record) -> None:
    state = StateFile.new().with_records([make_record("nvidia-device-plugin-daemonset"), make_record("gfd")])
    with pytest.raises(StateError) as caught:
        state.without("devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonsett")
    assert (
        "Did you mean: devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
        in caught.value.detail
    )
    assert "gpuplan state list" in caught.value.hint


def test_history_keeps_the_last_generations_newest_last(make_record) -> None:
    state = StateFile.new()
    for serial in range(1, HISTORY_LIMIT + 4):
        state = (
            state.with_record(make_record(f"ds-{serial}")).next_serial().with_generation(f"sha256:{serial}")
        )
    assert [g.serial for g in state.history] == list(range(4, HISTORY_LIMIT + 4))
    oldest = state.generation(4)
    assert set(oldest.records) == {make_record(f"ds-{n}").address for n in range(1, 5)}
    with pytest.raises(StateError, match="no applied generation with serial 1"):
        state.generation(1)


def test_journal_marks_the_newest_pending_intent_done(make_record) -> None:
    address = make_record().address
    entry = JournalEntry(
        address=address, action="update", before={"a": 1}, after={"a": 2}, started_at="2026-11-29T10:00:00Z"
    )
    state = StateFile.new().with_journal_entry(entry).with_journal_entry(entry)
    assert len(state.pending_journal()) == 2
    once = state.journal_done(address)
    assert [e.state for e in once.journal] == ["pending", "done"]
    twice = once.journal_done(address)
    assert twice.pending_journal() == ()
    with pytest.raises(StateError, match="no pending journal entry"):
        twice.journal_done(address)
    assert twice.without_journal().journal == ()


def test_serialisation_round_trips_and_is_deterministic(make_record) -> None:
    records = [make_record(f"ds-{n}", uid=str(uuid.uuid4()), generation=n) for n in range(5)]
    forwards = StateFile.new().with_records(records).next_serial()
    backwards = forwards.model_copy(update={"resources": dict(reversed(forwards.resources.items()))})
    assert to_json(backwards) == to_json(forwards)
    text = to_json(forwards)
    assert parse_state(text, source="mem") == forwards
    document = json.loads(text)
    assert list(document) == sorted(document)
    assert list(document["resources"]) == sorted(document["resources"])


def test_content_ignores_serial_and_writer_version(make_record) -> None:
    state = StateFile.new().with_record(make_record())
    assert content_key(state) == content_key(state.next_serial().next_serial())
    assert content_key(state) != content_key(state.tainted(make_record().address))


def test_host_drivers_are_kept_by_node_and_left_out_of_the_file_when_none() -> None:
    """A stack that pins or owns its driver records no host drivers, so its file is as before."""
    state = StateFile.new()
    assert "host_drivers" not in to_document(state)
    recorded = state.with_host_drivers({"rtx-node": "580.105.08", "a100-node": "570.195.03"})
    assert list(to_document(recorded)["host_drivers"]) == ["a100-node", "rtx-node"]
    assert parse_state(to_json(recorded), source="state").host_drivers == recorded.host_drivers
