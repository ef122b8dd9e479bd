"""Finding the real control plane's programs: --kube-bin, then $GPUPLAN_KUBE_BIN, then controlplane/build's
folder; a missing one is named with the way to get it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.sim.kube import binaries


def fill(folder: Path, names: tuple[str, ...] = binaries.PROGRAMS, mode: int = 0o755) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(mode)
    return folder


def test_the_explicit_folder_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.ENV, str(fill(tmp_path / "env")))
    explicit = fill(tmp_path / "explicit")
    assert binaries.find(explicit)["kube-apiserver"] == explicit / "kube-apiserver"
    assert binaries.find()["etcd"] == tmp_path / "env" / "etcd"


def test_the_default_is_the_build_folder_under_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(binaries.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert binaries.folder() == tmp_path / "gpuplan" / "kube" / binaries.KUBE_VERSION
    assert not binaries.available()
    fill(binaries.folder())
    assert binaries.available()


@pytest.mark.parametrize(
    ("present", "mode"), [(("etcd", "kube-apiserver"), 0o755), (binaries.PROGRAMS, 0o644)]
)
def test_a_missing_or_unexecutable_program_is_named_with_a_hint(
    tmp_path: Path, present: tuple[str, ...], mode: int
) -> None:
    folder = fill(tmp_path / "bin", present, mode)
    with pytest.raises(binaries.MissingBinaries) as caught:
        binaries.find(folder)
    text = caught.value.render()
    missing = "kube-controller-manager" if mode == 0o755 else "etcd"
    assert text.startswith(f"Error: {folder / missing}: no executable {missing}")
    assert "controlplane/build" in text and "--kube-bin" in text


def test_missing_programs_fail_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "sim",
            "start",
            "--control-plane",
            "kube",
            "--kube-bin",
            str(tmp_path),
        ]
        + ["--kubeconfig", str(tmp_path / "k"), "--detach"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: {tmp_path / 'etcd'}: no executable etcd")
    assert "controlplane/build" in done.stderr
    assert not (tmp_path / "k").exists()
