"""What kube-controller-manager writes into every namespace: the ``default`` ServiceAccount and the
``kube-root-ca.crt`` ConfigMap.

- The serviceaccount controller (pkg/controller/serviceaccount/serviceaccounts_controller.go) creates the
  ServiceAccount ``default`` in each namespace that is not terminating.
- The root-ca-cert-publisher (pkg/controller/certificates/rootcacertpublisher/publisher.go) creates the
  ConfigMap ``kube-root-ca.crt`` holding the cluster CA as ``ca.crt``, with its description annotation:
  what a pod's ``kube-api-access-`` volume projects (``sim.api.admission``).

Both act when a namespace appears, and once at start for the namespaces the store was seeded with. Unlike
the real controllers they do not watch the ServiceAccount and ConfigMap themselves: a deleted ``default``
account or an edited CA ConfigMap stays as it was left (the simulator's cache holds neither kind).

Driven by the loop (``gpuplan.sim.controllers.loop``), as ``kube-controller-manager``.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.sim.api import admission
from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.controllers.cache import Change, Obj, resource_type
from gpuplan.sim.controllers.loop import Loop

MANAGER = "kube-controller-manager"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such "
    "as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
    "distributions of Kubernetes clusters."
)


class NamespaceDefaults:
    """Creates each namespace's ``default`` ServiceAccount and ``kube-root-ca.crt`` ConfigMap."""

    def __init__(self, loop: Loop, ca_pem: Callable[[], bytes]) -> None:
        self.loop = loop
        self.store = loop.store
        self.ca_pem = ca_pem
        self._pending: set[str] = set()
        self._started = False
        registry = loop.store.registry
        self._sa_rt = resource_type(registry, "v1", "ServiceAccount")
        self._cm_rt = resource_type(registry, "v1", "ConfigMap")
        self._ns_rt = resource_type(registry, "v1", "Namespace")

    def on_change(self, change: Change) -> None:
        if change.kind == "namespaces" and change.new is not None and change.old is None:
            self._pending.add(change.key[1])

    def flush(self) -> bool:
        if not self._started:
            self._started = True
            self._pending.update(ns["metadata"]["name"] for ns in self.store.list(self._ns_rt).items)
        if not self._pending:
            return False
        pending, self._pending = sorted(self._pending), set()
        for namespace in pending:
            self._fill(namespace)
        return True

    def _fill(self, namespace: str) -> None:
        ca = self.ca_pem().decode()
        objects: list[tuple[ResourceType, Obj]] = [
            (self._sa_rt, {"metadata": {"name": admission.DEFAULT_SERVICE_ACCOUNT}}),
        ]
        if ca:
            objects.append(
                (
                    self._cm_rt,
                    {
                        "metadata": {
                            "name": admission.ROOT_CA_CONFIGMAP,
                            "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION},
                        },
                        "data": {"ca.crt": ca},
                    },
                )
            )
        for rt, obj in objects:
            obj.update(apiVersion="v1", kind=rt.kind)
            try:
                self.store.create(rt, obj, namespace=namespace, manager=MANAGER)
            except store_mod.ApiError as error:
                # 409: already there; 403/404: the namespace is terminating or gone meanwhile.
                if error.code not in (403, 404, 409):
                    raise
