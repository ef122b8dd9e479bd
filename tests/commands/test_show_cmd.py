"""`gpuplan show PLANFILE [--json]`: a saved plan rendered without a cluster; bad files are one Error:
line."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan import planfile
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.views import plan_human

SPEC = lab_spec(driver="{owner: external}", dcgmExporter="{owner: none}")


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    spec = parse_spec(SPEC, filename="gpustack.yaml")
    cluster = FakeKubernetes()
    plan = make_plan(spec, None, refresh.refresh(cluster, spec, None), created_at="2026-11-29T12:00:00Z")
    path = tmp_path / "saved.plan"
    planfile.write(path, plan, spec_text=SPEC)
    return path


def test_show_renders_the_saved_plan_without_a_cluster(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = saved.parent / "no-kubeconfig"
    assert run(["--kubeconfig", str(absent), "show", str(saved)]) == 0
    out = capsys.readouterr().out
    assert out == plan_human.render(json.loads(saved.read_text()))
    creates = sum(change["action"] == "create" for change in json.loads(saved.read_text())["changes"])
    assert creates > 0
    assert f"Plan: {creates} to add, 0 to change, 0 to replace, 0 to destroy." in out


def test_show_json_prints_the_saved_document(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["show", str(saved), "--json"]) == 0
    saved_document = json.loads(saved.read_text())
    del saved_document["spec_text"], saved_document["digest"]  # the seal is the file's, not the plan's
    assert json.loads(capsys.readouterr().out) == saved_document


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the saved plan"),
        ("garbage", "the saved plan is not JSON"),
        ('{"format_version": "1", "changes": []}', "the plan file carries no seal"),
    ],
)
def test_bad_plan_files_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "bad.plan"
    if content is not None:
        path.write_text(content)
    assert run(["show", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {path}: {message}") and "Traceback" not in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_on_a_terminal_unless_no_color(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for args, coloured in ((["show", str(saved)], True), (["--no-color", "show", str(saved)], False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stdout", terminal)
        assert run(args) == 0
        assert ("\033[" in terminal.getvalue()) is coloured, args
        assert "to add, 0 to change" in terminal.getvalue()
