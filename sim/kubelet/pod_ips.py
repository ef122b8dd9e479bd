"""Pod IPs: the addresses the simulated kubelets hand out, in order, wrapping round as host-local IPAM does.

In process the network is a loopback /16 (``127.X.0.0/16``, X from :data:`FIRST_BLOCK`: the pod network
serves it, see ``pod_network``); a node agent against a real control plane takes the cluster's pod CIDR
instead (``PodIps.from_cidr("198.18.0.0/15")``), whose addresses nothing here listens on. Either way the
first address of the network (``.0``) and the gateway (``.1``) are skipped and the broadcast address is never
handed out, as host-local IPAM does with a range's gateway. One allocator serves every node of its owner: the
nodes' ``podCIDR``s are not where pod IPs come from.
"""

from __future__ import annotations

import ipaddress

FIRST_BLOCK, LAST_BLOCK = 128, 254  # 127.X.0.0/16; 127.0.0.0/16 stays for everything else on loopback


class PodIps:
    """``count`` addresses from ``first`` on, handed out in turn (the owner's loop thread only)."""

    def __init__(self, first: ipaddress.IPv4Address, count: int) -> None:
        if count < 1:
            raise ValueError("a pod network needs at least one address")
        self.first = first
        self.count = count
        self._next = 0

    @classmethod
    def loopback(cls, second_octet: int) -> PodIps:
        """``127.<second_octet>.0.2`` - ``127.<second_octet>.255.254``."""
        return cls.from_cidr(f"127.{second_octet}.0.0/16")

    @classmethod
    def from_cidr(cls, cidr: str) -> PodIps:
        """Every address of ``cidr`` but its network address, its ``.1`` and its broadcast address."""
        network = ipaddress.IPv4Network(cidr)
        return cls(network.network_address + 2, network.num_addresses - 3)

    def next(self) -> str:
        ip = str(self.first + self._next % self.count)
        self._next += 1
        return ip

    def is_loopback(self) -> bool:
        return self.first.is_loopback
