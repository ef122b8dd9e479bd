"""The ``gpustack.yaml`` equivalent to a GPU Operator ClusterPolicy, or to the gpu-operator chart's values
(``gpuplan init --from-clusterpolicy``, design §7.4).

The ClusterPolicy (``nvidia.com/v1``, facts §1.1) and the chart's values share their section names; the
values file is first laid over the chart's v26.7.0 defaults (facts §1.3) and read as the ClusterPolicy Helm
would render from it. Each operand section maps to the gpuplan component of that name: ``enabled: false``
is ``owner: none``, except the driver and the toolkit, which the operator is told to leave to the host, so
``owner: external``; the image by the operator's ``imagePath()`` rules (facts §1.4); ``env``,
``imagePullPolicy``, ``imagePullSecrets``, ``resources`` and ``args`` as they are. NVIDIADriver CRs
(``driver.useNvidiaDriverCRD``, fleet facts §6) give the driver: the default CR the stack's, each other one
a node pool. Every key set that gpuplan cannot carry is named in :attr:`Translation.not_carried`, never
dropped silently.

Pure: the command reads the objects (or the file) and the view writes the YAML.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.modules import driver

Json = dict[str, Any]

CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")
NVIDIA_DRIVER = ("nvidia.com/v1alpha1", "NVIDIADriver")
MIG_MANAGER = "nvidia-mig-manager"
DRIVER_DAEMONSET = driver.NAME
# gpuplan component -> the ClusterPolicy section of the same operand (facts §1.1)
SECTIONS = {
    "driver": "driver",
    "toolkit": "toolkit",
    "devicePlugin": "devicePlugin",
    "gfd": "gfd",
    "dcgmExporter": "dcgmExporter",
    "validator": "validator",
    "migManager": "migManager",
}
# components the operator leaves to the host when disabled (facts §2.4: driver.enabled=false,
# toolkit.enabled=false on hosts that have them)
_HOST_PROVIDED = ("driver", "toolkit")
_CONTAINER_KEYS = ("env", "imagePullPolicy", "imagePullSecrets", "resources", "args")
_IMAGE_KEYS = ("repository", "image", "version")
# per section: keys handled here (everything else set is reported as not carried over)
_HANDLED: Mapping[str, frozenset[str]] = {
    "driver": frozenset({"kernelModuleType", "upgradePolicy", "manager", "useNvidiaDriverCRD"}),
    "toolkit": frozenset({"installDir"}),
    "devicePlugin": frozenset({"config"}),
    "gfd": frozenset(),
    "dcgmExporter": frozenset({"config", "enablePodLabels", "service"}),
    "validator": frozenset(),
    "migManager": frozenset({"config", "gpuClientsConfig"}),
}
_DAEMONSETS = ("tolerations", "priorityClassName", "labels", "annotations", "updateStrategy", "rollingUpdate")
_TOP_HANDLED = frozenset({*SECTIONS.values(), "daemonsets", "mig", "cdi"})
# sections that do nothing while off: reported only when turned on
_OFF_BY_DEFAULT = ("dcgm", "nodeStatusExporter", "gds", "gdrcopy", "psa", "psp", "sandboxWorkloads")
# chart-only keys of the values file with no ClusterPolicy counterpart (they configure Helm or the operator's
# own Deployment, which gpuplan neither has nor needs)
_MAX_REJECTED = 50
_POOL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
"""A node pool's name (``NodePool.name``: a DNS label of at most 40 characters)."""
_CHART_ONLY = ("platform", "nfd", "node-feature-discovery", "psp", "clusterPolicy", "nameOverride")


@dataclass(frozen=True)
class Translation:
    document: Json
    """The spec, as the data ``gpustack.yaml`` holds."""
    not_carried: tuple[str, ...] = ()
    """``path: value`` of each setting gpuplan has no equivalent for."""
    notes: tuple[str, ...] = ()
    """Comment lines on choices made (an owner, a pool)."""


# ------------------------------------------------------------------------------------------ chart values

# gpu-operator chart v26.7.0 values.yaml: the defaults a values file is laid over (facts §1.3)
CHART_DEFAULTS: Json = {
    "daemonsets": {
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "updateStrategy": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "1"},
    },
    "mig": {"strategy": "single"},
    "cdi": {"enabled": True},
    "driver": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "595.91.07",
        "kernelModuleType": "auto",
        "manager": {
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-driver-manager",
            "version": "v0.12.0",
        },
    },
    "toolkit": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.20.0",
    },
    "devicePlugin": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
    },
    "gfd": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
    },
    "dcgmExporter": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/k8s",
        "image": "dcgm-exporter",
        "version": "4.6.0-4.8.3-distroless",
        "service": {"internalTrafficPolicy": "Cluster"},
    },
    "validator": {"repository": "nvcr.io/nvidia", "image": "gpu-operator", "version": "v26.7.0"},
    "migManager": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "k8s-mig-manager",
        "version": "v0.15.0",
        "config": {"default": "all-disabled", "name": ""},
    },
}

# the chart's labels of every operand's pods (templates/_helpers.tpl "gpu-operator.operand-labels", v26.7.0),
# which templates/clusterpolicy.yaml renders as daemonsets.labels with the values' own after them
OPERAND_LABELS = {"helm.sh/chart": "gpu-operator-v26.7.0", "app.kubernetes.io/managed-by": "gpu-operator"}


def policy_spec_of_values(values: Mapping[str, Any]) -> tuple[Json, list[str]]:
    """The ClusterPolicy ``spec`` Helm renders from ``values`` over the chart defaults, and the chart-only
    keys set (not carried over). ``driver.nvidiaDriverCRD.enabled`` is the policy's ``useNvidiaDriverCRD``;
    ConfigMaps the chart would create from ``data`` are not carried (gpuplan names existing ones)."""
    merged = _merge(CHART_DEFAULTS, values)
    daemonsets = merged.setdefault("daemonsets", {})
    daemonsets["labels"] = {**OPERAND_LABELS, **(daemonsets.get("labels") or {})}
    skipped = [f"{key}: {_short(merged.pop(key))}" for key in _CHART_ONLY if key in merged]
    operator = merged.pop("operator", None)
    if operator:
        skipped.append(f"operator: {_short(operator)}")
    driver = merged.get("driver")
    if isinstance(driver, dict):
        crd = driver.pop("nvidiaDriverCRD", None)
        # the chart's default NVIDIADriver is made of driver.* (fleet facts §6): the same driver section
        if isinstance(crd, Mapping) and crd.get("enabled") and crd.get("deployDefaultCR") is False:
            skipped.append(
                "driver.nvidiaDriverCRD: NVIDIADrivers made outside the chart (read them with "
                "gpuplan init --from-clusterpolicy against the cluster)"
            )
    for section in ("devicePlugin", "migManager"):
        config = (merged.get(section) or {}).get("config")
        if isinstance(config, dict) and (config.get("create") or config.get("data")):
            skipped.append(f"{section}.config.data: the chart creates that ConfigMap; gpuplan names one")
        if isinstance(config, dict):
            config.pop("create", None)
            config.pop("data", None)
    return merged, skipped


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> Json:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# -------------------------------------------------------------------------------------------- translation


def translate(
    policy: Mapping[str, Any],
    *,
    name: str,
    namespace: str | None,
    drivers: Sequence[Mapping[str, Any]] = (),
    skipped: Sequence[str] = (),
    running: Collection[str] | None = None,
    driver_daemonset: Mapping[str, Any] | None = None,
) -> Translation:
    """The spec equivalent to the ClusterPolicy ``spec`` ``policy`` (with the NVIDIADriver CRs ``drivers``,
    used when ``driver.useNvidiaDriverCRD``); ``skipped``: settings already known not to carry over;
    ``running``: the names of the DaemonSets the operator runs, when read from the cluster;
    ``driver_daemonset``: its driver DaemonSet, whose DRIVER_CONFIG_DIGEST the spec keeps."""
    lost = list(skipped)
    notes: list[str] = []
    spec: Json = {"namespace": namespace or "gpu-operator"}
    daemonsets = _daemonsets(_section(policy, "daemonsets"), lost)
    if daemonsets:
        spec["daemonsets"] = daemonsets
    mig = _section(policy, "mig")
    if mig.get("strategy"):
        spec["mig"] = {"strategy": mig["strategy"]}
    cdi = _section(policy, "cdi")
    if "enabled" in cdi:
        spec["cdi"] = {"enabled": bool(cdi["enabled"])}
    lost += _unhandled("cdi", cdi, {"enabled", "default"})
    for component, section in SECTIONS.items():
        spec[component] = _component(component, _section(policy, section), lost, notes)
    if _section(policy, "driver").get("useNvidiaDriverCRD"):
        spec["driver"], pools = _driver_crs(drivers, lost, notes)
        if pools:
            spec["nodePools"] = pools
    _not_deployed(spec, running, notes)
    _keep_driver_digest(spec, driver_daemonset, notes)
    _mig_manager_default(spec, _section(_section(policy, "migManager"), "config"), notes)
    for key, value in policy.items():
        if key in _TOP_HANDLED:
            continue
        if key in _OFF_BY_DEFAULT or isinstance(value, Mapping) and "enabled" in value:
            if isinstance(value, Mapping) and value.get("enabled"):
                lost.append(f"{key}: {_short(value)} (gpuplan has no {key})")
            continue
        if value not in (None, {}, [], ""):
            lost.append(f"{key}: {_short(value)}")
    document = {
        "apiVersion": "gpuplan.io/v1alpha1",
        "kind": "GPUStack",
        "metadata": {"name": name},
        "spec": spec,
    }
    return Translation(accepted(document, lost), tuple(lost), tuple(notes))


def accepted(document: Json, lost: list[str]) -> Json:
    """``document`` without the values the spec model rejects (a tag gpuplan cannot read as a version, a
    number out of range), each named in ``lost``: the file written always validates."""
    from pydantic import ValidationError

    from gpuplan.planner.spec.model import Spec

    for _ in range(_MAX_REJECTED):
        try:
            Spec.model_validate(document, by_alias=True, by_name=False)
            return document
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            path = [p for p in error["loc"] if not (isinstance(p, str) and p.endswith("]"))]
            path += list((error.get("ctx") or {}).get("path", ()))
            if not _drop(document, path, lost, str(error["msg"])):
                break
    return document


def _drop(document: Json, path: Sequence[str | int], lost: list[str], why: str) -> bool:
    """Remove the setting at ``path`` (the field of a component section, not a part of it)."""
    keys = [str(p) for p in path[:3] if isinstance(p, str)]
    parent: Any = document
    for key in keys[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    if not isinstance(parent, dict) or len(keys) < 2 or keys[-1] not in parent:
        return False
    value = parent.pop(keys[-1])
    lost.append(f"{'.'.join(keys[1:])}: {_short(value)} (gpuplan rejects it: {why})")
    return True


def _section(policy: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = policy.get(key)
    return value if isinstance(value, Mapping) else {}


def _daemonsets(section: Mapping[str, Any], lost: list[str]) -> Json:
    """The shared settings, in the operator's pod-template shape: its running operands are adopted as they
    are (``gpuplan takeover`` restarts none of their pods), gpuplan writing the deploy labels they select."""
    out: Json = {"podTemplate": "gpu-operator"}
    for key in ("tolerations", "priorityClassName", "labels", "annotations", "updateStrategy"):
        if section.get(key) not in (None, "", {}):
            out[key] = copy.deepcopy(section[key])
    unavailable = _section(section, "rollingUpdate").get("maxUnavailable")
    if unavailable is not None:
        out["maxUnavailable"] = str(unavailable)
    lost += _unhandled("daemonsets", section, set(_DAEMONSETS))
    return out


def _component(component: str, section: Mapping[str, Any], lost: list[str], notes: list[str]) -> Json:
    out: Json = {}
    enabled = section.get("enabled", True)  # the CRD's default for every operand (facts §1.1)
    if not enabled:
        owner = "external" if component in _HOST_PROVIDED else "none"
        if owner == "external":
            notes.append(f"{component}: disabled in the ClusterPolicy, so the host's: owner external")
        return {"owner": owner}
    out["owner"] = "gpuplan"
    out.update(image_fields(section, component, lost))
    for key in _CONTAINER_KEYS:
        if section.get(key) not in (None, "", [], {}):
            out[key] = copy.deepcopy(section[key])
    out.update(_extra(component, section, lost))
    handled = {"enabled", *_IMAGE_KEYS, *_CONTAINER_KEYS, *_HANDLED[component]}
    lost += _unhandled(component, section, handled)
    return out


def image_fields(section: Mapping[str, Any], where: str, lost: list[str]) -> Json:
    """repository, image and version by the operator's ``imagePath()`` (facts §1.4): the three as they are,
    or a full image path in ``image`` alone (``repo/name:tag`` or ``repo/name@sha256:...``) split so."""
    repository, image, version = (section.get(key) or "" for key in _IMAGE_KEYS)
    if image and not repository and not version:
        repository, image, version = split_image(str(image))
        if not version:
            lost.append(f"{where}.image: {section['image']} (no tag: gpuplan writes its default version)")
    return {
        key: str(value) for key, value in zip(_IMAGE_KEYS, (repository, image, version), strict=True) if value
    }


def split_image(path: str) -> tuple[str, str, str]:
    """``nvcr.io/nvidia/driver:595.91.07`` -> (``nvcr.io/nvidia``, ``driver``, ``595.91.07``)."""
    name, version = path, ""
    if "@" in path:
        name, version = path.split("@", 1)
    elif ":" in path.rsplit("/", 1)[-1]:
        name, version = path.rsplit(":", 1)
    repository, _, image = name.rpartition("/")
    return repository, image, version


def _extra(component: str, section: Mapping[str, Any], lost: list[str]) -> Json:
    out: Json = {}
    if component == "driver":
        if section.get("kernelModuleType"):
            out["kernelModuleType"] = section["kernelModuleType"]
        manager = image_fields(_section(section, "manager"), "driver.manager", lost)
        if manager:
            out["manager"] = manager
        lost += _unhandled("driver.manager", _section(section, "manager"), set(_IMAGE_KEYS))
        policy = _upgrade_policy(_section(section, "upgradePolicy"), lost)
        if policy:
            out["upgradePolicy"] = policy
    elif component == "toolkit" and section.get("installDir"):
        out["installDir"] = section["installDir"]
    elif component == "devicePlugin":
        config = _section(section, "config")
        if config.get("name"):
            out["config"] = {
                "name": config["name"],
                **({"default": config["default"]} if config.get("default") else {}),
            }
    elif component == "dcgmExporter":
        out.update(_dcgm_exporter(section, lost))
    elif component == "migManager":
        for key, target in (("config", "config"), ("gpuClientsConfig", "gpuClientsConfig")):
            if _section(section, key).get("name"):
                out[target] = {"name": _section(section, key)["name"]}
    return out


def _dcgm_exporter(section: Mapping[str, Any], lost: list[str]) -> Json:
    out: Json = {}
    if _section(section, "config").get("name"):
        out["metricsConfigMap"] = _section(section, "config")["name"]
    if section.get("enablePodLabels"):
        out["enablePodLabels"] = True
    service = _section(section, "service")
    if service.get("type"):
        out["serviceType"] = service["type"]
    if service.get("internalTrafficPolicy"):
        out["internalTrafficPolicy"] = service["internalTrafficPolicy"]
    lost += _unhandled("dcgmExporter.service", service, {"type", "internalTrafficPolicy"})
    return out


def _upgrade_policy(section: Mapping[str, Any], lost: list[str]) -> Json:
    out: Json = {}
    if "maxParallelUpgrades" in section:
        out["maxParallelUpgrades"] = int(section["maxParallelUpgrades"])
    if section.get("maxUnavailable") is not None:
        out["maxUnavailable"] = str(section["maxUnavailable"])
    keys: dict[str, tuple[str, ...]] = {
        "podDeletion": ("force", "timeoutSeconds", "deleteEmptyDir"),
        "drain": ("enable", "force", "podSelector", "timeoutSeconds", "deleteEmptyDir"),
    }
    for key, fields in keys.items():
        part = {k: v for k, v in _section(section, key).items() if k in fields}
        if part:
            out[key] = part
        lost += _unhandled(f"driver.upgradePolicy.{key}", _section(section, key), set(fields))
    if section.get("autoUpgrade") is False:
        lost.append("driver.upgradePolicy.autoUpgrade: false (gpuplan upgrades the driver when apply runs)")
    lost += _unhandled(
        "driver.upgradePolicy",
        section,
        {"maxParallelUpgrades", "maxUnavailable", "podDeletion", "drain", "autoUpgrade", "waitForCompletion"},
    )
    return out


def _keep_driver_digest(spec: Json, daemonset: Mapping[str, Any] | None, notes: list[str]) -> None:
    """The operator's DRIVER_CONFIG_DIGEST, for gpuplan to render while the driver's configuration is the
    operator's: gpuplan cannot compute the operator's hash (of its Go structs), and another value would
    restart every driver pod at takeover."""
    if daemonset is None or spec["driver"].get("owner") != "gpuplan" or "version" not in spec["driver"]:
        return
    digest = driver.adopted_digest(daemonset)
    if digest is None:
        return
    spec["driver"]["operatorDigest"] = digest.model_dump(by_alias=True)
    notes.append(
        "driver.operatorDigest: the operator's DRIVER_CONFIG_DIGEST of its driver DaemonSet, rendered while "
        "the driver's configuration stays as it is (its pods are adopted without a restart)"
    )


def _not_deployed(spec: Json, running: Collection[str] | None, notes: list[str]) -> None:
    """The mig-manager enabled but not deployed while other operands are (the operator runs no
    ``nvidia-mig-manager`` where no node is MIG-capable): owner none, as the cluster is, so ``gpuplan
    takeover`` finds the spec matching. With no operand running (a policy not reconciled), the policy's."""
    if not running or spec["migManager"].get("owner") != "gpuplan" or MIG_MANAGER in running:
        return
    spec["migManager"] = {"owner": "none"}
    notes.append(
        f"migManager: enabled in the ClusterPolicy, but the operator runs no {MIG_MANAGER} DaemonSet (no "
        "MIG-capable node): owner none; set it to gpuplan once MIG GPUs join"
    )


def _mig_manager_default(spec: Json, config: Mapping[str, Any], notes: list[str]) -> None:
    """The operator's ``migManager.config.default`` is the geometry of nodes without a
    ``nvidia.com/mig.config`` label; gpuplan's ``mig.config`` is the one it labels the nodes with."""
    default = config.get("default")
    if default and default != "all-disabled" and spec["migManager"].get("owner") == "gpuplan":
        spec.setdefault("mig", {})["config"] = str(default)
        notes.append(
            f"mig.config: the operator's migManager.config.default {default}; the operator applies it to "
            "MIG-capable nodes only, gpuplan to every node of the mig-manager (narrow "
            "migManager.nodeSelector to the MIG nodes where others have GPUs without MIG)"
        )


def _driver_crs(
    drivers: Sequence[Mapping[str, Any]], lost: list[str], notes: list[str]
) -> tuple[Json, list[Json]]:
    """The default NVIDIADriver as the stack's driver, every other one as a node pool (fleet facts §6)."""
    default = [d for d in drivers if _cr_spec(d).get("default")]
    others = [d for d in drivers if not _cr_spec(d).get("default")]
    if not default and len(others) == 1 and not _cr_spec(others[0]).get("nodeSelector"):
        default, others = others, []
    driver: Json = {"owner": "gpuplan"}
    if default:
        driver = _component("driver", _cr_driver(default[0]), lost, notes)
        notes.append(f"driver: from NVIDIADriver {_cr_name(default[0])} (the default)")
    elif not drivers:
        notes.append("driver: useNvidiaDriverCRD is set but no NVIDIADriver exists: gpuplan's defaults")
    pools = []
    for cr in others:
        if not _cr_spec(cr).get("nodeSelector") or not _POOL_NAME.fullmatch(_cr_name(cr)):
            lost.append(
                f"NVIDIADriver {_cr_name(cr)}: a node pool needs a nodeSelector and a name of at most 40 "
                "characters that is a DNS label (add it to spec.nodePools by hand)"
            )
            continue
        pool_lost: list[str] = []
        body = _component("driver", _cr_driver(cr), pool_lost, [])
        body.pop("owner", None)
        lost += [f"NVIDIADriver {_cr_name(cr)}: {item}" for item in pool_lost]
        pools.append(
            {
                "name": _cr_name(cr),
                "nodeSelector": dict(_cr_spec(cr).get("nodeSelector") or {}),
                "driver": body,
            }
        )
    return driver, pools


def _cr_spec(cr: Mapping[str, Any]) -> Mapping[str, Any]:
    return _section(cr, "spec")


def _cr_name(cr: Mapping[str, Any]) -> str:
    return str(_section(cr, "metadata").get("name", ""))


def _cr_driver(cr: Mapping[str, Any]) -> Json:
    """An NVIDIADriver's spec as a ClusterPolicy driver section: its pod settings (``nodeSelector``,
    ``tolerations`` ...) belong to the pool, not the driver."""
    spec = dict(_cr_spec(cr))
    for key in ("default", "nodeSelector", "driverType"):
        spec.pop(key, None)
    if (
        spec.get("image")
        and "/" in str(spec["image"])
        and spec.get("repository") is None
        and spec.get("version")
    ):
        repository, image, _ = split_image(str(spec["image"]) + ":x")
        spec["repository"], spec["image"] = repository, image
    return spec


def _unhandled(prefix: str, section: Mapping[str, Any], handled: set[str] | frozenset[str]) -> list[str]:
    return [
        f"{prefix}.{key}: {_short(value)}"
        for key, value in section.items()
        if key not in handled
        and value is not False  # a feature left off loses nothing
        and value not in (None, "", [], {})
        and not _sub_section_off(value)
    ]


def _sub_section_off(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("enabled") is False and len(value) == 1


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= 80 else text[:77] + "..."
