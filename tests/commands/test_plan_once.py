"""One plan computes each fact once: `gpuplan plan` and the plan `gpuplan apply` shows render the desired
objects once and build the dependency graph once, whatever reads the refresh, the plan and the eviction
lists make."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lab_stack import LAB_SPEC

from gpuplan.cli import run
from gpuplan.modules import catalog
from gpuplan.planner import graph


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    return path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each costly step ran: the render of every desired object, the graph's build."""
    counted: Counter[str] = Counter()

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(catalog, "render_all", counting("render_all", catalog.render_all))
    monkeypatch.setattr(graph, "build", counting("graph.build", graph.build))
    return counted


@pytest.mark.parametrize("targets", [(), ("--target", "dcgmExporter")])
def test_a_plan_renders_once_and_builds_the_graph_once(
    spec_file: Path,
    kubeconfig: Path,
    calls: Counter[str],
    capsys: pytest.CaptureFixture[str],
    targets: tuple[str, ...],
) -> None:
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--json", *targets]) == 0
    assert '"changes"' in capsys.readouterr().out
    assert calls == {"render_all": 1, "graph.build": 1}


def test_the_plan_apply_shows_renders_once_and_builds_the_graph_once(
    spec_file: Path, kubeconfig: Path, calls: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # without a terminal apply shows the plan and refuses: what ran is the planning alone
    assert run(["--kubeconfig", str(kubeconfig), "apply", "-f", str(spec_file)]) == 1
    assert "Plan: 28 to add" in capsys.readouterr().out
    assert calls == {"render_all": 1, "graph.build": 1}
