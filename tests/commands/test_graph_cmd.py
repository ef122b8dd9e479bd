"""`gpuplan graph -f SPEC [--format text|dot|mermaid]`."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan import cli, errors

SPEC = lab_spec(driver="{owner: external}")


@pytest.fixture
def spec_file(tmp_path: Path) -> str:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    return str(path)


def test_text_is_the_default(spec_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["graph", "-f", spec_file]) == errors.EXIT_OK
    assert capsys.readouterr().out.splitlines() == [
        "driver (external)",
        "toolkit (external)  after driver",
        "devicePlugin (gpuplan)  after toolkit",
        "gfd (gpuplan)  after devicePlugin",
        "dcgmExporter (gpuplan)  after gfd",
        "validator (gpuplan)  after devicePlugin, driver, toolkit",
        "migManager (none)  after gfd, validator",
    ]


@pytest.mark.parametrize(
    ("fmt", "first_line", "edge"),
    [
        ("dot", "digraph gpustack {", '  "toolkit" -> "devicePlugin";'),
        ("mermaid", "flowchart LR", "  toolkit --> devicePlugin"),
    ],
)
def test_dot_and_mermaid(
    fmt: str, first_line: str, edge: str, spec_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(["graph", "-f", spec_file, "--format", fmt]) == errors.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == first_line and edge in out


def test_unknown_format_is_a_usage_error(spec_file: str) -> None:
    assert cli.run(["graph", "-f", spec_file, "--format", "svg"]) == errors.EXIT_USAGE


def test_bad_spec_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC.replace("owner: external}\n  toolkit", "owner: extrnal}\n  toolkit"))
    assert cli.run(["graph", "-f", str(path)]) == errors.EXIT_ERROR
    assert "did you mean 'external'" in capsys.readouterr().err


def test_the_node_pools_are_shown_with_what_they_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_text(
        SPEC
        + "  nodePools:\n"
        + '    - {name: volta, nodeSelector: {pool: volta}, driver: {version: "580.105.08"}}\n'
        + "    - {name: inference, nodeSelector: {pool: inference},"
        + " devicePlugin: {config: {timeSlicing: {replicas: 4}}}}\n"
    )
    assert cli.run(["graph", "-f", str(path)]) == errors.EXIT_OK
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "node pool volta: overrides driver",
        "node pool inference: overrides devicePlugin; labels its nodes "
        "nvidia.com/device-plugin.config=inference",
    ]
    assert cli.run(["graph", "-f", str(path), "--format", "mermaid"]) == errors.EXIT_OK
    assert "  pool_volta -.- driver" in capsys.readouterr().out.splitlines()
