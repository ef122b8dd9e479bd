"""Rendered objects as a whole: valid Kubernetes 1.37 objects, coherent pods, gpuplan's labels, owners,
purity."""

from __future__ import annotations

import builtins
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kubernetes_validate
import pytest

from gpuplan import errors
from gpuplan.modules import catalog
from gpuplan.modules.base import COMPONENTS, Address

RenderFactory = Callable[..., Any]  # the render fixture of conftest.py

VARIANTS = {
    "defaults": "",
    "lab": '  driver: {owner: external, version: "580.105.08"}\n  toolkit: {owner: external}\n',
    "time-slicing": "  devicePlugin: {config: {timeSlicing: {replicas: 4, renameByDefault: true}}}\n",
    "mps": "  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 8}}}\n",
    "named-config": "  devicePlugin: {config: {name: sharing, default: any}}\n",
    "everything": """\
  namespace: gpu-stack
  nodeSelector: {gpu: "yes"}
  daemonsets: {labels: {team: ml}, annotations: {a: b}, updateStrategy: OnDelete,
               tolerations: [{operator: Exists}]}
  mig: {strategy: mixed}
  cdi: {enabled: false}
  toolkit: {runtime: crio, installDir: /opt/nvidia}
  driver: {kernelModuleType: open, upgradePolicy: {drain: {enable: true, timeoutSeconds: 60}}}
  devicePlugin: {imagePullSecrets: [ngc], resources: {limits: {cpu: 1, memory: 1Gi}, requests: {cpu: 100m}},
                 env: [{name: EXTRA, value: "1"}], args: ["--verbose"]}
  dcgmExporter: {metricsConfigMap: metrics, enablePodLabels: true, serviceType: NodePort}
""",
    "docker": "  toolkit: {runtime: docker}\n  validator: {owner: none}\n  devicePlugin: {owner: none}\n",
    "mig": "  mig: {strategy: mixed, config: all-balanced}\n"
    "  migManager: {owner: gpuplan, config: {name: mine}}\n",
}


def _pod_spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from pod.get("initContainers", [])
    yield from pod["containers"]


@pytest.mark.parametrize("body", VARIANTS.values(), ids=list(VARIANTS))
def test_every_object_is_valid_against_kubernetes_1_37(body: str, render: RenderFactory) -> None:
    rendered = render(body)
    assert rendered.objects
    for obj in rendered.objects:
        kubernetes_validate.validate(dict(obj.manifest), "1.37.0", strict=True)


@pytest.mark.parametrize("body", VARIANTS.values(), ids=list(VARIANTS))
def test_pods_are_coherent(body: str, render: RenderFactory) -> None:
    """What the schema cannot see: names unique, mounts backed by volumes, selector matching the template."""
    for obj in render(body).objects:
        if obj.manifest["kind"] != "DaemonSet":
            continue
        pod = _pod_spec(obj.manifest)
        volumes = [v["name"] for v in pod["volumes"]]
        assert len(volumes) == len(set(volumes)), obj.address
        names = [c["name"] for c in _containers(pod)]
        assert len(names) == len(set(names)), obj.address
        for container in _containers(pod):
            mounts = [m["name"] for m in container.get("volumeMounts", [])]
            assert set(mounts) <= set(volumes), (obj.address, container["name"])
            paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
            assert len(paths) == len(set(paths)), (obj.address, container["name"])
            env_names = [e["name"] for e in container.get("env", [])]
            assert len(env_names) == len(set(env_names)), (obj.address, container["name"])
        template_labels = obj.manifest["spec"]["template"]["metadata"]["labels"]
        selector = obj.manifest["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template_labels.items()
        assert obj.immutable_paths == ("spec.selector",)


def test_immutable_fields_force_a_replace(render: RenderFactory) -> None:
    immutable = {
        obj.manifest["kind"]: obj.immutable_paths for obj in render(VARIANTS["time-slicing"]).objects
    }
    assert immutable == {
        "ServiceAccount": (),
        "ClusterRole": (),
        "Role": (),
        "ConfigMap": (),
        "Service": (),
        "DaemonSet": ("spec.selector",),
        "RoleBinding": ("roleRef",),
        "ClusterRoleBinding": ("roleRef",),
        "RuntimeClass": ("handler",),
        "CustomResourceDefinition": ("spec.group", "spec.scope"),
    }


@pytest.mark.parametrize("body", VARIANTS.values(), ids=list(VARIANTS))
def test_every_object_carries_gpuplans_labels_and_its_address(body: str, render: RenderFactory) -> None:
    rendered = render(body)
    for obj in rendered.objects:
        labels = obj.manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gpuplan"
        assert labels["gpuplan.io/component"] == obj.address.component
        assert labels["gpuplan.io/stack"] == "lab"
        assert obj.address == Address(
            obj.address.component,
            obj.manifest["kind"],
            obj.manifest["metadata"].get("namespace"),
            obj.manifest["metadata"]["name"],
        )
        assert Address.parse(str(obj.address)) == obj.address
    assert len(rendered.by_address) == len(rendered.objects), "addresses are unique"


def test_lab_renders_the_four_components_gpuplan_takes_over(render: RenderFactory) -> None:
    rendered = render(VARIANTS["lab"])
    components = {obj.address.component for obj in rendered.objects}
    assert components == {"toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator"}
    daemonsets = sorted(a for a in rendered.addresses() if "/DaemonSet/" in a)
    assert daemonsets == [
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        "validator/DaemonSet/gpu-operator/nvidia-operator-validator",
    ]
    # the external toolkit renders only the RuntimeClass the operands name
    assert [a for a in rendered.addresses() if a.startswith("toolkit/")] == ["toolkit/RuntimeClass/nvidia"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_owner_external_or_none_renders_nothing(component: str, render: RenderFactory) -> None:
    for owner in ("external", "none"):
        extra = ", runtimeClass: {create: false}" if component == "toolkit" else ""
        rendered = render(f"  {component}: {{owner: {owner}{extra}}}\n")
        assert not any(obj.address.component == component for obj in rendered.objects)
        assert any(obj.address.component != component for obj in rendered.objects)


def test_health_checks_per_owner(render: RenderFactory) -> None:
    owned = render("")
    checks = catalog.health_checks(owned.spec.components(), owned.context)
    assert {name: [c.kind for c in found] for name, found in checks.items()} == {
        "driver": ["rollout", "driver-version"],
        "toolkit": ["rollout", "runtime-handler"],
        "devicePlugin": ["rollout", "allocatable"],
        "gfd": ["rollout", "gfd-labels"],
        "dcgmExporter": ["rollout", "dcgm-metrics"],
        "validator": ["rollout", "validator-ready"],
        "migManager": [],
    }
    assert checks["driver"][0].params == {
        "daemonset": "nvidia-driver-daemonset",
        "namespace": "gpu-operator",
        "timeoutSeconds": 300,
        "strategy": "OnDelete",
    }
    lab = render(VARIANTS["lab"])
    external = catalog.health_checks(lab.spec.components(), lab.context)
    assert [(c.kind, c.params["version"]) for c in external["driver"]] == [("driver-version", "580.105.08")]
    assert [(c.kind, c.params["handler"]) for c in external["toolkit"]] == [("runtime-handler", "nvidia")]
    unversioned = render("  toolkit: {owner: external}\n  driver: {owner: external}\n  gfd: {owner: none}\n")
    found = catalog.health_checks(unversioned.spec.components(), unversioned.context)
    assert found["driver"][0].params["version"] is None  # present, any version
    assert found["gfd"] == ()


def test_the_metrics_gate_samples_ten_nodes_unless_the_spec_says_how_many(render: RenderFactory) -> None:
    def sample(extra: str) -> object:
        rendered = render(extra)
        return catalog.health_checks(rendered.spec.components(), rendered.context)["dcgmExporter"][1].params[
            "sampleNodes"
        ]

    assert sample("") == 10
    assert sample("  dcgmExporter: {healthSampleNodes: 50}\n") == 50
    assert sample("  dcgmExporter: {healthSampleNodes: all}\n") == "all"
    assert sample("  dcgmExporter: {healthSampleNodes: 0}\n") == 0  # no scrape: the Ready pods count
    for bad in ("-1", "-3", "some", "true"):
        with pytest.raises(errors.ConfigError, match="expected a number of nodes"):
            render(f"  dcgmExporter: {{healthSampleNodes: {bad}}}\n")


def test_time_slicing_health_check_expects_the_shared_resource(render: RenderFactory) -> None:
    rendered = render(VARIANTS["time-slicing"])
    checks = catalog.health_checks(rendered.spec.components(), rendered.context)["devicePlugin"]
    assert checks[1].params["resource"] == "nvidia.com/gpu.shared" and checks[1].params["perGpu"] == 4


def test_address_parse_rejects_malformed_text() -> None:
    assert str(Address.parse("toolkit/RuntimeClass/nvidia")) == "toolkit/RuntimeClass/nvidia"
    for text, fragment in [
        ("devicePlugin/DaemonSet", "malformed"),
        ("plugin/DaemonSet/ns/x", "unknown component"),
        ("toolkit/RuntimeClass/ns/nvidia", "cluster-scoped"),
        ("gfd/DaemonSet/gpu-feature-discovery", "namespaced"),
        ("gfd/daemonset/ns/x", "Kubernetes kind"),
        ("gfd//ns/x", "malformed"),
    ]:
        with pytest.raises(errors.ConfigError, match=fragment):
            Address.parse(text)


def test_rendering_is_repeatable(render: RenderFactory) -> None:
    first, second = render(VARIANTS["everything"]), render(VARIANTS["everything"])
    assert [o.manifest for o in first.objects] == [o.manifest for o in second.objects]
    assert first.objects == second.objects


def test_rendering_does_no_io(render: RenderFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = render(
        VARIANTS["everything"]
    )  # parse first: reading the spec text is not the modules' business

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a module did I/O while rendering")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(os, "getenv", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    again = catalog.render_all(rendered.spec.components(), rendered.context)
    assert again == rendered.objects


def test_rendering_is_identical_across_processes() -> None:
    """No hash-seed or set-order dependence: two interpreters with different hash seeds agree byte for
    byte."""
    code = (
        "import json; from gpuplan.planner.spec import model as spec; s = spec.parse_spec("
        + repr(
            "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
            + VARIANTS["everything"]
        )
        + ", filename='x'); print(json.dumps([dict(o.manifest) for o in s.desired_objects()]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert json.loads(outputs.pop())


def test_a_spec_set_health_timeout_reaches_every_check_of_its_component(render: RenderFactory) -> None:
    """healthTimeoutSeconds is per component: each component's own value is in every one of its checks'
    timeoutSeconds (the apply's gate limit, planner.health.wait.component_timeout), and no other's."""
    timeouts = {
        "driver": 41,
        "toolkit": 42,
        "devicePlugin": 43,
        "gfd": 44,
        "dcgmExporter": 45,
        "validator": 46,
    }
    rendered = render(
        "".join(f"  {name}: {{healthTimeoutSeconds: {seconds}}}\n" for name, seconds in timeouts.items())
    )
    checks = catalog.health_checks(rendered.spec.components(), rendered.context)
    for name, seconds in timeouts.items():
        assert checks[name], f"{name} has no health checks"
        assert {check.params.get("timeoutSeconds") for check in checks[name]} == {seconds}, name
    defaults = catalog.health_checks(render("").spec.components(), render("").context)
    assert {check.params.get("timeoutSeconds") for named in defaults.values() for check in named} == {300}


# specs that set an env var to "" somewhere: the config-manager's KUBECONFIG, a named config without a default
# key (DEFAULT_CONFIG), a user variable without a value, the driver manager's drain selector in either
# pod-template shape, sharing per node pool
EMPTY_VALUE_VARIANTS = {
    **VARIANTS,
    "operator-shape": "  daemonsets: {podTemplate: gpu-operator}\n"
    "  devicePlugin: {config: {timeSlicing: {replicas: 2}}}\n",
    "named-config-no-default": "  devicePlugin: {config: {name: sharing}}\n",
    "empty-user-env": "  devicePlugin: {env: [{name: EMPTY}, {name: ALSO_EMPTY, value: ''}]}\n"
    "  gfd: {env: [{name: GFD_EMPTY}]}\n  driver: {env: [{name: DRIVER_EMPTY}]}\n",
    "pools": "  nodePools:\n"
    "    - {name: shared, nodeSelector: {pool: s}, devicePlugin: {config: {mps: {replicas: 4}}}}\n"
    "    - {name: sliced, nodeSelector: {pool: t}, devicePlugin: {config: {timeSlicing: {replicas: 2}}}}\n"
    "    - {name: new-driver, nodeSelector: {pool: d}, driver: {version: '580.105.08'}}\n",
}


def _env_items(tree: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(tree, Mapping):
        for key, sub in tree.items():
            if key == "env" and isinstance(sub, list):
                yield from sub
            else:
                yield from _env_items(sub)
    elif isinstance(tree, list):
        for item in tree:
            yield from _env_items(item)


@pytest.mark.parametrize("body", EMPTY_VALUE_VARIANTS.values(), ids=list(EMPTY_VALUE_VARIANTS))
def test_no_env_item_has_an_empty_value(body: str, render: RenderFactory) -> None:
    """EnvVar.Value is omitempty: the server stores `value: ""` as no value, so rendering one would read
    back as a change forever. The variable is still rendered (the container sees it set to "")."""
    rendered = render(body)
    items = [item for obj in rendered.objects for item in _env_items(obj.manifest)]
    assert items
    assert [item for item in items if item.get("value") == ""] == []


def test_an_empty_env_value_renders_the_variable_without_a_value(render: RenderFactory) -> None:
    rendered = render(
        "  devicePlugin: {env: [{name: EMPTY}, {name: ALSO_EMPTY, value: ''}],\n"
        "                 config: {mps: {replicas: 2}}}\n"
        "  gfd: {env: [{name: GFD_EMPTY}]}\n  driver: {env: [{name: DRIVER_EMPTY}]}\n"
    )
    names = {
        item["name"]: item
        for obj in rendered.objects
        if obj.address.component in ("devicePlugin", "gfd", "driver")
        for item in _env_items(obj.manifest)
    }
    assert names["KUBECONFIG"] == {"name": "KUBECONFIG"}
    assert names["DRAIN_POD_SELECTOR_LABEL"] == {"name": "DRAIN_POD_SELECTOR_LABEL"}
    for name in ("EMPTY", "ALSO_EMPTY", "GFD_EMPTY", "DRIVER_EMPTY"):
        assert names[name] == {"name": name}
