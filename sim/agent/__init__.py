"""The simulated GPU nodes as a client of a Kubernetes API server (the built-in one or a real one): the
``NodeAgent`` (``node_agent``), its ``RemoteStore`` (``remote_store``: the store verbs over HTTPS, one
``Reflector`` per kind), and the node Leases (``leases``). docs/sim-internals.md "The node agent"."""

from gpuplan.sim.agent.node_agent import NodeAgent
from gpuplan.sim.agent.remote_store import RemoteStore, WatchOptions

__all__ = ["NodeAgent", "RemoteStore", "WatchOptions"]
