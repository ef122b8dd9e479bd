"""The API server's checks of a Secret's data and a Lease's spec (``pkg/apis/core/validation/validation.go``
``ValidateSecret``, ``pkg/apis/coordination/validation/validation.go`` ``ValidateLeaseSpec``).

- A Secret's data keys are ConfigMap keys (``[-._a-zA-Z0-9]+``, at most 253 characters) and its values total
  at most ``MaxSecretSize`` (1 MiB) decoded bytes: ``data: Too long: may not be more than 1048576 bytes``
  (the limit Terraform's and Helm's state Secrets meet, fleet facts §7).
- A Lease's ``leaseDurationSeconds`` is above 0 and ``leaseTransitions`` not negative when set.

Called by :mod:`gpuplan.sim.api.validation` for every create and update of the two kinds.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

MAX_SECRET_SIZE = 1024 * 1024
_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def secret(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    total = 0
    for key, value in (obj.get("data") or {}).items():
        if not _KEY.fullmatch(key) or len(key) > 253:
            causes.append(
                _cause("FieldValueInvalid", f"data[{key}]", f'Invalid value: "{key}": {_KEY_MESSAGE}')
            )
        total += _decoded_size(value)
    if total > MAX_SECRET_SIZE:
        causes.append(
            _cause("FieldValueTooLong", "data", f"Too long: may not be more than {MAX_SECRET_SIZE} bytes")
        )
    return causes


def lease(obj: dict[str, Any]) -> list[dict[str, str]]:
    spec = obj.get("spec") or {}
    causes: list[dict[str, str]] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        causes.append(
            _cause(
                "FieldValueInvalid",
                "spec.leaseDurationSeconds",
                f"Invalid value: {duration}: must be greater than 0",
            )
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        causes.append(
            _cause(
                "FieldValueInvalid",
                "spec.leaseTransitions",
                f"Invalid value: {transitions}: must be greater than or equal to 0",
            )
        )
    return causes


def _decoded_size(value: Any) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return len(value)


def _cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "field": field, "message": message}
