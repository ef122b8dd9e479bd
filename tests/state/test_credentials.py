"""The state file never holds credentials: what is refused, what is allowed, how Secrets are redacted."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from gpuplan.state.credentials import find_credentials, redact_owned
from gpuplan.state.model import JournalEntry, StateFile

KUBECONFIG_TEXT = """apiVersion: v1
kind: Config
clusters:
- cluster: {server: https://10.0.0.1:6443}
  name: lab
users:
- name: admin
  user: {client-key-data: LS0t}
"""
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJl"

REFUSED: list[tuple[str, str, str, dict[str, Any], str]] = [
    (
        "secret-data",
        "v1",
        "Secret",
        {"data": {"password": base64.b64encode(b"hunter2").decode()}},
        "data.password: Secret data",
    ),
    ("secret-stringdata", "v1", "Secret", {"stringData": {"token": "abc"}}, "stringData.token: Secret data"),
    (
        "password-field",
        "apps/v1",
        "DaemonSet",
        {"spec": {"registry": {"password": "hunter2"}}},
        "spec.registry.password: field 'password'",
    ),
    (
        "client-secret",
        "v1",
        "ConfigMap",
        {"data": {"oidc_client_secret": "s3cr3t"}},
        "data.oidc_client_secret: field 'oidc_client_secret'",
    ),
    (
        "bearer-token",
        "v1",
        "ConfigMap",
        {"data": {"auth": "Bearer abcdefghijklmnop"}},
        "data.auth: a bearer token",
    ),
    (
        "jwt-in-args",
        "apps/v1",
        "DaemonSet",
        {"spec": {"template": {"spec": {"containers": [{"args": ["--auth=" + JWT]}]}}}},
        "spec.template.spec.containers[0].args[0]: a JSON Web Token",
    ),
    (
        "kubeconfig-text",
        "v1",
        "ConfigMap",
        {"data": {"config": KUBECONFIG_TEXT}},
        "data.config: a kubeconfig",
    ),
    (
        "kubeconfig-object",
        "v1",
        "ConfigMap",
        {"embedded": {"apiVersion": "v1", "kind": "Config", "users": [{"name": "admin"}]}},
        "embedded: an embedded kubeconfig",
    ),
    (
        "private-key",
        "v1",
        "ConfigMap",
        {"data": {"key.pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n"}},
        "data.key.pem: a PEM private key",
    ),
    (
        "last-applied-secret",
        "v1",
        "Secret",
        {
            "metadata": {
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": (
                        '{"apiVersion":"v1","data":{"pw":"aHVudGVyMg=="},"kind":"Secret"}'
                    )
                }
            }
        },
        "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration: an embedded Secret manifest",
    ),
    (
        "env-token",
        "apps/v1",
        "DaemonSet",
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"env": [{"name": "NGC_API_TOKEN", "value": "nvapi-123"}]}]}
                }
            }
        },
        "spec.template.spec.containers[0].env[0]: environment variable 'NGC_API_TOKEN'",
    ),
]

ALLOWED: list[tuple[str, dict[str, Any]]] = [
    (
        "secret-volume",
        {"spec": {"template": {"spec": {"volumes": [{"name": "tls", "secret": {"secretName": "tls"}}]}}}},
    ),
    (
        "secret-key-ref",
        {"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
    ),
    ("automount-token", {"spec": {"automountServiceAccountToken": True, "serviceAccountName": "gfd"}}),
    (
        "token-projection",
        {"volumes": [{"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]},
    ),
    ("image-pull-secrets", {"spec": {"imagePullSecrets": [{"name": "ngc-secret"}]}}),
    ("empty-password", {"registry": {"password": ""}}),
    ("nvidia-env", {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}]}),
]


@pytest.mark.parametrize(
    ("api_version", "kind", "owned", "expected"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_records_holding_credentials_are_refused(
    make_record, api_version: str, kind: str, owned: dict[str, Any], expected: str
) -> None:
    assert any(finding.startswith(expected) for finding in find_credentials(api_version, kind, owned))
    with pytest.raises(ValidationError, match="never records") as caught:
        make_record("obj", kind=kind, api_version=api_version, owned=owned)
    assert expected.split(":")[0] in str(caught.value)


@pytest.mark.parametrize("owned", [case[1] for case in ALLOWED], ids=[case[0] for case in ALLOWED])
def test_references_to_credentials_are_not_credentials(make_record, owned: dict[str, Any]) -> None:
    assert find_credentials("apps/v1", "DaemonSet", owned) == []
    make_record(owned=owned)


def test_secret_data_is_recorded_as_key_names_and_sha256_digests(make_record) -> None:
    owned = {
        "type": "Opaque",
        "data": {"user": base64.b64encode(b"admin").decode()},
        "stringData": {"pass": "hunter2"},
        "metadata": {"labels": {"app": "x"}},
    }
    redacted = redact_owned("v1", "Secret", owned)
    assert redacted["data"] == {"user": "sha256:" + hashlib.sha256(b"admin").hexdigest()}
    assert redacted["stringData"] == {"pass": "sha256:" + hashlib.sha256(b"hunter2").hexdigest()}
    assert redacted["metadata"] == owned["metadata"] and redacted["type"] == "Opaque"
    assert owned["stringData"] == {"pass": "hunter2"}  # the input is not modified
    record = make_record("creds", component="dcgmExporter", kind="Secret", api_version="v1", owned=redacted)
    state_text = StateFile.new().with_record(record).model_dump_json()
    assert "hunter2" not in state_text and "YWRtaW4=" not in state_text
    assert redact_owned("v1", "Secret", redacted) == redacted  # idempotent: digests stay digests


def test_the_same_secret_value_gives_the_same_digest_from_data_or_stringdata() -> None:
    as_data = redact_owned("v1", "Secret", {"data": {"k": base64.b64encode(b"v").decode()}})
    as_string = redact_owned("v1", "Secret", {"stringData": {"k": "v"}})
    assert as_data["data"]["k"] == as_string["stringData"]["k"]


def test_other_kinds_are_recorded_unchanged() -> None:
    owned = {"data": {"config.yaml": "version: v1\n"}}
    assert redact_owned("v1", "ConfigMap", owned) == owned


def test_journal_entries_refuse_unredacted_secret_data() -> None:
    address = "dcgmExporter/Secret/gpu-operator/web-config"
    with pytest.raises(ValidationError, match="after holds credentials"):
        JournalEntry(address=address, action="create", after={"stringData": {"k": "v"}}, started_at="t")
    redacted = redact_owned("v1", "Secret", {"stringData": {"k": "v"}})
    assert JournalEntry(address=address, action="create", after=redacted, started_at="t").after == redacted
