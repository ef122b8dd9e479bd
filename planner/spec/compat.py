"""Compatibility rules of facts §10: what the spec alone tells, and what it means for the nodes' GPUs.

:func:`check_spec` needs no cluster (``gpuplan validate``); :func:`check_nodes` applies the rules to the GPUs
the nodes report (plan). Findings are data (severity, component, node, message, hint); the caller decides how
to show them and whether errors block. The nodes' GPUs are what GFD's labels or, before GFD has run, NFD's
NodeFeature say (``planner/facts.py``); a node no source identified gets a warning saying so instead of a
guess.

Rules: driver branch vs architecture (R595+ refused on Volta and older: last branch R580; Blackwell ≥ 570.26,
B200 ≥ 570.133.20; Hopper ≥ 525), branches not in the GPU Operator v26.7 matrix, kernel module type vs
architecture, MIG strategy on GPUs that are not MIG-capable, a MIG config whose profiles a node's GPU lacks
(or a config the operator's default file does not have), MPS on MIG GPUs or with the mixed strategy, MPS
replicas above 16 before Turing, a gpuplan driver on nodes with a host driver, an external driver version
that the nodes do not report, and components left without the layer they need. :func:`check_fleet` adds what
cannot become healthy on the nodes as they are: an external toolkit on nodes without the nvidia runtime
handler, and a nodeSelector that matches no node.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gpuplan.modules import mig_parted, releases
from gpuplan.modules.base import ComponentConfig, ComponentName
from gpuplan.modules.device_plugin import sharing_mode
from gpuplan.modules.driver import DriverManager
from gpuplan.planner import pools
from gpuplan.planner.facts import NFD_GPU_LABELS, NodeFacts, pool_labels
from gpuplan.planner.spec import yamlpos
from gpuplan.planner.spec.model import Spec

SUPPORTED_BRANCHES = (610, 595, 580, 535)  # GPU Operator v26.7.0 component matrix
LAST_BRANCH_BEFORE_TURING = 580
MIN_BLACKWELL = (570, 26)
MIN_B200 = (570, 133, 20)
MIN_HOPPER = (525,)
MPS_MAX_BEFORE_TURING = 16  # the device plugin's MPS limit below compute capability 7.5 (values.py)
TURING = (7, 5)


@dataclass(frozen=True)
class Finding:
    severity: Literal["error", "warning"]
    component: ComponentName | None
    node: str | None
    message: str
    hint: str = ""
    gpu: str | None = None
    """The node's GPU, on findings of the rules that read it (an error among them refuses the plan)."""


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"570.133.20"`` -> ``(570, 133, 20)``; None for a digest or anything else."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return None


def blocking(findings: Sequence[Finding]) -> list[Finding]:
    """The findings that make validate and plan fail."""
    return [finding for finding in findings if finding.severity == "error"]


def target_driver_version(spec: Spec) -> str | None:
    """The driver version the nodes will run: the one gpuplan installs, or the one an external owner
    promises."""
    driver = spec.spec.driver
    if driver.owner == "gpuplan":
        return driver.version
    if driver.owner == "external":
        return driver.explicit_version()
    return None


def check_spec(spec: Spec) -> list[Finding]:
    """What the spec alone tells, without a cluster."""
    return [
        *_branch_support(spec),
        *_missing_layers(spec),
        *_sharing_vs_mig(spec),
        *_host_toolkit_root(spec),
        *_mig_config_name(spec),
        *_pool_notes(spec),
    ]


def check_meanings(spec: Spec, text: str, *, filename: str) -> list[Finding]:
    """Warnings where the spec's text means what it did not mean before (nothing is migrated silently): a
    ``migManager`` section without an owner meant off, and now, as ``{}`` for every component, means gpuplan
    runs the mig-manager (design §8.3). A spec whose MIG config needs the mig-manager never validated with
    it off, so it never relied on that."""
    data, positions = yamlpos.load(text, filename=filename)
    section = ((data or {}).get("spec") or {}).get("migManager") if isinstance(data, dict) else None
    if not isinstance(section, Mapping) or "owner" in section or spec.spec.mig_manager.owner != "gpuplan":
        return []
    if spec.spec.mig.config != "all-disabled" or any(pool.mig is not None for pool in spec.spec.node_pools):
        return []
    written = "migManager: {}" if not section else "a migManager section without owner"
    return [
        Finding(
            "warning",
            "migManager",
            None,
            f"{positions.where(('spec', 'migManager'), key=True)}: {written} now means gpuplan runs the "
            "mig-manager, as {} does for every component (it meant off before): the next apply creates it",
            "to keep it off, set migManager: {owner: none}",
        )
    ]


GFD_LABEL_PREFIX = "nvidia.com/gpu."


def _pool_notes(spec: Spec) -> Iterator[Finding]:
    """What a node pool's settings need that the stack may not give: a mig-manager for ``mig``, and labels
    that exist before the pool's driver runs."""
    for pool in spec.spec.node_pools:
        if pool.mig is not None and spec.spec.mig_manager.owner == "none":
            yield Finding(
                "warning",
                None,
                None,
                f"node pool {pool.name}: gpuplan labels its nodes nvidia.com/mig.config={pool.mig.config}, "
                "but no mig-manager in this stack applies it: the GPUs keep their MIG geometry",
                "run NVIDIA's mig-manager on these nodes (it reads the label), or remove nodePools[].mig",
            )
        # the GPU identity keys are known before GFD (NFD's PCI id): gpuplan labels the pool's nodes itself
        gfd_keys = sorted(
            key
            for key in pool.node_selector
            if key.startswith(GFD_LABEL_PREFIX) and key not in pools.IDENTITY_LABELS
        )
        if pool.driver is not None and spec.spec.driver.owner == "gpuplan" and gfd_keys:
            yield Finding(
                "warning",
                "driver",
                None,
                f"node pool {pool.name} selects nodes by {', '.join(gfd_keys)}, which GPU Feature Discovery "
                "writes only once a driver runs: until then its nodes get the stack's driver (select the GPU "
                "model by nvidia.com/gpu.product, which gpuplan knows before GFD runs)",
                "select the pool by a label NFD writes before any driver (deviceLabelFields [vendor, device] "
                "gives feature.node.kubernetes.io/pci-10de_<device>.present; or a NodeFeatureRule on "
                "pci.device, fleet facts §1.4) or by one of your own",
            )


def check_releases(spec: Spec) -> list[Finding]:
    """Warnings for versions of components gpuplan owns that are not known releases of their image (their
    pods would fail to pull); a digest or a non-default image name is not checked."""
    findings = []
    for name, config in spec.components().items():
        if config.owner == "gpuplan":
            findings += _release_findings(name, "", config, releases.KNOWN[name])
    driver = spec.spec.driver
    if driver.owner == "gpuplan":
        findings += _release_findings("driver", "manager ", driver.manager, releases.DRIVER_MANAGER)
    return findings


def _release_findings(
    component: ComponentName, part: str, image: ComponentConfig | DriverManager, known: tuple[str, ...]
) -> list[Finding]:
    default_image = type(image).model_fields["image"].default
    if image.image != default_image or image.version.startswith("sha256:") or image.version in known:
        return []
    shown = ", ".join(reversed(known[-8:]))
    older = f" and {len(known) - 8} older" if len(known) > 8 else ""
    return [
        Finding(
            "warning",
            component,
            None,
            f"{part}version {image.version} is not a known release of {image.repository}/{image.image}; "
            "its pods would fail to pull the image",
            f"known releases, newest first: {shown}{older}",
        )
    ]


def _branch_support(spec: Spec) -> Iterator[Finding]:
    version = target_driver_version(spec)
    parsed = version_tuple(version) if version else None
    if parsed and parsed[0] not in SUPPORTED_BRANCHES:
        branches = ", ".join(f"R{b}" for b in SUPPORTED_BRANCHES)
        yield Finding(
            "warning",
            "driver",
            None,
            f"driver {version} (branch R{parsed[0]}) is not in the GPU Operator v26.7 support matrix",
            f"supported branches: {branches}; the default is 595.91.07",
        )


def _missing_layers(spec: Spec) -> Iterator[Finding]:
    owners = {name: config.owner for name, config in spec.components().items()}
    users = [
        name for name in ("devicePlugin", "gfd", "dcgmExporter", "validator") if owners[name] == "gpuplan"
    ]
    for layer in ("driver", "toolkit"):
        if owners[layer] == "none" and users:
            yield Finding(
                "error",
                layer,
                None,
                f"{layer} has owner none, but {', '.join(users)} need it on every GPU node",
                f"set {layer}.owner to external (installed on the host) or gpuplan",
            )
    if owners["validator"] != "gpuplan" and users:
        yield Finding(
            "warning",
            "validator",
            None,
            "without the validator, operands start without waiting for the driver and toolkit checks",
            "keep validator.owner: gpuplan unless another tool validates the nodes",
        )


def _sharing_vs_mig(spec: Spec) -> Iterator[Finding]:
    mode = sharing_mode(spec.spec.device_plugin)
    strategy = spec.spec.mig.strategy
    if mode != "mps":
        return
    if spec.spec.mig.config != "all-disabled" and spec.spec.mig_manager.owner != "none":
        yield Finding(
            "error",
            "devicePlugin",
            None,
            f"MPS does not work on MIG-enabled GPUs, which mig.config {spec.spec.mig.config} partitions",
            "use timeSlicing, or mig.config: all-disabled",
        )
    elif strategy == "mixed":
        yield Finding(
            "error",
            "devicePlugin",
            None,
            "MPS cannot share MIG devices, which mig.strategy mixed exposes",
            "set mig.strategy: none (or single on GPUs without MIG), or use timeSlicing",
        )
    elif strategy == "single" and "mig" in spec.spec.model_fields_set:
        yield Finding(
            "warning",
            "devicePlugin",
            None,
            "MPS does not work on MIG-enabled GPUs; with mig.strategy single it fails on any node using MIG",
            "set mig.strategy: none if no GPU uses MIG",
        )


def _host_toolkit_root(spec: Spec) -> Iterator[Finding]:
    if spec.spec.driver.owner == "gpuplan" and spec.spec.toolkit.owner == "external":
        yield Finding(
            "warning",
            "toolkit",
            None,
            'a containerised driver with a host toolkit needs root = "/run/nvidia/driver" in '
            "/etc/nvidia-container-runtime/config.toml on every node",
            "or let gpuplan own the toolkit too",
        )


def check_nodes(spec: Spec, nodes: Sequence[NodeFacts]) -> list[Finding]:
    """The rules of facts §10 against every GPU node, whichever source identified its GPU (GFD's labels or
    NFD's NodeFeature, ``NodeFacts.gpu_source``); nodes without an NVIDIA GPU are skipped, a node no source
    identified gets a warning saying what was not checked. With node pools, each pool's nodes are judged
    by the pool's effective spec and the others by the stack's; a node two pools select is an error naming
    both (and judged by neither)."""
    if not spec.spec.node_pools:
        return _check_nodes(spec, nodes)
    members = pools.membership(spec.pool_selectors(), ((node.name, pool_labels(node)) for node in nodes))
    overlapping = {overlap.node for overlap in members.overlaps}
    findings = [
        Finding(
            "error",
            None,
            overlap.node,
            overlap.message(),
            "make the pools' nodeSelectors disjoint (add a label that tells them apart)",
        )
        for overlap in members.overlaps
    ]
    default = [n for n in nodes if n.name not in members.pool_of and n.name not in overlapping]
    findings += [_in_pool(None, f) for f in _check_nodes(spec.for_pool(None), default)]
    for pool in spec.spec.node_pools:
        mine = [node for node in nodes if members.pool_of.get(node.name) == pool.name]
        findings += [_in_pool(pool.name, f) for f in _check_nodes(spec.for_pool(pool), mine)]
    return findings


def _in_pool(pool: str | None, finding: Finding) -> Finding:
    """A node's finding, saying which pool's settings it judged (the stack's for a node in no pool)."""
    if finding.node is None:
        return finding
    if pool is None:
        hint = finding.hint.replace("for these nodes", "in a node pool of these nodes")
        return replace(finding, message=f"(no node pool) {finding.message}", hint=hint)
    # an owner stays the stack's (a pool may not set one, NodePool._owners_are_the_stacks): only the other
    # keys point into the pool
    hint = re.sub(r"\b(driver|devicePlugin)\.(?!owner)", rf"nodePools[{pool}].\1.", finding.hint)
    hint = hint.replace("driver.owner: external", "driver.owner: external for the whole stack")
    return replace(finding, message=f"node pool {pool}: {finding.message}", hint=hint)


def _check_nodes(spec: Spec, nodes: Sequence[NodeFacts]) -> list[Finding]:
    findings: list[Finding] = []
    for node in nodes:
        if not node.gpu_known and node.unidentified and _needs_gpu_facts(spec):
            findings.append(_unidentified(node))
        if not node.has_nvidia_gpu:
            continue
        findings += _host_driver(spec, node)
        findings += _external_version(spec, node)
        if node.gpu_known:
            findings += _gpu_rules(spec, node)
    return findings


def _gpu_rules(spec: Spec, node: NodeFacts) -> list[Finding]:
    """The rules that read the node's GPU, each finding naming it."""
    found = [
        *_driver_vs_architecture(spec, node),
        *_kernel_modules(spec, node),
        *_mig_capability(spec, node),
        *_mig_config_on_node(spec, node),
        *_mps_on_node(spec, node),
    ]
    return [dataclasses.replace(finding, gpu=_gpu(node)) for finding in found]


def _unidentified(node: NodeFacts) -> Finding:
    return Finding(
        "warning",
        None,
        node.name,
        f"{node.unidentified}: driver, MIG and sharing compatibility not checked on this node",
        "plan again once GPU Feature Discovery has run"
        + (" (or run NFD there: its NodeFeature names the GPU's PCI device)" if node.nfd_missing else ""),
    )


def _needs_gpu_facts(spec: Spec) -> bool:
    return (
        target_driver_version(spec) is not None
        or sharing_mode(spec.spec.device_plugin) == "mps"
        or "mig" in spec.spec.model_fields_set
    )


def _gpu(node: NodeFacts) -> str:
    return f"{node.gpu_product} ({node.gpu_family})"


def _driver_vs_architecture(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    version = target_driver_version(spec)
    parsed = version_tuple(version) if version else None
    if not parsed or node.cc is None:
        return
    family = node.gpu_family or ""
    if node.cc < TURING and parsed[0] > LAST_BRANCH_BEFORE_TURING:
        yield Finding(
            "error",
            "driver",
            node.name,
            f"driver {version} does not support {_gpu(node)}: the last driver branch for Volta and "
            f"older GPUs is R{LAST_BRANCH_BEFORE_TURING}",
            "pin driver.version to a 580 release (e.g. 580.105.08) for these nodes: give the "
            f"{node.gpu_family or 'volta'} nodes a node pool with driver 580.x",
        )
    elif family == "blackwell":
        minimum = MIN_B200 if "B200" in (node.gpu_product or "").upper() else MIN_BLACKWELL
        if parsed < minimum:
            yield Finding(
                "error",
                "driver",
                node.name,
                f"driver {version} is too old for {_gpu(node)}: it needs "
                f"{'.'.join(map(str, minimum))} or newer",
                "use the default driver 595.91.07",
            )
    elif family == "hopper" and parsed < MIN_HOPPER:
        yield Finding(
            "error",
            "driver",
            node.name,
            f"driver {version} is too old for {_gpu(node)}: Hopper needs branch R525 or newer",
            "use the default driver 595.91.07",
        )


def _kernel_modules(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    driver = spec.spec.driver
    if driver.owner != "gpuplan" or node.cc is None:
        return
    if driver.kernel_module_type == "proprietary" and node.gpu_family == "blackwell":
        yield Finding(
            "error",
            "driver",
            node.name,
            f"{_gpu(node)} needs the open kernel modules; kernelModuleType proprietary cannot drive it",
            "set driver.kernelModuleType: open or auto",
        )
    elif driver.kernel_module_type == "open" and node.cc < TURING:
        yield Finding(
            "error",
            "driver",
            node.name,
            f"{_gpu(node)} predates Turing: the open kernel modules do not support it",
            "set driver.kernelModuleType: proprietary or auto",
        )


def _host_driver(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    if spec.spec.driver.owner != "gpuplan":
        return
    if node.preinstalled_driver or (node.driver_version and not node.containerized_driver):
        seen = f"driver {node.driver_version}" if node.driver_version else "a pre-installed driver"
        yield Finding(
            "error",
            "driver",
            node.name,
            f"the node already runs a host driver ({seen}); a containerised driver cannot replace it",
            "set driver.owner: external (and its version), or remove the host driver from the node first",
        )


def _external_version(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    driver = spec.spec.driver
    expected = driver.explicit_version()
    if driver.owner != "external" or expected is None or node.driver_version is None:
        return
    if node.driver_version != expected:
        yield Finding(
            "error",
            "driver",
            node.name,
            f"the node reports driver {node.driver_version}, the spec expects {expected}",
            "upgrade the host driver, or set driver.version to the version the nodes run",
        )


def _mig_capability(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    strategy = spec.spec.mig.strategy
    if "mig" in spec.spec.model_fields_set and strategy != "none" and node.mig_capable is False:
        yield Finding(
            "warning",
            None,
            node.name,
            f"mig.strategy {strategy} has no effect on {_gpu(node)}: it is not MIG-capable",
            "MIG needs A100, A30, H100, H200, B200 or similar",
        )


def _default_mig_config(spec: Spec) -> str | None:
    """The stack's mig.config when gpuplan can read it: a mig-manager runs it from the operator's default
    config (a custom ConfigMap's content is the user's, unseen)."""
    manager = spec.spec.mig_manager
    config = spec.spec.mig.config
    if manager.owner == "none" or config == "all-disabled" or manager.config.name is not None:
        return None
    return config


def _mig_config_name(spec: Spec) -> Iterator[Finding]:
    config = _default_mig_config(spec)
    if config is not None and config not in mig_parted.config_names():
        yield Finding(
            "error",
            "migManager",
            None,
            f"mig.config {config} is not a config of default-mig-parted-config: the mig-manager would "
            "set nvidia.com/mig.config.state=failed",
            "use one of " + ", ".join(mig_parted.config_names()) + ", or your own ConfigMap "
            "(migManager.config.name)",
        )


def _mig_config_on_node(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    """The config's profiles exist on the node's GPU (fleet facts §4.3), on the nodes gpuplan labels."""
    config = _default_mig_config(spec)
    manager = spec.spec.mig_manager
    selector = manager.node_selector if manager.node_selector is not None else spec.spec.node_selector
    if config is None or any(node.labels.get(k) != v for k, v in selector.items()):
        return
    if node.mig_capable is False:
        yield Finding(
            "error",
            "migManager",
            node.name,
            f"mig.config {config} cannot apply to {_gpu(node)}: it is not MIG-capable",
            "select the MIG nodes with migManager.nodeSelector, or set mig.config: all-disabled",
        )
        return
    product = (node.gpu_product or "").split("-MIG-")[0]  # the single strategy names the profile after it
    gpu = mig_parted.GPUS.get(product)
    if gpu is None:
        yield Finding(
            "warning",
            "migManager",
            node.name,
            f"the MIG profiles of {_gpu(node)} are unknown to gpuplan: mig.config {config} not checked",
        )
        return
    asked = mig_parted.profiles_asked(config, gpu)
    missing = [p for p in asked or () if p not in gpu.profiles]
    if asked is None or missing:
        what = (
            f"asks {_gpu(node)} for MIG profile(s) it does not have: {', '.join(missing)}"
            if missing
            else f"has no entry for {_gpu(node)}"
        )
        yield Finding(
            "error",
            "migManager",
            node.name,
            f"mig.config {config} {what}; the mig-manager would refuse it "
            "(nvidia.com/mig.config.state=failed)",
            f"its profiles are {', '.join(gpu.profiles)}: use a config of those (e.g. all-{gpu.profiles[0]})",
        )


def _mps_on_node(spec: Spec, node: NodeFacts) -> Iterator[Finding]:
    config = spec.spec.device_plugin.config
    if sharing_mode(spec.spec.device_plugin) != "mps" or config is None or config.mps is None:
        return
    if node.mig_enabled:
        yield Finding(
            "error",
            "devicePlugin",
            node.name,
            f"MPS is not supported on MIG-enabled GPUs ({_gpu(node)} uses MIG)",
            "disable MIG on the node (nvidia.com/mig.config=all-disabled) or use timeSlicing",
        )
    if node.cc is not None and node.cc < TURING and config.mps.replicas > MPS_MAX_BEFORE_TURING:
        yield Finding(
            "error",
            "devicePlugin",
            node.name,
            f"MPS allows at most {MPS_MAX_BEFORE_TURING} clients per GPU before Turing; "
            f"{_gpu(node)} was given {config.mps.replicas}",
            f"set devicePlugin.config.mps.replicas to {MPS_MAX_BEFORE_TURING} or fewer",
        )


# ------------------------------------------------------------------------------ what cannot become healthy
#
# The rules below find, in what the refresh already read, a component that cannot become healthy whatever
# apply waits for: its gate would wait out healthTimeoutSeconds and the apply would roll back every change.
# They are errors, so the plan refuses itself (``gpuplan plan`` exits 1) instead. Each needs evidence: a node
# that does not report its runtime handlers (a kubelet before 1.30) is not refused for a missing one, and a
# pull failure is never guessed from a tag (the table of known releases can lag behind the registry): that
# stays the gates' concern, which fail as soon as the cause shows. A registry the nodes' pods already fail
# to reach is evidence, read apart from the refresh (planner/plan/pulls.py).

GPU_NODE_LABELS = (
    ("nvidia.com/gpu.present", "true"),
    *((label, "true") for label in NFD_GPU_LABELS),
)
"""Labels that mark GPU nodes, suggested when a node selector matches no node (GFD's, then NFD's)."""
SELECTOR_NODES_SHOWN = 3


def check_fleet(spec: Spec, nodes: Sequence[NodeFacts]) -> list[Finding]:
    """The rules that need the whole node list: what no node can run, and the nodes a selector misses."""
    return [*_toolkit_handler(spec, nodes), *_selectors_match_nothing(spec, nodes)]


def _toolkit_handler(spec: Spec, nodes: Sequence[NodeFacts]) -> Iterator[Finding]:
    """An external toolkit is the host's: a node that reports its runtime handlers without ``nvidia`` keeps
    every pod naming RuntimeClass nvidia in ContainerCreating (``no runtime for "nvidia" is configured``),
    and nothing gpuplan applies adds the handler."""
    toolkit = spec.spec.toolkit
    if toolkit.owner != "external":
        return
    selector = toolkit.node_selector if toolkit.node_selector is not None else spec.spec.node_selector
    for node in nodes:
        if not (node.has_nvidia_gpu and _selects(selector, node) and node.runtime_handlers):
            continue
        if "nvidia" not in node.runtime_handlers:
            yield Finding(
                "error",
                "toolkit",
                node.name,
                "the toolkit is external, but the node's container runtime has no nvidia runtime handler: "
                "pods of RuntimeClass nvidia cannot start there",
                "install the NVIDIA Container Toolkit on the node and run nvidia-ctk runtime configure "
                "--runtime=containerd (then restart containerd), or set toolkit.owner: gpuplan",
            )


def _selectors_match_nothing(spec: Spec, nodes: Sequence[NodeFacts]) -> Iterator[Finding]:
    """A nodeSelector no node carries: the component's DaemonSet would run nowhere (its gates have nothing
    to judge, and an external component is checked on no node)."""
    if not nodes:
        return
    stack_selector = spec.spec.node_selector
    users = [name for name, config in spec.components().items() if config.owner != "none"]
    if any(spec.components()[name].node_selector is None for name in users) and not _anywhere(
        stack_selector, nodes
    ):
        yield _selector_finding(None, "spec.nodeSelector", stack_selector, nodes)
    for name in users:
        selector = spec.components()[name].node_selector
        if selector is not None and not _anywhere(selector, nodes):
            yield _selector_finding(name, f"{name}.nodeSelector", selector, nodes)


def _selector_finding(
    component: ComponentName | None, field: str, selector: Mapping[str, str], nodes: Sequence[NodeFacts]
) -> Finding:
    shown = ", ".join(f"{key}={value}" for key, value in sorted(selector.items()))
    return Finding(
        "error",
        component,
        None,
        f"{field} ({shown}) matches none of the {len(nodes)} nodes",
        _selector_hint(field, selector, nodes),
    )


def _selector_hint(field: str, selector: Mapping[str, str], nodes: Sequence[NodeFacts]) -> str:
    """What the nodes do carry: other values of the selector's keys, else a GPU label to select on."""
    carried = sorted(
        {f"{key}={node.labels[key]}" for node in nodes for key in selector if key in node.labels}
    )
    if carried:
        return f"the nodes carry {', '.join(carried[:SELECTOR_NODES_SHOWN])}; set {field} to what they carry"
    for key, value in GPU_NODE_LABELS:
        named = [node.name for node in nodes if node.labels.get(key) == value]
        if named:
            rest = len(named) - SELECTOR_NODES_SHOWN
            more = f" and {rest} more" if rest > 0 else ""
            return (
                f'set {field} to {{{key}: "{value}"}}, which {len(named)} node(s) carry '
                f"({', '.join(named[:SELECTOR_NODES_SHOWN])}{more})"
            )
    keys = ", ".join(sorted(selector))
    return (
        f"no node carries {keys}: label the GPU nodes (kubectl label node NODE KEY=VALUE) or deploy Node "
        "Feature Discovery, which labels them feature.node.kubernetes.io/pci-10de.present=true"
    )


def _selects(selector: Mapping[str, str], node: NodeFacts) -> bool:
    return all(node.labels.get(key) == value for key, value in selector.items())


def _anywhere(selector: Mapping[str, str], nodes: Sequence[NodeFacts]) -> bool:
    return any(_selects(selector, node) for node in nodes)
