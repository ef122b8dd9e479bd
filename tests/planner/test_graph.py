"""The dependency graph: deterministic order, targets with their dependencies, cycles named, three formats."""

from __future__ import annotations

import pytest
from lab_stack import lab_spec

from gpuplan import errors
from gpuplan.modules.base import Owner
from gpuplan.planner import graph
from gpuplan.planner.spec import model as spec

LAB = lab_spec(validator="{owner: none}")


@pytest.fixture
def lab_graph() -> graph.Graph:
    return graph.build(spec.parse_spec(LAB, filename="gpustack.yaml"))


def test_order_follows_the_stack_layers(lab_graph: graph.Graph) -> None:
    assert lab_graph.order() == [
        "driver",
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
        "migManager",
    ]
    assert lab_graph.reverse_order() == [
        "migManager",
        "validator",
        "dcgmExporter",
        "gfd",
        "devicePlugin",
        "toolkit",
        "driver",
    ]


def test_every_dependency_comes_first(lab_graph: graph.Graph) -> None:
    order: list[str] = list(lab_graph.order())
    for name, deps in lab_graph.depends_on.items():
        assert all(order.index(dep) < order.index(name) for dep in deps), name
    assert set(lab_graph.depends_on["validator"]) == {"driver", "toolkit", "devicePlugin"}


def test_ties_are_broken_by_name_whatever_the_insertion_order() -> None:
    owners: dict[str, Owner] = {"b": "gpuplan", "a": "gpuplan", "c": "gpuplan", "d": "gpuplan"}
    deps = {"d": ["c", "a"], "c": [], "b": [], "a": []}
    forward = graph.Graph(owners, deps).order()
    backward = graph.Graph(dict(reversed(list(owners.items()))), deps).order()
    assert forward == backward == ["a", "b", "c", "d"]


def test_owners_come_from_the_spec(lab_graph: graph.Graph) -> None:
    assert lab_graph.owners == {
        "driver": "external",
        "toolkit": "external",
        "devicePlugin": "gpuplan",
        "gfd": "gpuplan",
        "dcgmExporter": "gpuplan",
        "validator": "none",
        "migManager": "none",
    }


def test_target_includes_its_dependencies(lab_graph: graph.Graph) -> None:
    assert lab_graph.with_dependencies(["gfd"]) == {"driver", "toolkit", "devicePlugin", "gfd"}
    assert lab_graph.with_dependencies(["driver"]) == {"driver"}
    assert lab_graph.with_dependencies(["dcgmExporter", "validator"]) == set(lab_graph.owners) - {
        "migManager"
    }


def test_unknown_target_suggests_the_component(lab_graph: graph.Graph) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        lab_graph.with_dependencies(["devicePlugn"])
    assert "did you mean 'devicePlugin'" in caught.value.hint


def test_cycle_is_named_from_a_synthetic_module_set() -> None:
    owners: dict[str, Owner] = dict.fromkeys(("alpha", "beta", "gamma", "delta"), "gpuplan")
    with pytest.raises(graph.DependencyCycleError) as caught:
        graph.Graph(owners, {"alpha": ["gamma"], "beta": ["alpha"], "gamma": ["beta"], "delta": ["alpha"]})
    assert caught.value.summary == "dependency cycle: alpha -> beta -> gamma -> alpha"
    assert isinstance(caught.value, errors.ConfigError)


def test_self_dependency_is_a_cycle() -> None:
    with pytest.raises(graph.DependencyCycleError, match="a -> a"):
        graph.Graph({"a": "gpuplan"}, {"a": ["a"]})


def test_dependency_on_an_unknown_component_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="unknown component"):
        graph.Graph({"a": "gpuplan"}, {"a": ["ghost"]})


def test_text_format_lists_owner_and_dependencies(lab_graph: graph.Graph) -> None:
    lines = lab_graph.to_text().splitlines()
    assert lines[0] == "driver (external)"
    assert lines[2] == "devicePlugin (gpuplan)  after toolkit"
    assert lines[-2] == "validator (none)  after devicePlugin, driver, toolkit"
    assert lines[-1] == "migManager (none)  after gfd, validator"


def test_dot_format_has_one_edge_per_dependency(lab_graph: graph.Graph) -> None:
    dot = lab_graph.to_dot()
    assert dot.startswith("digraph gpustack {") and dot.rstrip().endswith("}")
    edges = [line.strip() for line in dot.splitlines() if "->" in line]
    assert len(edges) == sum(len(deps) for deps in lab_graph.depends_on.values())
    assert '"driver" -> "toolkit";' in edges
    assert '"driver" [label="driver\\n(external)", style=dashed];' in dot


def test_mermaid_format(lab_graph: graph.Graph) -> None:
    mermaid = lab_graph.to_mermaid().splitlines()
    assert mermaid[0] == "flowchart LR"
    assert '  gfd["gfd (gpuplan)"]' in mermaid
    assert "  gfd --> dcgmExporter" in mermaid
    assert sum("-->" in line for line in mermaid) == 9
