"""The state file never holds credentials: the rule, the check and the redaction of Secret data.

Terraform keeps sensitive attributes in its state in clear text and documents that the state "may contain
sensitive data". gpuplan does not: its state sits next to the spec, often in a git checkout, so whatever is
recorded there must be safe to read. :class:`gpuplan.state.model.ResourceRecord` calls
:func:`find_credentials` on the owned fields of every record and refuses the record when it finds any; the
apply engine calls :func:`redact_owned` on what it applied before it records it.

The rule (design §3.2 "never containing credentials"):

- A ``Secret`` (``v1``) is recorded with its ``data`` and ``stringData`` reduced to the key names, each
  mapped to ``sha256:<hex digest>`` of the decoded value (base64-decoded for ``data``, UTF-8 for
  ``stringData``). The digests still let a plan tell that a Secret's content changed, without storing it.
- Anywhere in the owned fields, a string value is refused when its field is named like a credential
  (``password``, ``passwd``, ``token``, ``secret``, ``apiKey``, ``privateKey``, ``clientKeyData``, ...: the
  name, lower-cased without ``-`` and ``_``, ends with one of these). References are fine: ``secretName``,
  ``secretKeyRef``, ``tokenFile`` or ``automountServiceAccountToken: true`` end otherwise or are not strings.
- Any string value that is a kubeconfig (``kind: Config`` with ``users``), a bearer token
  (``Bearer <token>``), a JSON Web Token, a PEM private key or a JSON Secret manifest with data (kubectl's
  last-applied-configuration annotation of a Secret) is refused, whatever its field is called, and
  so is an embedded kubeconfig object (a mapping with ``kind: Config`` and ``users``) and a container
  environment variable (``{name, value}``) whose name is credential-like and whose value is literal.
- The only credential-shaped value allowed is a redacted digest, ``sha256:`` and 64 hex digits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

DIGEST_PREFIX = "sha256:"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_SENSITIVE_NAME_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "token",
    "secret",
    "apikey",
    "privatekey",
    "clientkeydata",
    "credentials",
)
_BEARER = re.compile(r"^\s*bearer\s+\S{8,}", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_PEM_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_EMBEDDED_SECRET = re.compile(r'"kind"\s*:\s*"Secret"')
_EMBEDDED_DATA = re.compile(r'"(?:data|stringData)"\s*:\s*\{\s*"')
_KUBECONFIG_KIND = re.compile(r"^kind:\s*[\"']?Config[\"']?\s*$", re.MULTILINE)
_KUBECONFIG_USERS = re.compile(r"^users:", re.MULTILINE)


def digest(value: bytes) -> str:
    """The redacted form of one secret value: ``sha256:<hex>``."""
    return DIGEST_PREFIX + hashlib.sha256(value).hexdigest()


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.match(value) is not None


def is_secret(api_version: str, kind: str) -> bool:
    return kind == "Secret" and api_version == "v1"


def redact_secret_data(owned: Mapping[str, Any]) -> dict[str, Any]:
    """A Secret's owned fields with ``data``/``stringData`` values replaced by digests (keys kept)."""
    redacted = dict(owned)
    for field, decode in (("data", _decode_base64), ("stringData", _encode_utf8)):
        values = owned.get(field)
        if isinstance(values, Mapping):
            redacted[field] = {
                key: value if is_digest(value) else digest(decode(value))
                for key, value in sorted(values.items())
            }
    return redacted


def redact_owned(api_version: str, kind: str, owned: Mapping[str, Any]) -> dict[str, Any]:
    """What may be recorded of an object's owned fields: Secrets redacted, everything else unchanged."""
    return redact_secret_data(owned) if is_secret(api_version, kind) else dict(owned)


def find_credentials(api_version: str, kind: str, owned: Mapping[str, Any]) -> list[str]:
    """The field paths of ``owned`` that hold credentials, each with why (empty: safe to record)."""
    found: list[str] = []
    if is_secret(api_version, kind):
        for field in ("data", "stringData"):
            values = owned.get(field)
            if isinstance(values, Mapping):
                found += [
                    f"{field}.{key}: Secret data (record key names and digests, see redact_owned)"
                    for key, value in sorted(values.items())
                    if not is_digest(value)
                ]
    for path, name, value in _walk(owned, ""):
        if path.startswith(("data.", "stringData.")) and is_secret(api_version, kind):
            continue  # judged above, by the Secret rule
        reason = _why_credential(name, value)
        if reason:
            found.append(f"{path}: {reason}")
    return found


def _walk(node: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """Every (path, field name, value) below ``node``, leaves and mappings alike."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            yield child, str(key), value
            yield from _walk(value, child)
    elif isinstance(node, list):
        name = path.rsplit(".", 1)[-1]
        for index, item in enumerate(node):
            yield f"{path}[{index}]", name, item
            yield from _walk(item, f"{path}[{index}]")


def _why_credential(name: str, value: Any) -> str:
    if isinstance(value, Mapping):
        if _is_kubeconfig_object(value):
            return "an embedded kubeconfig"
        if _is_sensitive_name(str(value.get("name", ""))) and _is_literal(value.get("value")):
            return f"environment variable {value['name']!r} holds a credential-like value"
        return ""
    if not _is_literal(value):
        return ""
    if _is_sensitive_name(name):
        return f"field {name!r} holds a credential-like value"
    if _BEARER.search(value):
        return "a bearer token"
    if _JWT.search(value):
        return "a JSON Web Token"
    if _PEM_PRIVATE_KEY.search(value):
        return "a PEM private key"
    if _KUBECONFIG_KIND.search(value) and _KUBECONFIG_USERS.search(value):
        return "a kubeconfig"
    if _EMBEDDED_SECRET.search(value) and _EMBEDDED_DATA.search(value):
        return "an embedded Secret manifest with its data (e.g. a last-applied-configuration annotation)"
    return ""


def _is_sensitive_name(name: str) -> bool:
    return name.lower().replace("-", "").replace("_", "").endswith(_SENSITIVE_NAME_ENDINGS)


def _is_literal(value: Any) -> bool:
    """A non-empty string that is not already a redacted digest."""
    return isinstance(value, str) and bool(value) and not is_digest(value)


def _is_kubeconfig_object(value: Mapping[str, Any]) -> bool:
    return value.get("kind") == "Config" and "users" in value


def _decode_base64(value: Any) -> bytes:
    text = str(value)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        # Not valid base64 (the API server would refuse it): digest the text itself, never keep it.
        return text.encode("utf-8")


def _encode_utf8(value: Any) -> bytes:
    return str(value).encode("utf-8")
