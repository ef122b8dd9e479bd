"""The real control plane's settings follow the fleet: a lab keeps Kubernetes' defaults, a fleet-1000 gets
Leases it can renew on a shared machine and the large-cluster client limits."""

from __future__ import annotations

from gpuplan.sim.kube.sizing import LEASE_WRITES_PER_SECOND, Sizing


def _flag(args: list[str], name: str) -> str | None:
    found = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return found[0] if found else None


def test_a_lab_keeps_the_kubelet_and_controller_manager_defaults() -> None:
    lab = Sizing(nodes=1)
    assert lab.lease_duration_seconds == 40
    assert _flag(lab.controller_manager_args(), "node-monitor-grace-period") == "50s"
    assert _flag(lab.controller_manager_args(), "kube-api-qps") is None
    assert lab.scheduler_args() == []


def test_a_fleet_renews_its_leases_within_the_write_budget_and_keeps_the_grace_margin() -> None:
    for nodes in (100, 1000, 10000):
        sizing = Sizing(nodes=nodes)
        renew = sizing.lease_duration_seconds / 4
        assert nodes / renew <= LEASE_WRITES_PER_SECOND
        grace = _flag(sizing.controller_manager_args(), "node-monitor-grace-period")
        assert grace == f"{sizing.lease_duration_seconds + 10}s"
    assert Sizing(nodes=1000).lease_duration_seconds > 40


def test_past_a_hundred_nodes_the_clients_get_the_large_cluster_limits() -> None:
    fleet = Sizing(nodes=1000)
    assert _flag(fleet.controller_manager_args(), "kube-api-qps") == "100"
    assert _flag(fleet.controller_manager_args(), "kube-api-burst") == "100"
    assert _flag(fleet.scheduler_args(), "kube-api-qps") == "100"
    assert Sizing(nodes=100).scheduler_args() == []
