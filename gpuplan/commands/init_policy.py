"""``gpuplan init --from-clusterpolicy [--values FILE]``: the spec equivalent to the installed GPU Operator.

Reads the one ClusterPolicy (``nvidia.com/v1``, cluster-scoped), the NVIDIADriver CRs and the DaemonSets
(which operands run, the driver's digest) of the cluster of ``--kubeconfig`` / ``--context`` (lists only,
nothing written), or, with ``--values``, a values file of the gpu-operator chart (no cluster); translates it
(``planner/observe/clusterpolicy.py``) and writes the commented spec (``views/policy_spec.py``). What does
not carry over is listed at the top of the file and summed up on stderr.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from gpuplan import errors
from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.context import Globals
from gpuplan.planner.observe import clusterpolicy

POLICY_CRD = "clusterpolicies.nvidia.com/v1"
VALUES_HINT = (
    "or start from the chart's values instead: gpuplan init --from-clusterpolicy --values values.yaml"
)


def from_values(path: Path, *, name: str) -> tuple[clusterpolicy.Translation, str]:
    from gpuplan.fileio import SPEC_LIMIT, read_text_bounded
    from gpuplan.planner.spec import yamlpos

    text = read_text_bounded(path, limit=SPEC_LIMIT, what="values file", error=errors.ConfigError)
    data, positions = yamlpos.load(text, filename=str(path))
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise errors.ConfigError(
            f"the values file must be a mapping, not a {type(data).__name__}",
            where=positions.where(()),
            hint="pass the gpu-operator chart's values (helm get values -a <release> > values.yaml)",
        )
    policy, skipped = clusterpolicy.policy_spec_of_values(data)
    return clusterpolicy.translate(policy, name=name, namespace=None, skipped=skipped), f"the values {path}"


def from_cluster(ctx: click.Context, *, name: str) -> tuple[clusterpolicy.Translation, str]:
    options = Globals.of(ctx)
    with nothing_changed(READING), options.reader() as provider:
        policies = provider.list_reduced(*clusterpolicy.CLUSTER_POLICY, _item)
        drivers = provider.list_reduced(*clusterpolicy.NVIDIA_DRIVER, _item) if policies else []
        daemonsets = provider.list_reduced("apps/v1", "DaemonSet", _place) if policies else []
    where = f"context {options.context}" if options.context else "the current cluster"
    policy = _the_one(policies, where)
    spec, status = policy.get("spec"), policy.get("status")
    namespace = status.get("namespace") if isinstance(status, Mapping) else None
    translation = clusterpolicy.translate(
        spec if isinstance(spec, Mapping) else {},
        name=name,
        namespace=namespace if isinstance(namespace, str) else None,
        drivers=drivers,
        running={place[1] for place, _ in daemonsets if place[0] == namespace},
        driver_daemonset=next(
            (ds for place, ds in daemonsets if place == (namespace, clusterpolicy.DRIVER_DAEMONSET)), None
        ),
    )
    return translation, f"ClusterPolicy {_name(policy)} of {where}"


def _item(item: dict[str, Any]) -> dict[str, Any]:
    return item


def _place(item: dict[str, Any]) -> tuple[tuple[str, str], dict[str, Any] | None]:
    """(namespace, name) of a listed DaemonSet, and the object itself if it is the operator's driver."""
    metadata = item.get("metadata") or {}
    place = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    return place, item if place[1] == clusterpolicy.DRIVER_DAEMONSET else None


def _name(policy: Mapping[str, Any]) -> str:
    metadata = policy.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _the_one(policies: list[dict[str, Any]], where: str) -> dict[str, Any]:
    if not policies:
        raise errors.GpuplanError(
            f"no ClusterPolicy ({POLICY_CRD}, cluster-scoped) in {where}",
            hint="is the GPU Operator installed there (kubectl get clusterpolicies)? " + VALUES_HINT,
        )
    if len(policies) > 1:
        names = ", ".join(sorted(_name(p) for p in policies))
        raise errors.GpuplanError(
            f"{len(policies)} ClusterPolicies in {where} ({names}): which one the operator runs is unclear",
            hint="delete the extra ones (the operator ignores all but one), " + VALUES_HINT,
        )
    return policies[0]


def summarise(translation: clusterpolicy.Translation, output: Path | None) -> None:
    if not translation.not_carried:
        return
    where = f"at the top of {output}" if output is not None else "at the top of the spec"
    keys = ", ".join(item.split(":", 1)[0] for item in translation.not_carried)
    click.echo(
        f"Note: {len(translation.not_carried)} setting(s) not carried over, listed {where}: {keys}", err=True
    )
