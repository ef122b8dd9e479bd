"""Each component's objects, field by field, against the GPU Operator v26.7 operands (facts §3)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from gpuplan.modules import driver as driver_module

RenderFactory = Callable[..., Any]  # the render fixture of conftest.py
NFD_SELECTOR = {"feature.node.kubernetes.io/pci-10de.present": "true"}
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def pod(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def container(ds: Mapping[str, Any], name: str, *, init: bool = False) -> Mapping[str, Any]:
    containers = pod(ds)["initContainers" if init else "containers"]
    found: Mapping[str, Any] = next(c for c in containers if c["name"] == name)
    return found


def env_of(item: Mapping[str, Any]) -> dict[str, str]:
    """name -> what the container sees: an item without a value is set to "" (the server's stored form)."""
    return {e["name"]: "<fieldRef>" if "valueFrom" in e else e.get("value", "") for e in item.get("env", [])}


def host_paths(ds: Mapping[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod(ds)["volumes"] if "hostPath" in v}


def init_names(ds: Mapping[str, Any]) -> list[str]:
    return [c["name"] for c in pod(ds).get("initContainers", [])]


def assert_common(ds: Mapping[str, Any], app: str, deploy_label: str) -> None:
    """Facts §3 'common to all' plus gpuplan's node selection (modules/common.py docstring)."""
    assert ds["metadata"]["namespace"] == "gpu-operator"
    assert ds["metadata"]["labels"]["app"] == app
    # the operator's selectors (immutable: adoption in place needs them exactly): app, and part-of on GFD and
    # the validator (gpu-operator v26.7.0 assets)
    part_of = {"gpu-feature-discovery": "nvidia-gpu", "nvidia-operator-validator": "gpu-operator"}
    expected = {"app": app} | ({"app.kubernetes.io/part-of": part_of[app]} if app in part_of else {})
    assert ds["spec"]["selector"] == {"matchLabels": expected}
    spec = pod(ds)
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == GPU_TOLERATION
    assert spec["nodeSelector"] == NFD_SELECTOR
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"][0] == {
        "key": f"nvidia.com/gpu.deploy.{deploy_label}",
        "operator": "NotIn",
        "values": ["false", "paused-for-driver-upgrade", "paused-for-mig-change", "pre-installed"],
    }


def test_the_driver_digest_reads_a_variable_without_a_value_as_empty(render: RenderFactory) -> None:
    """DRIVER_CONFIG_DIGEST is the same whether the drain selector is written `value: ""` (gpuplan before,
    the operator's asset) or stored without a value, so neither an upgrade of gpuplan nor an adopted
    operator's template reinstalls the driver."""
    ds = render("").daemonset("driver", "nvidia-driver-daemonset")
    manager, ctr = container(ds, "k8s-driver-manager", init=True), container(ds, "nvidia-driver-ctr")

    def with_digest_out(item: Mapping[str, Any], spelled: str | None = None) -> dict[str, Any]:
        variables = [e for e in item["env"] if e["name"] != driver_module.DIGEST_ENV]
        if spelled is not None:
            variables = [
                {**e, "value": spelled} if e == {"name": "DRAIN_POD_SELECTOR_LABEL"} else e for e in variables
            ]
        return {**item, "env": variables}

    stored = driver_module.config_digest(with_digest_out(manager), with_digest_out(ctr))
    assert stored == env_of(ctr)[driver_module.DIGEST_ENV]
    assert driver_module.config_digest(with_digest_out(manager, ""), with_digest_out(ctr)) == stored
    assert driver_module.config_digest(with_digest_out(manager, "app=x"), with_digest_out(ctr)) != stored


def test_driver_daemonset(render: RenderFactory) -> None:
    ds = render("").daemonset("driver", "nvidia-driver-daemonset")
    assert_common(ds, "nvidia-driver-daemonset", "driver")
    labels = ds["metadata"]["labels"]
    assert (
        labels["app.kubernetes.io/component"] == "nvidia-driver"
        and labels["nvidia.com/precompiled"] == "false"
    )
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    spec = pod(ds)
    assert spec["hostPID"] is True and spec["serviceAccountName"] == "nvidia-driver"
    assert "runtimeClassName" not in spec
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti == {
        "labelSelector": {
            "matchExpressions": [
                {"key": "app.kubernetes.io/component", "operator": "In", "values": ["nvidia-driver"]}
            ]
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    assert init_names(ds) == ["k8s-driver-manager"]
    manager = container(ds, "k8s-driver-manager", init=True)
    assert manager["image"] == "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
    assert manager["args"] == ["uninstall_driver"]
    assert env_of(manager) | {"NODE_NAME": "", "OPERATOR_NAMESPACE": ""} == {
        "NODE_NAME": "",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "ENABLE_GPU_POD_EVICTION": "true",
        "ENABLE_AUTO_DRAIN": "false",
        "DRAIN_USE_FORCE": "false",
        "DRAIN_POD_SELECTOR_LABEL": "",
        "DRAIN_TIMEOUT_SECONDS": "300s",
        "DRAIN_DELETE_EMPTYDIR_DATA": "false",
        "OPERATOR_NAMESPACE": "",
        "DRIVER_CONFIG_DIGEST": env_of(manager)["DRIVER_CONFIG_DIGEST"],
    }
    driver = container(ds, "nvidia-driver-ctr")
    assert driver["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"
    assert (driver["command"], driver["args"]) == (["nvidia-driver"], ["init"])
    assert env_of(driver)["KERNEL_MODULE_TYPE"] == "auto"
    assert driver["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    probe = driver["startupProbe"]
    assert (
        probe["initialDelaySeconds"],
        probe["periodSeconds"],
        probe["timeoutSeconds"],
        probe["failureThreshold"],
    ) == (60, 10, 60, 120)
    assert ".driver-ctr-ready" in " ".join(driver["lifecycle"]["preStop"]["exec"]["command"])
    paths = set(host_paths(ds).values())
    assert {
        "/run/nvidia",
        "/run/nvidia-fabricmanager",
        "/run/nvidia-topologyd",
        "/var/log",
        "/dev/log",
        "/etc/os-release",
        "/",
        "/sys",
        "/sys/module/firmware_class/parameters/path",
        "/sys/devices/system",
        "/run/nvidia/driver/lib/firmware",
    } <= paths
    run_nvidia = next(m for m in driver["volumeMounts"] if m["name"] == "run-nvidia")
    assert run_nvidia["mountPropagation"] == "Bidirectional"


def test_driver_options_reach_the_pod(render: RenderFactory) -> None:
    body = (
        '  driver:\n    kernelModuleType: open\n    osTag: rhel9\n    version: "580.105.08"\n'
        '    upgradePolicy: {drain: {enable: true, force: true, podSelector: "app=x", timeoutSeconds: 60}}\n'
    )
    ds = render(body).daemonset("driver", "nvidia-driver-daemonset")
    assert container(ds, "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:580.105.08-rhel9"
    assert env_of(container(ds, "nvidia-driver-ctr"))["OPEN_KERNEL_MODULES_ENABLED"] == "true"
    manager = env_of(container(ds, "k8s-driver-manager", init=True))
    assert (
        manager["ENABLE_AUTO_DRAIN"],
        manager["DRAIN_USE_FORCE"],
        manager["DRAIN_POD_SELECTOR_LABEL"],
        manager["DRAIN_TIMEOUT_SECONDS"],
    ) == ("true", "true", "app=x", "60s")
    digest = "sha256:" + "a" * 64
    pinned = render(f'  driver: {{version: "{digest}"}}\n').daemonset("driver", "nvidia-driver-daemonset")
    assert (
        container(pinned, "nvidia-driver-ctr")["image"] == f"nvcr.io/nvidia/driver@{digest}"
    )  # no OS suffix
    from_nodes = render("", os_tag="ubuntu22.04").daemonset("driver", "nvidia-driver-daemonset")
    assert container(from_nodes, "nvidia-driver-ctr")["image"].endswith(":595.91.07-ubuntu22.04")


def test_driver_rbac_lets_the_driver_manager_evict(render: RenderFactory) -> None:
    rules = render("")["driver/ClusterRole/nvidia-driver"]["rules"]
    granted = {(res, verb) for rule in rules for res in rule["resources"] for verb in rule["verbs"]}
    assert {("nodes", "patch"), ("pods", "list"), ("pods", "delete"), ("pods/eviction", "create")} <= granted
    binding = render("")["driver/ClusterRoleBinding/nvidia-driver"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvidia-driver", "namespace": "gpu-operator"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "nvidia-driver",
    }


def test_toolkit_daemonset_and_runtime_class(render: RenderFactory) -> None:
    rendered = render("")
    ds = rendered.daemonset("toolkit", "nvidia-container-toolkit-daemonset")
    assert_common(ds, "nvidia-container-toolkit-daemonset", "container-toolkit")
    spec = pod(ds)
    assert spec["hostPID"] is True and spec["serviceAccountName"] == "nvidia-container-toolkit"
    assert "runtimeClassName" not in spec
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert init_names(ds) == ["driver-validation"]
    validation = env_of(container(ds, "driver-validation", init=True))
    assert (validation["COMPONENT"], validation["WITH_WAIT"]) == ("driver", "true")
    main = container(ds, "nvidia-container-toolkit-ctr")
    assert main["image"] == "nvcr.io/nvidia/k8s/container-toolkit:v1.20.1"
    variables = env_of(main)
    assert {
        "ROOT": "/usr/local/nvidia",
        "RUNTIME": "containerd",
        "CONTAINERD_RUNTIME_CLASS": "nvidia",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CDI_ENABLED": "true",
        "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi",
        "NVIDIA_RUNTIME_SET_AS_DEFAULT": "false",
        "TOOLKIT_PID_FILE": "/run/nvidia/toolkit/toolkit.pid",
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
        "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "/etc/containerd/conf.d/99-nvidia.toml",
    }.items() <= variables.items()
    # the validator's driver-ready gives the driver root to the operator's entrypoint, as in the operator
    assert "NVIDIA_DRIVER_ROOT" not in variables and main["args"] == ["/bin/entrypoint.sh"]
    assert variables["CRIO_CONFIG_MODE"] == "config" and variables["NRI_NAMESPACE"] == "<fieldRef>"
    assert {
        "/run/nvidia/toolkit",
        "/run/nvidia/validations",
        "/run/nvidia/driver",
        "/",
        "/usr/local/nvidia",
        "/dev/char",
        "/var/run/cdi",
        "/etc/containerd",
        "/etc/containerd/conf.d",
        "/run/containerd",
    } <= set(host_paths(ds).values())
    runtime_class = rendered["toolkit/RuntimeClass/nvidia"]
    assert (runtime_class["apiVersion"], runtime_class["handler"]) == ("node.k8s.io/v1", "nvidia")
    assert "namespace" not in runtime_class["metadata"]


def test_toolkit_follows_the_container_runtime(render: RenderFactory) -> None:
    crio = render("  cdi: {enabled: false}\n  toolkit: {runtime: crio}\n")
    variables = env_of(
        container(
            crio.daemonset("toolkit", "nvidia-container-toolkit-daemonset"), "nvidia-container-toolkit-ctr"
        )
    )
    assert (variables["RUNTIME"], variables["CRIO_CONFIG_MODE"]) == ("crio", "hook")
    assert "CONTAINERD_RUNTIME_CLASS" not in variables and "CDI_ENABLED" not in variables
    # CRI-O without CDI: the operands run without runtimeClassName (OCI hook mode)
    assert "runtimeClassName" not in pod(crio.daemonset("devicePlugin", "nvidia-device-plugin-daemonset"))
    docker = render("", container_runtime="docker")
    assert (
        env_of(
            container(
                docker.daemonset("toolkit", "nvidia-container-toolkit-daemonset"),
                "nvidia-container-toolkit-ctr",
            )
        )["RUNTIME_CONFIG"]
        == "/runtime/config-dir/daemon.json"
    )


def test_device_plugin_daemonset(render: RenderFactory) -> None:
    ds = render("  driver: {owner: external}\n  toolkit: {owner: external}\n").daemonset(
        "devicePlugin", "nvidia-device-plugin-daemonset"
    )
    assert_common(ds, "nvidia-device-plugin-daemonset", "device-plugin")
    spec = pod(ds)
    assert spec["runtimeClassName"] == "nvidia" and spec["serviceAccountName"] == "nvidia-device-plugin"
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert init_names(ds) == ["toolkit-validation"]
    assert "toolkit-ready" in container(ds, "toolkit-validation", init=True)["args"][0]
    assert "shareProcessNamespace" not in spec
    main = container(ds, "nvidia-device-plugin")
    assert main["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    # the operator's entrypoint (ConfigMap nvidia-device-plugin-entrypoint) waits for driver-ready
    assert main["command"] == ["/bin/sh", "-c"] and main["args"] == ["/bin/entrypoint.sh"]
    assert main["securityContext"] == {"privileged": True}
    assert {
        "PASS_DEVICE_SPECS": "true",
        "FAIL_ON_INIT_ERROR": "true",
        "DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri",
        "DEVICE_ID_STRATEGY": "uuid",
        "CDI_ANNOTATION_PREFIX": "cdi.k8s.io/",
        "CDI_ENABLED": "true",
        "MIG_STRATEGY": "single",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
        "MPS_ROOT": "/run/nvidia/mps",
    }.items() <= env_of(main).items()
    # the driver root comes from driver-ready through the entrypoint; the CDI hook path is set only with a
    # toolkit the stack deploys (TransformDevicePlugin), the host toolkit's default is used otherwise
    assert not {"NVIDIA_DRIVER_ROOT", "CONTAINER_DRIVER_ROOT", "NVIDIA_CDI_HOOK_PATH"} & env_of(main).keys()
    assert "CONFIG_FILE" not in env_of(main)
    assert {
        "/var/lib/kubelet/device-plugins",
        "/run/nvidia/validations",
        "/run/nvidia/driver",
        "/",
        "/var/run/cdi",
        "/run/nvidia/mps",
        "/run/nvidia/mps/shm",
    } <= set(host_paths(ds).values())


def test_time_slicing_renders_the_config_map_and_config_manager(render: RenderFactory) -> None:
    rendered = render(
        "  devicePlugin:\n    config:\n      timeSlicing: {replicas: 4, renameByDefault: true}\n"
    )
    config_map = rendered["devicePlugin/ConfigMap/gpu-operator/nvidia-device-plugin-config"]
    config = yaml.safe_load(config_map["data"]["default"])
    assert config["version"] == "v1" and config["flags"] == {"migStrategy": "single"}
    assert config["sharing"]["timeSlicing"] == {
        "renameByDefault": True,
        "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    ds = rendered.daemonset("devicePlugin", "nvidia-device-plugin-daemonset")
    assert init_names(ds) == ["toolkit-validation", "config-manager-init"]
    assert [c["name"] for c in pod(ds)["containers"]] == ["nvidia-device-plugin", "config-manager"]
    assert pod(ds)["shareProcessNamespace"] is True
    sidecar = env_of(container(ds, "config-manager"))
    assert {
        "ONESHOT": "false",
        "NODE_LABEL": "nvidia.com/device-plugin.config",
        "DEFAULT_CONFIG": "default",
        "CONFIG_FILE_SRCDIR": "/available-configs",
        "CONFIG_FILE_DST": "/config/config.yaml",
        "FALLBACK_STRATEGIES": "empty",
        "SEND_SIGNAL": "true",
        "SIGNAL": "1",
        "PROCESS_TO_SIGNAL": "nvidia-device-plugin",
    }.items() <= sidecar.items()
    assert env_of(container(ds, "config-manager-init", init=True))["ONESHOT"] == "true"
    assert {"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-config"}} in pod(ds)[
        "volumes"
    ]
    assert env_of(container(ds, "nvidia-device-plugin"))["CONFIG_FILE"] == "/config/config.yaml"
    gfd = rendered.daemonset("gfd", "gpu-feature-discovery")
    assert env_of(container(gfd, "config-manager"))["PROCESS_TO_SIGNAL"] == "gpu-feature-discovery"


def test_mps_and_named_config(render: RenderFactory) -> None:
    mps = render("  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 10}}}\n")
    config = yaml.safe_load(
        mps["devicePlugin/ConfigMap/gpu-operator/nvidia-device-plugin-config"]["data"]["default"]
    )
    assert config["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 10}]}
    }
    # applyMIGConfiguration sets the strategy even when it is none, but no MIG monitor devices
    plugin_env = env_of(
        container(mps.daemonset("devicePlugin", "nvidia-device-plugin-daemonset"), "nvidia-device-plugin")
    )
    assert plugin_env["MIG_STRATEGY"] == "none" and "NVIDIA_MIG_MONITOR_DEVICES" not in plugin_env
    named = render("  devicePlugin: {config: {name: sharing, default: a100}}\n")
    # the user's ConfigMap, not ours (only the operator's entrypoint script is)
    assert [a for a in named.addresses() if a.startswith("devicePlugin/ConfigMap/")] == [
        "devicePlugin/ConfigMap/gpu-operator/nvidia-device-plugin-entrypoint"
    ]
    ds = named.daemonset("devicePlugin", "nvidia-device-plugin-daemonset")
    assert env_of(container(ds, "config-manager"))["DEFAULT_CONFIG"] == "a100"
    assert {"name": "available-configs", "configMap": {"name": "sharing"}} in pod(ds)["volumes"]


def test_gfd_daemonset_and_rbac(render: RenderFactory) -> None:
    rendered = render("")
    ds = rendered.daemonset("gfd", "gpu-feature-discovery")
    assert_common(ds, "gpu-feature-discovery", "gpu-feature-discovery")
    assert ds["metadata"]["labels"]["app.kubernetes.io/part-of"] == "nvidia-gpu"
    spec = pod(ds)
    assert (
        spec["runtimeClassName"] == "nvidia" and spec["serviceAccountName"] == "nvidia-gpu-feature-discovery"
    )
    assert init_names(ds) == ["toolkit-validation"]
    main = container(ds, "gpu-feature-discovery")
    assert main["command"] == ["gpu-feature-discovery"] and main["securityContext"] == {"privileged": True}
    assert {
        "GFD_SLEEP_INTERVAL": "60s",
        "GFD_FAIL_ON_INIT_ERROR": "true",
        "MIG_STRATEGY": "single",
        "NODE_NAME": "<fieldRef>",
        "NAMESPACE": "<fieldRef>",
        "POD_NAME": "<fieldRef>",
    }.items() <= env_of(main).items()
    assert {"/etc/kubernetes/node-feature-discovery/features.d", "/sys", "/run/nvidia"} <= set(
        host_paths(ds).values()
    )
    assert next(m for m in main["volumeMounts"] if m["name"] == "host-sys")["readOnly"] is True
    cluster = rendered["gfd/ClusterRole/nvidia-gpu-feature-discovery"]["rules"]
    assert {"get", "update", "patch"} <= set(cluster[0]["verbs"]) and cluster[0]["resources"] == ["nodes"]
    namespaced = rendered["gfd/Role/gpu-operator/nvidia-gpu-feature-discovery"]["rules"]
    assert namespaced[0]["apiGroups"] == ["nfd.k8s-sigs.io"] and namespaced[0]["resources"] == [
        "nodefeatures"
    ]


def test_dcgm_exporter_daemonset_and_service(render: RenderFactory) -> None:
    rendered = render("")
    ds = rendered.daemonset("dcgmExporter", "nvidia-dcgm-exporter")
    assert_common(ds, "nvidia-dcgm-exporter", "dcgm-exporter")
    spec = pod(ds)
    assert spec["runtimeClassName"] == "nvidia" and spec["automountServiceAccountToken"] is False
    main = container(ds, "nvidia-dcgm-exporter")
    assert main["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    assert main["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"] == {"path": "/health", "port": 9400}
    assert main["readinessProbe"]["initialDelaySeconds"] == 45
    assert {
        "DCGM_EXPORTER_LISTEN": ":9400",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcp-metrics-included.csv",
    }.items() <= env_of(main).items()
    assert {"/var/lib/kubelet/pod-resources", "/run/nvidia"} <= set(host_paths(ds).values())
    service = rendered["dcgmExporter/Service/gpu-operator/nvidia-dcgm-exporter"]
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert service["spec"]["ports"] == [
        {"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == {"app": "nvidia-dcgm-exporter"}
    assert service["spec"]["internalTrafficPolicy"] == "Cluster"
    # the operator's read-pods ClusterRole is there either way; only pod labels mount the token that uses it
    assert "dcgmExporter/ClusterRole/nvidia-dcgm-exporter-read-pods" in rendered.addresses()


def test_dcgm_exporter_pod_labels_and_metrics_config(render: RenderFactory) -> None:
    rendered = render("  dcgmExporter: {enablePodLabels: true, metricsConfigMap: my-metrics}\n")
    ds = rendered.daemonset("dcgmExporter", "nvidia-dcgm-exporter")
    assert pod(ds)["automountServiceAccountToken"] is True
    variables = env_of(container(ds, "nvidia-dcgm-exporter"))
    assert variables["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert variables["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    rules = rendered["dcgmExporter/ClusterRole/nvidia-dcgm-exporter-read-pods"]["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert any(v.get("configMap", {}).get("name") == "my-metrics" for v in pod(ds)["volumes"])


def test_validator_daemonset(render: RenderFactory) -> None:
    ds = render("").daemonset("validator", "nvidia-operator-validator")
    assert_common(ds, "nvidia-operator-validator", "operator-validator")
    assert ds["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpu-operator"
    spec = pod(ds)
    assert spec["runtimeClassName"] == "nvidia" and spec["serviceAccountName"] == "nvidia-operator-validator"
    assert init_names(ds) == [
        "driver-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    ]
    # every init container runs as root; driver-validation also with the s0 SELinux level (operator's asset)
    assert [c["securityContext"] for c in spec["initContainers"]] == [
        {"privileged": True, "seLinuxOptions": {"level": "s0"}, "runAsUser": 0},
        *[{"privileged": True, "runAsUser": 0}] * 3,
    ]
    assert env_of(container(ds, "driver-validation", init=True))["WITH_WAIT"] == "true"
    toolkit = env_of(container(ds, "toolkit-validation", init=True))
    assert (toolkit["WITH_WAIT"], toolkit["NVIDIA_VISIBLE_DEVICES"]) == ("false", "all")
    cuda = env_of(container(ds, "cuda-validation", init=True))
    assert cuda["VALIDATOR_IMAGE"] == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    plugin = env_of(container(ds, "plugin-validation", init=True))
    assert (plugin["WITH_WORKLOAD"], plugin["MIG_STRATEGY"]) == ("false", "single")
    main = container(ds, "nvidia-operator-validator")
    assert main["image"] == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    assert "rm -f /run/nvidia/validations/*-ready" in main["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert {"/run/nvidia/validations", "/run/nvidia/driver", "/", "/dev/char"} <= set(host_paths(ds).values())


def test_validator_drops_plugin_validation_without_device_plugin(render: RenderFactory) -> None:
    ds = render("  devicePlugin: {owner: none}\n").daemonset("validator", "nvidia-operator-validator")
    assert init_names(ds) == ["driver-validation", "toolkit-validation", "cuda-validation"]
    external = render("  devicePlugin: {owner: external}\n").daemonset(
        "validator", "nvidia-operator-validator"
    )
    assert "plugin-validation" in init_names(external)


def test_operands_skip_toolkit_validation_without_the_validator(render: RenderFactory) -> None:
    """Nobody writes toolkit-ready without the validator: waiting for it would hang the operands forever."""
    rendered = render("  validator: {owner: none}\n")
    for component, name in (
        ("devicePlugin", "nvidia-device-plugin-daemonset"),
        ("gfd", "gpu-feature-discovery"),
        ("dcgmExporter", "nvidia-dcgm-exporter"),
    ):
        assert "initContainers" not in pod(rendered.daemonset(component, name))
    validator_image = render("  validator: {version: v26.3.3}\n").daemonset("gfd", "gpu-feature-discovery")
    waiting = container(validator_image, "toolkit-validation", init=True)
    assert waiting["image"] == "nvcr.io/nvidia/gpu-operator:v26.3.3"


def test_stack_settings_reach_every_daemonset(render: RenderFactory) -> None:
    body = """\
  namespace: gpu-stack
  nodeSelector: {node-role.example.com/gpu: "true"}
  daemonsets:
    tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoExecute}]
    priorityClassName: gpu-critical
    labels: {team: ml, app: hijack}
    annotations: {owner: platform}
    maxUnavailable: 25%
  gfd: {nodeSelector: {only: gfd}}
"""
    rendered = render(body)
    daemonsets = [o.manifest for o in rendered.objects if o.manifest["kind"] == "DaemonSet"]
    assert len(daemonsets) == 6
    for ds in daemonsets:
        spec = pod(ds)
        assert ds["metadata"]["namespace"] == "gpu-stack"
        assert spec["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
        ]
        assert spec["priorityClassName"] == "gpu-critical"
        template = ds["spec"]["template"]["metadata"]
        assert template["labels"]["team"] == "ml" and ds["metadata"]["labels"]["team"] == "ml"
        assert template["labels"]["app"] == ds["metadata"]["name"]  # user labels never override app
        # the driver's template also names its default container, as the operator's asset does
        default_container = (
            {"kubectl.kubernetes.io/default-container": "nvidia-driver-ctr"}
            if ds["metadata"]["name"] == "nvidia-driver-daemonset"
            else {}
        )
        assert template["annotations"] == {"owner": "platform", **default_container}
        expected = (
            {"only": "gfd"}
            if ds["metadata"]["name"] == "gpu-feature-discovery"
            else {"node-role.example.com/gpu": "true"}
        )
        assert spec["nodeSelector"] == expected
        strategy = ds["spec"]["updateStrategy"]
        assert strategy == (
            {"type": "OnDelete"}
            if ds["metadata"]["name"] == "nvidia-driver-daemonset"
            else {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}}
        )
    binding = rendered["devicePlugin/ClusterRoleBinding/nvidia-device-plugin"]
    assert binding["subjects"][0]["namespace"] == "gpu-stack"


def test_component_knobs_reach_the_main_container(render: RenderFactory) -> None:
    body = """\
  devicePlugin:
    imagePullPolicy: Always
    imagePullSecrets: [ngc-secret]
    env: [{name: FAIL_ON_INIT_ERROR, value: "false"}, {name: EXTRA, value: "1"}]
    args: ["--mig-strategy=none"]
    resources: {limits: {memory: 512Mi, cpu: 1}, requests: {cpu: 50m}}
"""
    ds = render(body).daemonset("devicePlugin", "nvidia-device-plugin-daemonset")
    main = container(ds, "nvidia-device-plugin")
    names = [e["name"] for e in main["env"]]
    assert names[:2] == ["PASS_DEVICE_SPECS", "FAIL_ON_INIT_ERROR"] and names[-1] == "EXTRA"
    assert env_of(main)["FAIL_ON_INIT_ERROR"] == "false"
    assert main["args"] == ["--mig-strategy=none"] and main["imagePullPolicy"] == "Always"
    assert main["resources"] == {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "50m"}}
    assert pod(ds)["imagePullSecrets"] == [{"name": "ngc-secret"}]
