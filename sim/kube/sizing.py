"""How the real control plane and the node agent are tuned to the number of simulated nodes.

A lab and a fleet-1000 run on the same two or more CPU cores here, where a real 1,000-node cluster has a
control plane of its own machines and 1,000 kubelets on 1,000 more. Two settings follow the fleet, each a
knob a real cluster has and large ones turn:

- The node Leases. A kubelet renews its Lease every quarter of ``nodeLeaseDurationSeconds`` (40 s: 10 s),
  and the node lifecycle controller counts a node unreachable once its Lease has not moved for
  ``--node-monitor-grace-period`` (50 s; ``pkg/controller/nodelifecycle/config/v1alpha1/defaults.go``).
  At 1,000 nodes the default is 100 Lease writes a second, which on a shared 2-core machine starves the
  writes the story is about and lets Leases lapse. Past ``LEASE_WRITES_PER_SECOND`` the duration grows
  with the fleet, and the grace period keeps the default's 10 s margin over it, so no node goes
  unreachable because its simulation is busy.
- The client rate limits. The controller manager's clients default to 20 requests a second, burst 30
  (``controller-manager/pkg/clientbuilder``), the scheduler's to 50, burst 100. Kubernetes' own large
  cluster jobs (kubernetes/test-infra, the sig-scalability 5000-node environment) run both with
  ``--kube-api-qps=100`` (and the controller manager with ``--kube-api-burst=100``): with the defaults the
  DaemonSet controller alone needs minutes to create a pod on each of 1,000 nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_LEASE_DURATION_S = 40  # the kubelet's nodeLeaseDurationSeconds
DEFAULT_GRACE_S = 50  # the controller manager's --node-monitor-grace-period
RENEW_FRACTION = 0.25  # the kubelet renews at a quarter of the duration (kubelet.go)
LEASE_WRITES_PER_SECOND = 25
LARGE_CLUSTER_NODES = 100
"""From here on the control plane runs with the large-cluster client limits."""
LARGE_CLUSTER_QPS = 100


@dataclass(frozen=True)
class Sizing:
    """The settings for a cluster of ``nodes`` simulated nodes."""

    nodes: int

    @property
    def lease_duration_seconds(self) -> int:
        renew = max(DEFAULT_LEASE_DURATION_S * RENEW_FRACTION, self.nodes / LEASE_WRITES_PER_SECOND)
        return max(DEFAULT_LEASE_DURATION_S, math.ceil(renew / RENEW_FRACTION))

    @property
    def node_monitor_grace_seconds(self) -> int:
        return self.lease_duration_seconds + DEFAULT_GRACE_S - DEFAULT_LEASE_DURATION_S

    @property
    def large(self) -> bool:
        return self.nodes > LARGE_CLUSTER_NODES

    def controller_manager_args(self) -> list[str]:
        args = [f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s"]
        if self.large:
            args += [f"--kube-api-qps={LARGE_CLUSTER_QPS}", f"--kube-api-burst={LARGE_CLUSTER_QPS}"]
        return args

    def scheduler_args(self) -> list[str]:
        return [f"--kube-api-qps={LARGE_CLUSTER_QPS}"] if self.large else []
