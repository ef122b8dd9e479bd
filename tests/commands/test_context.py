"""The group's global options and what they open: every client on the cluster and context that
``--kubeconfig`` / ``--context`` name, and the state backend of ``-f SPEC`` / ``--state``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from gpuplan.context import Globals, state_backend
from gpuplan.errors import ConfigError
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.kubernetes_live import LiveReader
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey

KUBE_SYSTEM = ObjectKey("v1", "Namespace", None, "kube-system")
CLIENTS: list[tuple[Callable[[Globals], Any], type]] = [
    (Globals.reader, KubernetesProvider),
    (Globals.live_reader, LiveReader),
    (Globals.writer, KubernetesWriter),
]


def test_a_command_run_without_the_group_gets_the_defaults() -> None:
    ctx = click.Context(click.Command("plan"))
    assert Globals.of(ctx) == Globals(kubeconfig=None, context=None, color=True)
    ctx.obj = Globals(kubeconfig="k", context="c", color=False)
    assert Globals.of(click.Context(click.Command("sub"), parent=ctx)) == ctx.obj


@pytest.mark.parametrize(("opens", "kind"), CLIENTS)
def test_each_client_reads_the_cluster_of_the_global_kubeconfig(
    kubeconfig: Path, opens: Callable[[Globals], Any], kind: type
) -> None:
    with opens(Globals(kubeconfig=str(kubeconfig), context=None, color=True)) as client:
        assert type(client) is kind
        assert client.read(KUBE_SYSTEM) is not None


@pytest.mark.parametrize(("opens", "kind"), CLIENTS)
def test_each_client_takes_the_global_context(
    kubeconfig: Path, opens: Callable[[Globals], Any], kind: type
) -> None:
    with (
        opens(Globals(kubeconfig=str(kubeconfig), context="elsewhere", color=True)) as client,
        pytest.raises(ConfigError) as raised,
    ):
        client.read(KUBE_SYSTEM)
    assert raised.value.summary == "kubeconfig cannot be used with context elsewhere"


def test_the_state_backend_is_the_state_option_or_beside_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "stack" / "gpustack.yaml"
    assert state_backend(spec, None).path == tmp_path / "stack" / "gpuplan.state.json"
    assert state_backend(spec, tmp_path / "s.json").path == tmp_path / "s.json"


def _spec_with(tmp_path: Path, state: str | None) -> Path:
    spec = tmp_path / "gpustack.yaml"
    text = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
    text += "  namespace: gpu-operator\n"
    spec.write_text(text + (f"  state: {state}\n" if state else ""))
    return spec


def test_spec_state_names_a_kubernetes_state_and_its_lease_duration(tmp_path: Path) -> None:
    from gpuplan.context import state_location
    from gpuplan.state.location import KubernetesLocation

    spec = _spec_with(
        tmp_path, "{backend: kubernetes, namespace: gpu-operator, name: team, leaseDurationSeconds: 7}"
    )
    assert state_location(spec, None) == KubernetesLocation("gpu-operator", "team", 7)
    # --state wins, and the team's lease duration, agreed in the spec, holds for it too
    assert state_location(spec, "kubernetes://other/x") == KubernetesLocation("other", "x", 7)
    assert state_location(spec, tmp_path / "s.json") == tmp_path / "s.json"
    assert state_location(_spec_with(tmp_path, None), None) == tmp_path / "gpuplan.state.json"
    assert state_location(_spec_with(tmp_path, "{backend: local}"), None) == tmp_path / "gpuplan.state.json"


def test_a_spec_state_without_its_names_is_an_error_at_its_line(tmp_path: Path) -> None:
    from gpuplan.context import state_location

    with pytest.raises(ConfigError) as error:
        state_location(_spec_with(tmp_path, "{backend: kubernetes, namespace: gpu-operator}"), None)
    assert error.value.where.endswith("gpustack.yaml:6:10")
    assert "the kubernetes backend needs namespace and name" in error.value.summary
