"""``gpuplan force-unlock LOCK_ID``: removes the lock only for the right ID, and says whose it was."""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import cli
from gpuplan.state.local import LocalFileBackend

HOLDER = """
import sys
from pathlib import Path
from gpuplan.state.local import LocalFileBackend
info = LocalFileBackend(Path(sys.argv[1])).lock("apply")
print(info.id, flush=True)
sys.stdin.read()  # a hung run: holds the lock until stdin closes
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_wrong_id_is_refused_naming_the_real_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = LocalFileBackend(tmp_path / "gpuplan.state.json")
    with holder.locked("apply") as info:
        code, _, err = _run(capsys, "force-unlock", "0000", "--state", str(holder.path))
        assert code == 1
        assert (
            err.splitlines()[0]
            == f"Error: {holder.lock_path}: lock ID 0000 does not match the lock on the state"
        )
        assert f"the lock ID is {info.id}" in err
        assert holder.lock_path.exists()


def test_the_lock_of_a_hung_run_is_removed_and_the_next_run_proceeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpustack.yaml").write_text("kind: GPUStack\n")
    state_path = tmp_path / "gpuplan.state.json"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready, "the holder did not start"
        lock_id = child.stdout.readline().strip()
        code, _, err = _run(capsys, "state", "rm", "x/Kind/ns/n", "-f", str(tmp_path / "gpustack.yaml"))
        assert code == 1 and f"gpuplan force-unlock {lock_id}" in err
        record = LocalFileBackend(state_path).lock_holder()
        assert record is not None and record.pid == child.pid
        code, out, err = _run(capsys, "force-unlock", lock_id, "-f", str(tmp_path / "gpustack.yaml"))
        assert code == 0
        assert out.splitlines() == [
            f"Removed lock {lock_id} of pid {child.pid} on host {record.host} "
            f"(operation apply, since {record.created}).",
            "The state is unlocked; the cluster was not changed.",
        ]
        assert "a live process still held the lock file" in err
        with LocalFileBackend(state_path).locked("plan") as info:
            assert info.broken is None
    finally:
        child.kill()
        child.wait(timeout=30)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def test_force_unlock_without_a_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "force-unlock", "abc", "--state", str(tmp_path / "gpuplan.state.json"))
    assert code == 1 and "the state is not locked" in err.splitlines()[0]


def test_the_lock_id_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "force-unlock")
    assert code == 64 and "Missing argument 'LOCK_ID'" in err
