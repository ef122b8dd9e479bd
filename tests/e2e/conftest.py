"""Fixtures for the end-to-end tests on the simulated lab; the apply tests' helpers live in apply_process.py,
the recorder of a read-only command's requests in request_log.py.

pytest's importlib mode keeps test folders off ``sys.path``; this conftest puts this folder there so the test
modules can ``from apply_process import ...``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuplan.cli import run
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from apply_process import HAND  # noqa: E402


@pytest.fixture
def lab_writer(lab_sim: Simulator, kubeconfig: Path) -> Iterator[KubernetesWriter]:
    """A writer on the lab, whose hand-made device plugin is deleted first (so gpuplan's plan has no
    conflict to resolve); closed at teardown."""
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    try:
        writer.delete(HAND)
        yield writer
    finally:
        writer.close()


MixedRunner = Callable[..., tuple[int, str]]
"""``gpuplan(spec_text, *args)``: writes the spec, runs ``gpuplan ARGS -f SPEC`` in process on the ``mixed``
scenario with one state file, and returns its exit code and output."""


@pytest.fixture
def on_mixed(sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> MixedRunner:
    """gpuplan in process against the built-in ``mixed`` scenario (four GPU models, one node each)."""
    sim = sim_factory("mixed", tls=False)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec_file = tmp_path / "gpustack.yaml"

    def gpuplan(text: str, *args: str) -> tuple[int, str]:
        spec_file.write_text(text)
        capsys.readouterr()
        code = run(
            [
                "--kubeconfig",
                str(kubeconfig),
                *args,
                "-f",
                str(spec_file),
                "--state",
                str(tmp_path / "s.json"),
            ]
        )
        return code, capsys.readouterr().out

    return gpuplan
