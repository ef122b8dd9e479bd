"""Format migrations, golden-file style (Terraform's statefile/testdata/roundtrip): in.json -> out.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.errors import StateError
from gpuplan.state import migrations
from gpuplan.state.document import parse_state
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import FORMAT_VERSION, to_json

TESTDATA = Path(__file__).resolve().parents[2] / "state" / "testdata"
GOLDEN = sorted(TESTDATA.glob("*.in.json"))


def test_there_are_golden_files_for_every_older_format() -> None:
    versions = {json.loads(path.read_text())["format_version"] for path in GOLDEN}
    assert versions == set(range(migrations.OLDEST_FORMAT, FORMAT_VERSION + 1))


@pytest.mark.parametrize("source", GOLDEN, ids=[path.name for path in GOLDEN])
def test_golden_file_upgrades_to_its_expected_output(source: Path) -> None:
    expected = source.with_name(source.name.replace(".in.json", ".out.json")).read_text()
    state = parse_state(source.read_bytes(), source=source.name)
    assert to_json(state) == expected
    assert to_json(parse_state(expected, source="out")) == expected  # the output is a fixed point


def test_v1_records_become_ready_records_keyed_by_address_stamped_with_the_file_serial() -> None:
    v1 = json.loads((TESTDATA / "v1-basic.in.json").read_text())
    v2 = migrations.upgrade(v1, source="v1-basic.in.json")
    assert v2["format_version"] == 2 and (v2["history"], v2["journal"]) == ([], [])
    assert list(v2["resources"]) == sorted(record["address"] for record in v1["resources"])
    for record in v1["resources"]:
        assert v2["resources"][record["address"]] == {
            **record,
            "status": "ready",
            "applied_serial": v1["serial"],
        }


def test_a_migrated_state_reaches_the_disk_only_with_the_next_write(tmp_path: Path, make_record) -> None:
    path = tmp_path / "gpuplan.state.json"
    original = (TESTDATA / "v1-basic.in.json").read_bytes()
    path.write_bytes(original)
    backend = LocalFileBackend(path)
    state = backend.read()
    assert state is not None and path.read_bytes() == original
    backend.write(state.with_record(make_record("gfd-extra", component="gfd")).next_serial())
    assert json.loads(path.read_text())["format_version"] == FORMAT_VERSION
    assert backend.backup_path.read_bytes() == original


def test_a_state_from_a_newer_gpuplan_asks_for_an_upgrade() -> None:
    newer = {"format_version": FORMAT_VERSION + 1, "gpuplan_version": "9.1.0", "lineage": "x", "serial": 1}
    with pytest.raises(StateError) as caught:
        parse_state(json.dumps(newer), source="gpuplan.state.json")
    assert "created by a newer gpuplan 9.1.0" in caught.value.summary
    assert caught.value.hint == "upgrade gpuplan to 9.1.0 or later"


def test_a_v1_file_with_a_duplicate_address_is_refused_with_the_path() -> None:
    v1 = json.loads((TESTDATA / "v1-basic.in.json").read_text())
    v1["resources"].append(v1["resources"][0])
    with pytest.raises(StateError, match="appears twice") as caught:
        parse_state(json.dumps(v1), source="s.json", hint="restore it")
    assert caught.value.where == "s.json" and caught.value.hint == "restore it"


def test_a_v1_record_with_a_wrong_type_names_its_field_path() -> None:
    v1 = json.loads((TESTDATA / "v1-basic.in.json").read_text())
    v1["resources"][1]["generation"] = "three"
    with pytest.raises(StateError) as caught:
        parse_state(json.dumps(v1), source="s.json")
    assert caught.value.summary.startswith("resources[1].generation:")
