"""Request bodies in the Kubernetes protobuf encoding, read as the JSON objects they stand for."""

from __future__ import annotations

import pytest

from gpuplan.sim.api import protobuf


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return protobuf.MAGIC + field(1, type_meta) + field(2, raw)


def test_a_token_request_with_its_bound_object_and_expiration() -> None:
    bound = field(1, "Pod") + field(2, "v1") + field(3, "p") + field(4, "")
    spec = field(1, "api") + field(3, bound) + field(4, 3600)
    meta = field(1, "sa") + field(3, "")  # an empty namespace: left out, as JSON omits it
    body = protobuf.decode(
        envelope("authentication.k8s.io/v1", "TokenRequest", field(1, meta) + field(2, spec))
    )
    assert body == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": "sa"},
        "spec": {
            "audiences": ["api"],
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"},
            "expirationSeconds": 3600,
        },
    }


def test_maps_quantities_int_or_strings_times_and_pointer_zeros() -> None:
    labels = field(11, field(1, "app") + field(2, "x"))
    created = field(8, field(1, 1767225600))  # 2026-01-01T00:00:00Z
    meta = field(1, "j") + labels + created
    requests = field(2, field(1, "cpu") + field(2, field(1, "100m")))
    container = field(1, "c") + field(2, "busybox") + field(8, requests)
    pod_spec = field(2, container)
    template = field(2, pod_spec)
    job_spec = (
        field(1, 0) + field(6, template) + field(7, 0) + field(3, 30)
    )  # parallelism 0 and backoffLimit 0
    job = protobuf.decode(envelope("batch/v1", "Job", field(1, meta) + field(2, job_spec)))
    assert job["metadata"] == {
        "name": "j",
        "labels": {"app": "x"},
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    assert job["spec"]["parallelism"] == 0 and job["spec"]["backoffLimit"] == 0  # pointers keep their zeros
    assert job["spec"]["activeDeadlineSeconds"] == 30
    assert job["spec"]["template"]["spec"]["containers"] == [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
    ]
    port = field(1, 1) + field(3, "metrics")  # IntOrString, type 1: the string
    probe_port = protobuf._value("k8s.io.apimachinery.pkg.util.intstr.IntOrString", port)
    assert probe_port == "metrics"
    assert protobuf._value("int32", (1 << 64) - 5) == -5


def test_embedded_structs_add_their_fields_where_json_inlines_them() -> None:
    """Volume embeds VolumeSource, ConfigMapVolumeSource embeds LocalObjectReference (`json:",inline"`)."""
    config_map = field(2, field(19, field(1, field(1, "gpuplan-drift-spec"))))
    empty_dir = field(2, field(2, b""))
    spec = field(1, field(1, "spec") + config_map) + field(1, field(1, "tmp") + empty_dir)
    pod = protobuf.decode(envelope("v1", "Pod", field(2, spec)))
    assert pod["spec"]["volumes"] == [
        {"name": "spec", "configMap": {"name": "gpuplan-drift-spec"}},
        {"name": "tmp", "emptyDir": {}},
    ]


def test_an_empty_struct_is_kept_as_json_keeps_it() -> None:
    """`kubectl create cronjob` sends an empty pod template metadata; Go's JSON would write it as {}."""
    template = field(1, b"") + field(2, field(2, field(1, "c") + field(2, "busybox")))
    job_template = field(5, field(2, field(6, template)))  # CronJobSpec.jobTemplate > .spec > .template
    cron = protobuf.decode(envelope("batch/v1", "CronJob", field(2, field(1, "*/5 * * * *") + job_template)))
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"] == {}


def test_what_cannot_be_read_is_a_protobuf_error() -> None:
    with pytest.raises(protobuf.ProtobufError):
        protobuf.decode(b'{"kind": "Pod"}')
    with pytest.raises(protobuf.ProtobufError):
        protobuf.decode(envelope("example.com/v1", "Widget", b""))


def test_delete_options_and_evictions() -> None:
    options = field(1, 0) + field(4, "Foreground")  # gracePeriodSeconds 0 (a pointer: kept)
    body = protobuf.decode(envelope("meta.k8s.io/v1", "DeleteOptions", options))
    assert body == {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Foreground",
    }
    eviction = protobuf.decode(envelope("policy/v1", "Eviction", field(1, field(1, "p")) + field(2, options)))
    assert eviction["metadata"] == {"name": "p"} and eviction["deleteOptions"]["gracePeriodSeconds"] == 0
