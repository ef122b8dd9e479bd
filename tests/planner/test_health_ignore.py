"""``spec.ignore``'s nodes rules in the apply's gates: a check they name is not judged on the nodes they
select, so a node known to be broken does not hold the apply; the passed gate says which nodes it left out,
and every other node and check is judged as before."""

from __future__ import annotations

from typing import Any

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.gates import evaluate
from gpuplan.planner.spec.ignore import IgnoreRule
from tests.planner.test_health import daemonset, node, observe, pod

ALLOCATABLE = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
VALIDATOR = HealthCheck(
    "validator-ready", {"selector": "app=nvidia-operator-validator", "namespace": "gpu-operator"}
)


def rule(selector: str, *checks: str) -> IgnoreRule:
    return IgnoreRule.model_validate({"nodes": {"selector": selector}, "checks": list(checks)})


def fleet(**broken: Any) -> tuple[dict[str, Any], ...]:
    """Two nodes: ``good`` advertises its GPU, ``bad`` what ``broken`` says."""
    return node("good"), node("bad", labels={"lab/broken": "true"}, **broken)


def test_a_waived_check_passes_without_the_broken_node_and_says_so() -> None:
    nodes = fleet(allocatable="0")
    held = evaluate(ALLOCATABLE, observe(daemonset=daemonset(desired=2), nodes=nodes))
    assert (held.state, held.node) == ("progressing", "bad")
    waived = evaluate(
        ALLOCATABLE,
        observe(
            daemonset=daemonset(desired=2), nodes=nodes, ignore=(rule("lab/broken=true", "allocatable"),)
        ),
    )
    assert waived.state == "passed" and waived.message == "allocatable: 1/1 node(s)"
    assert waived.notes == ("allocatable not judged on 1 node(s), as spec.ignore declares: bad",)


def test_a_rule_for_other_checks_or_other_nodes_waives_nothing() -> None:
    nodes = fleet(allocatable="0")
    for ignore in (rule("lab/broken=true", "gfd-labels"), rule("lab/broken=false", "allocatable")):
        status = evaluate(ALLOCATABLE, observe(daemonset=daemonset(desired=2), nodes=nodes, ignore=(ignore,)))
        assert (status.state, status.node, status.notes) == ("progressing", "bad", ())
    # a waived node does not hide a problem on another one
    both = (node("good", allocatable="0"), nodes[1])
    status = evaluate(
        ALLOCATABLE,
        observe(daemonset=daemonset(desired=2), nodes=both, ignore=(rule("lab/broken", "allocatable"),)),
    )
    assert (status.state, status.node) == ("progressing", "good")


def test_a_validator_on_a_waived_node_does_not_hold_the_gate() -> None:
    name = "nvidia-operator-validator"
    pods = (pod(f"{name}-good", "good"), pod(f"{name}-bad", "bad", ready=False))
    nodes = fleet()
    held = evaluate(VALIDATOR, observe(daemonset=daemonset(desired=2), nodes=nodes, pods=pods))
    assert held.state == "progressing" and held.message.startswith("bad: ")
    waived = evaluate(
        VALIDATOR,
        observe(
            daemonset=daemonset(desired=2),
            nodes=nodes,
            pods=pods,
            ignore=(rule("lab/broken=true", "validator-ready"),),
        ),
    )
    assert waived.state == "passed", waived
    assert waived.notes == ("validator-ready not judged on 1 node(s), as spec.ignore declares: bad",)
