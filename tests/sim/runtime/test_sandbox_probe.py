"""The sandbox probe: a host that cannot make a process sandbox says why, so those tests skip with it."""

from __future__ import annotations

import shutil

import pytest

from gpuplan.sim.kubelet import sandbox


def test_a_probe_that_fails_names_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.available.cache_clear()
    monkeypatch.setattr(sandbox.sys, "executable", shutil.which("false") or "/bin/false")
    try:
        assert sandbox.available() == "the probe failed"
    finally:
        sandbox.available.cache_clear()


def test_a_host_that_refuses_the_namespaces_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise sandbox.SandboxError("unshare the mount namespace: Operation not permitted")

    monkeypatch.setattr(sandbox, "enter_namespaces", refuse)
    monkeypatch.setattr(sandbox.sys, "argv", ["sandbox", "--probe"])
    with pytest.raises(SystemExit) as exited:
        monkeypatch.setattr(sandbox.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
        sandbox.main()
    assert exited.value.code == sandbox.START_ERROR
    assert capsys.readouterr().err.strip() == (
        "cannot make a sandbox here: unshare the mount namespace: Operation not permitted"
    )
