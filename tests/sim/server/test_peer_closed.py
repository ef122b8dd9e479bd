"""How a watch tells that its client went: a connection whose descriptor lies past ``select``'s FD_SETSIZE
(a simulator of thousands of nodes holds a socket per pod listener) stays open until its client closes it."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from gpuplan.sim.api.wire import peer_closed

HIGH_FD = 1500
"""A descriptor number past FD_SETSIZE (1024), where ``select.select`` refuses to look."""


@pytest.fixture
def high_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair whose server end has the descriptor :data:`HIGH_FD`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
        pytest.skip(f"the hard limit of open files ({hard}) is below {HIGH_FD}")
    if soft != resource.RLIM_INFINITY and soft <= HIGH_FD:
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH_FD + 1, hard))
    server, client = socket.socketpair()
    high = socket.socket(fileno=os.dup2(server.fileno(), HIGH_FD))
    server.close()
    try:
        yield high, client
    finally:
        high.close()
        client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


Pair = tuple[socket.socket, socket.socket]


def test_a_quiet_client_past_fd_setsize_is_still_there(high_pair: Pair) -> None:
    server, _client = high_pair
    assert server.fileno() == HIGH_FD
    assert not peer_closed(server)


def test_a_client_past_fd_setsize_that_closed_is_gone(high_pair: Pair) -> None:
    server, client = high_pair
    client.close()
    assert peer_closed(server)


def test_a_client_that_closed_is_gone() -> None:
    server, client = socket.socketpair()
    try:
        assert not peer_closed(server)
        client.close()
        assert peer_closed(server)
    finally:
        server.close()
