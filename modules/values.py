"""Value models shared by the stack spec and the component modules.

Every model here is frozen, rejects unknown keys and speaks the camelCase keys of ``gpustack.yaml`` (the
Python attribute names are snake_case). :mod:`gpuplan.planner.spec.model` composes them into the spec;
:mod:`gpuplan.modules.base` builds the per-component config on :class:`ComponentConfig`-style fields; the
modules read them when rendering. Nothing here does I/O.

Versions are checked against the shape of real NVIDIA image tags (``v0.20.1``, ``4.6.0-4.8.3-distroless``,
driver ``595.91.07``) or a ``sha256:`` digest, so that a typo such as ``0.20`` or ``latest`` is an error with
the expected format rather than an image that never pulls.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gpuplan.modules.quantity import QUANTITY, quantity_value

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_TAG = re.compile(r"^v?\d+(\.\d+){1,3}([-+][0-9A-Za-z][0-9A-Za-z.+-]*)?$")
DRIVER_VERSION = re.compile(r"^\d{3}\.\d{2,3}(\.\d{2,3})?$")
INT_OR_PERCENT = re.compile(r"^\d+%?$")

CONFIG_MAP = "nvidia-device-plugin-config"
INLINE_CONFIG_KEY = "default"
# MPS clients per GPU: 48 with Volta MPS, 16 before (CUDA MPS docs, "When to Use MPS" > Considerations >
# Limitations, https://docs.nvidia.com/deploy/mps/when-to-use-mps.html); the device plugin's config check
# allows 48 from compute capability 7.5 and 16 below (facts §5.1): 16 before Turing (planner/spec/compat.py)
MPS_MAX_REPLICAS = 48

TAG_FORMAT = "a release tag such as v0.20.1 or 4.6.0-4.8.3-distroless, or a digest sha256:<64 hex digits>"
DRIVER_FORMAT = "a driver version such as 595.91.07 or 580.105.08, or a digest sha256:<64 hex digits>"


class Model(BaseModel):
    """Base of every gpustack.yaml model: frozen, unknown keys rejected, camelCase keys. The string under a
    field is its description in ``gpuplan schema`` (:mod:`gpuplan.planner.spec.docstrings`)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _empty_section_means_defaults(cls, data: Any) -> Any:
        # `validator:` with nothing after it is YAML null; users mean "this section with its defaults"
        return {} if data is None else data


def check_version(value: str, *, driver: bool = False) -> str:
    """Return ``value`` when it looks like a real image tag (or digest); raise a pydantic error otherwise."""
    pattern, expected = (DRIVER_VERSION, DRIVER_FORMAT) if driver else (IMAGE_TAG, TAG_FORMAT)
    if DIGEST.match(value) or pattern.match(value):
        return value
    raise PydanticCustomError(
        "version_format", "'{value}' is not a valid version", {"value": value, "expected": expected}
    )


def _int_to_str(value: Any) -> Any:
    # YAML reads `maxUnavailable: 1` and `cpu: 2` as ints; Kubernetes accepts both, gpuplan keeps strings.
    if isinstance(value, bool):
        return value
    return str(value) if isinstance(value, (int, float)) else value


Quantity = Annotated[
    str,
    BeforeValidator(
        _int_to_str, json_schema_input_type=int | float | Annotated[str, Field(pattern=QUANTITY.pattern)]
    ),
    Field(pattern=QUANTITY.pattern),
]


def _not_negative(value: str) -> str:
    # ValidateResourceQuantityValue (pkg/apis/core/validation/validation.go, v1.37.2) refuses a negative
    # request or limit, which the quantity grammar itself allows
    if value.startswith("-") and (quantity_value(value) or 0) < 0:
        raise PydanticCustomError("quantity_negative", "'{value}' is negative", {"value": value})
    return value


ResourceQuantity = Annotated[Quantity, AfterValidator(_not_negative)]
IntOrPercent = Annotated[
    str,
    BeforeValidator(
        _int_to_str, json_schema_input_type=int | Annotated[str, Field(pattern=INT_OR_PERCENT.pattern)]
    ),
    Field(pattern=INT_OR_PERCENT.pattern),
]
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL.pattern, max_length=63)]
OS_TAG = re.compile(r"^[a-z]+[0-9.]+$")
DURATION = re.compile(r"^\d+(ms|s|m|h)$")
ABSOLUTE_PATH = re.compile(r"^/")

# What each pattern means, for error hints (a regular expression is no help to most readers)
PATTERN_HELP = {
    QUANTITY.pattern: "a Kubernetes quantity such as 500m, 2, 0.5, 512Mi or 2e9",
    INT_OR_PERCENT.pattern: "a number or a percentage, such as 1 or 25%",
    DNS_LABEL.pattern: "lowercase letters, digits and '-', starting and ending with a letter or digit",
    OS_TAG.pattern: "an OS tag such as ubuntu24.04 or rhel9",
    DURATION.pattern: "a duration such as 60s or 5m",
    ABSOLUTE_PATH.pattern: "an absolute path such as /usr/local/nvidia",
}
LabelMap = dict[str, str]


class EnvVar(Model):
    """An environment variable added to the component's main container (overrides a default of that name)."""

    name: str = Field(min_length=1)
    """Variable name."""
    value: str = ""
    """Variable value; always a string (quote numbers and booleans)."""


class Resources(Model):
    """CPU and memory requests and limits of the component's main container."""

    limits: dict[str, ResourceQuantity] = Field(default_factory=dict)
    """Resource limits, e.g. {cpu: 500m, memory: 512Mi}."""
    requests: dict[str, ResourceQuantity] = Field(default_factory=dict)
    """Resource requests, e.g. {cpu: 100m, memory: 128Mi}."""


class Toleration(Model):
    """A pod toleration, as in the Kubernetes pod spec."""

    key: str | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists matches any value; Equal needs `value`."""
    value: str | None = None
    """Taint value, for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; empty tolerates all effects."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """How long a NoExecute taint is tolerated."""


def _default_tolerations() -> tuple[Toleration, ...]:
    return (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


class DaemonSetSettings(Model):
    """Settings every rendered DaemonSet shares (GPU Operator `daemonsets` section)."""

    tolerations: tuple[Toleration, ...] = Field(default_factory=_default_tolerations)
    """Replaces the default toleration of the nvidia.com/gpu taint."""
    priority_class_name: str = "system-node-critical"
    """PriorityClass of the operand pods."""
    labels: LabelMap = Field(default_factory=dict)
    """Extra labels on every DaemonSet and its pods (app and app.kubernetes.io/part-of are never
    overridden)."""
    annotations: LabelMap = Field(default_factory=dict)
    """Extra annotations on every DaemonSet and its pods."""
    update_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    """DaemonSet update strategy (the driver is always OnDelete)."""
    max_unavailable: IntOrPercent = "1"
    """rollingUpdate.maxUnavailable: a number or a percentage such as 25%."""
    pod_template: Literal["gpuplan", "gpu-operator"] = "gpuplan"
    """gpu-operator: the pod templates GPU Operator v26.7.0 renders, so its running operands are adopted
    without a restart: each DaemonSet selects nvidia.com/gpu.deploy.<operand>=true, which gpuplan sets on the
    nodeSelector's nodes where absent (as the operator's node labeller), and its pods carry app and `labels`
    only (gpuplan's own labels stay on the DaemonSet). The node selectors then choose the nodes gpuplan
    labels: a node labelled before (by the operator) runs the operands until its label is set to false.
    gpuplan: NFD's nodeSelector with a NotIn affinity on the operator's eviction labels, and gpuplan's labels
    on the pods."""


class TimeSlicing(Model):
    """Time-slicing: each GPU is advertised `replicas` times; no memory or fault isolation."""

    replicas: int = Field(ge=2, le=1024)
    """Replicas per GPU (at least 2)."""
    rename_by_default: bool = False
    """Advertise the shared resource as nvidia.com/gpu.shared instead of nvidia.com/gpu."""
    fail_requests_greater_than_one: bool = False
    """Reject pods that request more than one shared GPU."""


class Mps(Model):
    """CUDA MPS: full GPUs only, not with MIG; each replica gets 1/replicas of memory and compute."""

    replicas: int = Field(ge=2, le=MPS_MAX_REPLICAS)
    """Clients per GPU: at least 2, at most 48 (16 on GPUs older than Turing)."""
    rename_by_default: bool = False
    """Advertise the shared resource as nvidia.com/gpu.shared instead of nvidia.com/gpu."""


class SharingConfig(Model):
    """Device plugin / GFD config: inline time-slicing or MPS settings, or an existing ConfigMap."""

    time_slicing: TimeSlicing | None = None
    """Time-slice every GPU (rendered into the ConfigMap nvidia-device-plugin-config)."""
    mps: Mps | None = None
    """Share every GPU through MPS (rendered into the ConfigMap nvidia-device-plugin-config)."""
    name: DnsLabel | None = None
    """An existing ConfigMap in the stack namespace whose keys are config names (facts §5.3)."""
    default_config: str | None = Field(default=None, alias="default")
    """Key of `name` applied to nodes without the nvidia.com/device-plugin.config label."""

    @model_validator(mode="after")
    def _one_source(self) -> SharingConfig:
        sources = [
            key
            for key, value in (("timeSlicing", self.time_slicing), ("mps", self.mps), ("name", self.name))
            if value is not None
        ]
        if len(sources) != 1:
            raise ValueError(
                "set exactly one of timeSlicing, mps or name (with default), got "
                + (", ".join(sources) or "none")
            )
        if self.default_config is not None and self.name is None:
            raise ValueError("default names a key of an existing ConfigMap: it needs name")
        return self

    def config_map_name(self) -> str:
        return self.name if self.name is not None else CONFIG_MAP

    def default_key(self) -> str:
        if self.name is None:
            return INLINE_CONFIG_KEY
        return self.default_config or ""
