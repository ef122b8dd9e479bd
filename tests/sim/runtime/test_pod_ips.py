"""Pod IPs are handed out in order from the network the kubelets are given, wrapping round as host-local
IPAM does: a loopback /16 in process, a cluster CIDR for a node agent."""

from __future__ import annotations

import pytest

from gpuplan.sim.kubelet.pod_ips import PodIps


def test_a_loopback_block_starts_after_its_gateway_and_wraps_before_its_broadcast() -> None:
    ips = PodIps.loopback(130)
    assert [ips.next(), ips.next()] == ["127.130.0.2", "127.130.0.3"]
    assert ips.count == 2**16 - 3
    assert ips.is_loopback()


def test_a_cidr_gives_every_address_but_network_gateway_and_broadcast() -> None:
    ips = PodIps.from_cidr("198.18.0.0/30")  # .0 network, .1 gateway, .2 pods, .3 broadcast
    assert [ips.next(), ips.next()] == ["198.18.0.2", "198.18.0.2"]
    assert not ips.is_loopback()
    assert PodIps.from_cidr("198.18.0.0/15").count == 2**17 - 3


def test_a_network_without_room_for_a_pod_is_refused() -> None:
    with pytest.raises(ValueError):
        PodIps.from_cidr("198.18.0.0/31")
