"""``gpuplan state rbac``: the least a user of a ``kubernetes://`` state needs, as a Role and a RoleBinding.

Callers: :mod:`gpuplan.commands.state_team`. Pure. What the cluster backend
(:mod:`gpuplan.providers.state_secret`) does, and so what the Role allows, in the state's namespace only:

- Secret ``gpuplan-state-<name>`` and its parts ``-part-1`` ... ``-part-N``: get, update, patch; the parts
  also delete (a state that shrinks drops the parts it no longer needs);
- Lease ``gpuplan-lock-<name>``: get, update, patch;
- Secrets and Leases: create, by no name. Kubernetes authorizes a create before the object has a name, so
  a ``resourceNames`` rule never matches one (RBAC docs, "Referring to resources"): this rule lets its user
  create any Secret or Lease in the namespace, though not read or change one it did not name. Keep team
  states in a namespace of their own where that matters.

The parts are named one by one up to ``parts`` (8 by default: 1 MiB + 8 x 512 KiB of gzip, a very large
state); a bigger state needs a Role printed with a higher ``--parts``.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuplan.state.location import KubernetesLocation

DEFAULT_PARTS = 8


def role_name(location: KubernetesLocation) -> str:
    return f"gpuplan-state-{location.name}"


def objects(
    location: KubernetesLocation, subject: dict[str, str], *, parts: int = DEFAULT_PARTS
) -> list[Any]:
    """The Role and the RoleBinding that give ``subject`` the state at ``location``."""
    part_names = [location.part_name(index) for index in range(1, parts + 1)]
    labels = {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.io/state": location.name}
    metadata = {"name": role_name(location), "namespace": location.namespace, "labels": labels}
    rules = [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [location.secret_name, *part_names],
            "verbs": ["get", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": part_names, "verbs": ["delete"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [location.lease_name],
            "verbs": ["get", "update", "patch"],
        },
        # create cannot be limited by resourceNames: the name is not known when a create is authorized
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata,
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name(location)},
        "subjects": [subject],
    }
    return [role, binding]


def render(location: KubernetesLocation, subject: dict[str, str], *, parts: int = DEFAULT_PARTS) -> str:
    header = (
        f"# The least a user of the state {location.url} needs (gpuplan state rbac).\n"
        "# create has no resourceNames: Kubernetes cannot limit a create to a name, so this lets the\n"
        f"# subject create other Secrets and Leases in {location.namespace} too (not read or change them).\n"
    )
    return header + yaml.safe_dump_all(objects(location, subject, parts=parts), sort_keys=False)
