"""`gpuplan validate` warns about a component version that is not a known release of its image (exit 0),
naming the known releases; digests, other image names and components gpuplan does not own are not checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_stack import LAB_HEADER, LAB_SPEC, STACK_HEADER

from gpuplan import cli, errors


def validate(tmp_path: Path, text: str) -> int:
    path = tmp_path / "gpustack.yaml"
    path.write_text(text)
    return cli.run(["validate", "-f", str(path)])


def test_an_unreleased_device_plugin_version_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = validate(tmp_path, LAB_HEADER + "  devicePlugin: {version: v0.99.0}\n")
    out = capsys.readouterr().out.splitlines()
    assert code == errors.EXIT_OK
    assert out == [
        "Warning: devicePlugin: version v0.99.0 is not a known release of nvcr.io/nvidia/k8s-device-plugin; "
        "its pods would fail to pull the image",
        "  Hint: known releases, newest first: v0.20.1, v0.20.0, v0.19.3, v0.19.2, v0.19.1, v0.19.0, "
        "v0.18.2, v0.18.1 and 36 older",
        "The configuration is valid. (1 warning)",
    ]


def test_the_driver_and_its_manager_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = validate(
        tmp_path, STACK_HEADER + '  driver: {version: "595.91.99", manager: {version: v0.99.1}}\n'
    )
    out = capsys.readouterr().out
    assert code == errors.EXIT_OK
    assert "Warning: driver: version 595.91.99 is not a known release of nvcr.io/nvidia/driver" in out
    assert "Hint: known releases, newest first: 610.57.04, 595.91.07," in out
    assert "Warning: driver: manager version v0.99.1 is not a known release of" in out


@pytest.mark.parametrize(
    "section",
    [
        "  dcgmExporter: {version: 4.5.2-4.8.1-distroless}\n",  # an older release
        "  devicePlugin: {version: " + "sha256:" + "a" * 64 + "}\n",  # a digest
        "  devicePlugin: {version: v0.99.0, image: my-plugin}\n",  # another image
        "  gfd: {owner: none}\n  devicePlugin: {owner: external}\n",
    ],
)
def test_known_releases_digests_and_other_images_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str
) -> None:
    code = validate(tmp_path, LAB_HEADER + section)
    assert code == errors.EXIT_OK
    assert "not a known release" not in capsys.readouterr().out


def test_the_lab_stack_names_known_releases_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = validate(tmp_path, LAB_SPEC)
    assert code == errors.EXIT_OK
    assert capsys.readouterr().out == "The configuration is valid.\n"
