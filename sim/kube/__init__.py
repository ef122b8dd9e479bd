"""The real Kubernetes control plane under the simulated GPU nodes (`sim start --control-plane kube`).

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built by ``controlplane/build`` (or
brought by the user), run as child processes inside a private network namespace; the simulated GPU nodes
act on them through the Kubernetes API as kwok's nodes do (``gpuplan.sim.agent``). See
``docs/control-planes.md``.

- ``binaries``: where the four programs are, and what is missing.
- ``pki``: the cluster's CA, the API server's serving certificate, the service-account signing key.
- ``netns``: the private network namespace and its pod-IP range on loopback.
- ``relay``: the API server's port, reachable from the caller's network namespace.
- ``controlplane``: the four processes: flags, start order, readiness, stop.
"""
