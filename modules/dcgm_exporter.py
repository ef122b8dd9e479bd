"""The DCGM exporter (``nvidia-dcgm-exporter``, facts §3.6): GPU metrics for Prometheus on :9400/metrics.

Renders ServiceAccount, the operator's Role/Binding (SCC, ConfigMaps) and ClusterRole/Binding
``nvidia-dcgm-exporter-read-pods``, the DaemonSet and the Service ``nvidia-dcgm-exporter`` (port
``gpu-metrics`` 9400, ``prometheus.io/scrape: "true"``). With ``enablePodLabels`` the exporter reads pods (to
attach their labels to metrics), so its token is mounted; otherwise, as the operator does,
``automountServiceAccountToken`` is false. The ServiceMonitor is left out: it needs the Prometheus
Operator's CRD, which gpuplan cannot assume.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, PlainValidator, WithJsonSchema

from gpuplan.modules import common
from gpuplan.modules.base import (
    IMAGE_DOC,
    REPOSITORY_DOC,
    VERSION_DOC,
    ComponentConfig,
    ComponentName,
    DesiredObject,
    HealthCheck,
    StackContext,
)
from gpuplan.modules.common import Json, env, env_field, host_path, mount
from gpuplan.modules.values import DnsLabel

NAME = "nvidia-dcgm-exporter"
ACCOUNT = "nvidia-dcgm-exporter"
READ_PODS = "nvidia-dcgm-exporter-read-pods"
PORT = 9400
DEFAULT_COLLECTORS = "/etc/dcgm-exporter/dcp-metrics-included.csv"
CUSTOM_COLLECTORS = "/etc/dcgm-exporter/dcgm-metrics.csv"


def _sample_size(value: object) -> object:
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ValueError("expected a number of nodes (0 or more) or all")


SampleSize = Annotated[
    int | Literal["all"],
    PlainValidator(_sample_size),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"const": "all"}]}),
]


class DcgmExporterConfig(ComponentConfig):
    """DCGM exporter: per-GPU metrics (temperature, utilisation, memory, XID errors, ...)."""

    version: str = Field(default="4.6.0-4.8.3-distroless", description=VERSION_DOC)
    repository: str = Field(default="nvcr.io/nvidia/k8s", description=REPOSITORY_DOC)
    image: str = Field(default="dcgm-exporter", description=IMAGE_DOC)
    metrics_config_map: DnsLabel | None = None
    """A ConfigMap in the stack namespace with key dcgm-metrics.csv listing the fields to export."""
    enable_pod_labels: bool = False
    """Attach the labels of the pod using a GPU to its metrics (needs read access to pods)."""
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """Type of the nvidia-dcgm-exporter Service."""
    internal_traffic_policy: Literal["Cluster", "Local"] = "Cluster"
    """internalTrafficPolicy of the nvidia-dcgm-exporter Service."""
    health_sample_nodes: SampleSize = 10
    """How many nodes apply's metrics gate scrapes after a change: the first ones the rollout made Ready,
    plus every node whose exporter restarted (every other exporter counts by its Ready pod), or, once the
    DaemonSet's status counts every exporter available, the first ones by name (every other exporter
    counts by that status, and only the sample's pods are read); all: every node, one request per node and
    round; 0: no scrape, the gate passes on the DaemonSet's rollout and Ready exporter pods alone and the
    apply says so in a note (for a cluster whose API server cannot reach the exporters through its pod or
    service proxy and whose spec names no Prometheus in telemetry.prometheus)."""


def _exporter_env(config: DcgmExporterConfig) -> list[Json]:
    collectors = CUSTOM_COLLECTORS if config.metrics_config_map else DEFAULT_COLLECTORS
    variables = [
        env("DCGM_EXPORTER_LISTEN", f":{PORT}"),
        env("DCGM_EXPORTER_KUBERNETES", "true"),
        env("DCGM_EXPORTER_COLLECTORS", collectors),
        env_field("NODE_NAME", "spec.nodeName"),
    ]
    if config.enable_pod_labels:
        variables.append(env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"))
    return variables


def _probe(*, period: bool) -> Json:
    """The operator's probes (assets/state-dcgm-exporter/0800_daemonset.yaml, v26.7.0): liveness every 5 s,
    readiness at the default period."""
    probe: Json = {"httpGet": {"path": "/health", "port": PORT}, "initialDelaySeconds": 45}
    if period:
        probe["periodSeconds"] = 5
    return probe


def _daemonset(config: DcgmExporterConfig, stack: StackContext) -> DesiredObject:
    # gpu-operator v26.7.0 assets/state-dcgm-exporter/0800_daemonset.yaml: only toolkit-validation mounts
    # /run/nvidia (to read the marker); the exporter itself mounts the kubelet's pod-resources socket.
    mounts = [mount("pod-gpu-resources", "/var/lib/kubelet/pod-resources", read_only=True)]
    volumes = [
        host_path("pod-gpu-resources", "/var/lib/kubelet/pod-resources"),
        host_path("run-nvidia", "/run/nvidia"),
    ]
    if config.metrics_config_map:
        mounts.append(mount("metrics-config", CUSTOM_COLLECTORS, sub_path="dcgm-metrics.csv", read_only=True))
        volumes.append(
            {
                "name": "metrics-config",
                "configMap": {
                    "name": config.metrics_config_map,
                    "items": [{"key": "dcgm-metrics.csv", "path": "dcgm-metrics.csv"}],
                },
            }
        )
    exporter = common.main_container(
        config,
        {
            "name": "nvidia-dcgm-exporter",
            "image": config.image_ref(),
            "env": _exporter_env(config),
            "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
            "livenessProbe": _probe(period=True),
            "readinessProbe": _probe(period=False),
            "securityContext": dict(common.PRIVILEGED),
            "volumeMounts": mounts,
        },
    )
    pod: Json = {
        "serviceAccountName": ACCOUNT,
        "automountServiceAccountToken": config.enable_pod_labels,
        "initContainers": common.toolkit_validation_init(stack, via_run_nvidia=True),
        "containers": [exporter],
        "volumes": volumes,
    }
    if (runtime_class := common.runtime_class(stack)) is not None:
        pod["runtimeClassName"] = runtime_class
    if not pod["initContainers"]:
        del pod["initContainers"]
    return common.daemonset(
        stack, "dcgmExporter", config, name=NAME, labels={"app": NAME}, deploy_label="dcgm-exporter", pod=pod
    )


def _service(config: DcgmExporterConfig, stack: StackContext) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.metadata(
            stack, "dcgmExporter", NAME, labels={"app": NAME}, annotations={"prometheus.io/scrape": "true"}
        ),
        "spec": {
            "type": config.service_type,
            "internalTrafficPolicy": config.internal_traffic_policy,
            "selector": {"app": NAME},
            "ports": [{"name": "gpu-metrics", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


class DcgmExporter:
    """Module of the DCGM exporter component."""

    name: ClassVar[ComponentName] = "dcgmExporter"
    depends_on: ClassVar[tuple[ComponentName, ...]] = ("gfd",)
    writes_first: ClassVar[bool] = False
    config_model: ClassVar[type[BaseModel]] = DcgmExporterConfig

    def render(self, config: BaseModel, stack: StackContext) -> tuple[DesiredObject, ...]:
        assert isinstance(config, DcgmExporterConfig)
        if config.owner != "gpuplan":
            return ()
        objects = [common.desired(self.name, common.service_account(stack, self.name, ACCOUNT))]
        # the operator's Role: the privileged SCC and reading the metrics ConfigMap
        # (assets/state-dcgm-exporter/0200_role.yaml, v26.7.0)
        config_maps = common.rule([""], ["configmaps"], ["get", "list"])
        role = common.scc_role_and_binding(stack, self.name, ACCOUNT, [config_maps], labels={"app": NAME})
        objects += [common.desired(self.name, m) for m in role]
        # the operator's ClusterRole/Binding nvidia-dcgm-exporter-read-pods, rendered with or without pod
        # labels (assets/state-dcgm-exporter/0210_clusterrole.yaml, 0310_clusterrolebinding.yaml, v26.7.0);
        # the token that uses it is only mounted with enablePodLabels
        pods = [common.rule([""], ["pods"], ["get", "list", "watch"])]
        read_pods = common.role_and_binding(
            stack, self.name, READ_PODS, pods, cluster=True, account=ACCOUNT, labels={"app": NAME}
        )
        objects += [common.desired(self.name, m) for m in read_pods]
        objects += [_daemonset(config, stack), common.desired(self.name, _service(config, stack))]
        return tuple(objects)

    def health_checks(self, config: BaseModel, stack: StackContext) -> tuple[HealthCheck, ...]:
        assert isinstance(config, DcgmExporterConfig)
        params: dict[str, object] = {
            "port": PORT,
            "path": "/metrics",
            "metric": "DCGM_FI_DEV_GPU_TEMP",
            "timeoutSeconds": config.health_timeout_seconds,
            "sampleNodes": config.health_sample_nodes,
        }
        if config.owner == "gpuplan":
            metrics = HealthCheck("dcgm-metrics", {**params, "service": NAME, "namespace": stack.namespace})
            return HealthCheck("rollout", common.rollout_check(stack, config, NAME)), metrics
        return (HealthCheck("dcgm-metrics", params),) if config.owner == "external" else ()
