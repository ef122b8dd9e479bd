"""Fixtures for the node agent's tests: the built-in API server as the control plane (``Simulator(...,
kubelets=False)``) and node agents connected to it over HTTPS with its token and CA."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from gpuplan.sim.agent import NodeAgent
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory


class AgentFactory(Protocol):
    def __call__(self, sim: Simulator, scenario: str | dict[str, Any] = ..., **kwargs: Any) -> NodeAgent: ...


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


@pytest.fixture
def control_plane(sim_factory: SimFactory) -> Callable[..., Simulator]:
    """A Simulator that runs no node: the API server, the controllers and the scheduler."""

    def start(scenario: str = "lab", **kwargs: Any) -> Simulator:
        return sim_factory(scenario, kubelets=False, **kwargs)

    return start


@pytest.fixture
def agent_factory() -> Iterator[AgentFactory]:
    """Starts node agents; at teardown stops them, fails on what their handlers raised and on any thread
    they left running."""
    before: set[threading.Thread] | None = None
    started: list[NodeAgent] = []

    def start(sim: Simulator, scenario: str | dict[str, Any] = "lab", **kwargs: Any) -> NodeAgent:
        nonlocal before
        if before is None:
            before = _threads()  # the control plane's threads are running by now
        agent = NodeAgent(scenario, sim.url, sim.token, sim.ca_pem, **kwargs)
        started.append(agent)
        return agent.start()

    yield start
    errors: list[BaseException] = []
    for agent in reversed(started):
        agent.stop()
        errors += agent.errors
    assert not errors, f"the node agent's kubelets raised: {errors!r}"
    left = {t for t in _threads() - (before or set()) if t.name.startswith(("gpuplan-agent", "gpuplan-sim-"))}
    assert not left, f"threads left behind: {sorted(t.name for t in left)}"
