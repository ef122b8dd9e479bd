"""A corpus of damaged state files: each gives one StateError naming the file, where in it, and a hint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan import cli
from gpuplan.errors import StateError
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile, to_json

LINEAGE = "5c8d1e3f-7a2b-4c9d-8e0f-1a2b3c4d5e6f"
RECORD = {
    "address": "gfd/DaemonSet/gpu-operator/gfd",
    "component": "gfd",
    "api_version": "apps/v1",
    "kind": "DaemonSet",
    "namespace": "gpu-operator",
    "name": "gfd",
    "owned": {},
    "uid": None,
    "resource_version": None,
    "generation": None,
    "status": "ready",
    "applied_serial": 1,
}


def _doc(**changes: Any) -> str:
    document = {
        "format_version": 2,
        "lineage": LINEAGE,
        "serial": 3,
        "gpuplan_version": "0.1.0",
        "resources": {RECORD["address"]: RECORD},
        "history": [],
        "journal": [],
    }
    document.update(changes)
    return json.dumps({k: v for k, v in document.items() if v is not _MISSING}, indent=2)


_MISSING = object()

# name, file content, expected `where` (after the file name), expected words in the summary
CORPUS: list[tuple[str, str | bytes, str, str]] = [
    ("empty", "", "", "the state file is empty"),
    ("truncated", _doc()[:60], ":3:14", "not valid JSON"),
    ("trailing-comma", '{"format_version": 2,\n  "serial": 1,\n}', ":3:1", "not valid JSON"),
    ("not-utf8", b'{"format_version": 2, "lineage": "\xff"}', "", "not UTF-8"),
    ("array", "[1, 2]", "", "JSON list, not an object"),
    ("duplicate-key", '{"format_version": 2, "serial": 1, "serial": 2}', "", "'serial' appears twice"),
    ("no-format-version", _doc(format_version=_MISSING), "", "format_version: field required"),
    ("format-version-string", _doc(format_version="2"), "", "format_version: expected an integer"),
    ("format-version-zero", _doc(format_version=0), "", "format_version 0 is not a gpuplan state format"),
    ("serial-string", _doc(serial="3"), "", "serial: Input should be a valid integer"),
    ("serial-negative", _doc(serial=-1), "", "serial: Input should be greater than or equal to 0"),
    ("lineage-not-uuid", _doc(lineage="my-lineage"), "", "lineage: lineage 'my-lineage' is not a UUID"),
    ("missing-lineage", _doc(lineage=_MISSING), "", "lineage: field required"),
    # without its records a state would be read as empty, and the next plan would create everything again
    ("missing-resources", _doc(resources=_MISSING), "", "resources: field required"),
    ("missing-history", _doc(history=_MISSING), "", "history: field required"),
    ("missing-journal", _doc(journal=_MISSING), "", "journal: field required"),
    ("serial-huge", _doc(serial=2**63), "", "serial: Input should be less than or equal to 9007199254740991"),
    ("nested-too-deeply", "[" * 100_000 + "]" * 100_000, "", "nested too deeply"),
    ("unknown-top-level", _doc(outputs={}), "", "outputs: unknown field"),
    ("resources-list-in-v2", _doc(resources=[RECORD]), "", "resources: Input should be an object"),
    (
        "record-bad-status",
        _doc(resources={RECORD["address"]: {**RECORD, "status": "broken"}}),
        "",
        "resources[\"gfd/DaemonSet/gpu-operator/gfd\"].status: Input should be 'ready' or 'tainted'",
    ),
    (
        "record-key-mismatch",
        _doc(resources={"gfd/DaemonSet/gpu-operator/other": RECORD}),
        "",
        "resources: key 'gfd/DaemonSet/gpu-operator/other' differs from the record's address",
    ),
    (
        "record-missing-owned",
        _doc(resources={RECORD["address"]: {k: v for k, v in RECORD.items() if k != "owned"}}),
        "",
        'resources["gfd/DaemonSet/gpu-operator/gfd"].owned: field required',
    ),
    (
        "record-with-password",
        _doc(resources={RECORD["address"]: {**RECORD, "owned": {"password": "x"}}}),
        "",
        "owned fields hold credentials",
    ),
    (
        "journal-bad-action",
        _doc(journal=[{"address": "a", "action": "explode", "started_at": "t"}]),
        "",
        "journal[0].action: Input should be",
    ),
]


@pytest.mark.parametrize(
    ("content", "where", "summary"), [case[1:] for case in CORPUS], ids=[case[0] for case in CORPUS]
)
def test_each_damaged_file_gives_one_located_error_with_a_hint(
    tmp_path: Path, content: str | bytes, where: str, summary: str
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    backend.path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(StateError) as caught:
        backend.read()
    error = caught.value
    assert error.where.startswith(str(backend.path) + where), error.where
    assert summary in error.summary, error.summary
    assert "gpuplan state push --force" in error.hint  # no backup yet: repair, or push a good copy


def test_the_hint_points_at_the_backup_when_there_is_one(tmp_path: Path, make_record) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    first = StateFile.new().next_serial()
    backend.write(first)
    backend.write(first.with_record(make_record()).next_serial())
    backend.path.write_text("{")
    with pytest.raises(StateError) as caught:
        backend.read()
    assert f"cp {backend.backup_path} {backend.path}" in caught.value.hint
    backup = backend.read_backup()
    assert backup is not None and backup.serial == 1


def test_a_damaged_state_is_one_error_line_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpuplan.state.json"
    path.write_text(to_json(StateFile.new())[:-3])
    assert cli.run(["state", "list", "--state", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {path}:")
    assert "Traceback" not in err and "Hint:" in err
