"""What the API server refuses in a policy/v1 PodDisruptionBudget (``pkg/apis/policy/validation/
validation.go``: ``ValidatePodDisruptionBudgetSpec`` and ``ValidatePodDisruptionBudgetStatusUpdate``).

- ``minAvailable`` and ``maxUnavailable`` are not both set; each is a non-negative integer or a percentage
  (``[0-9]+%``) of at most 100% (``ValidatePositiveIntOrPercent``, ``IsNotMoreThan100Percent`` of
  ``pkg/apis/apps/validation``);
- the selector is a valid metav1 LabelSelector (``ValidateLabelSelector``: label keys and values, operators,
  values required for In/NotIn and forbidden for Exists/DoesNotExist);
- ``unhealthyPodEvictionPolicy`` is IfHealthyBudget or AlwaysAllow;
- the status counts (disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods) are not negative.

policy/v1 has no defaults (``pkg/apis/policy/v1/zz_generated.defaults.go`` registers none): a budget is stored
as sent. Called by :mod:`gpuplan.sim.api.validation` for every write of the kind.
"""

from __future__ import annotations

import json
import re
from typing import Any

Cause = dict[str, str]

POLICIES = ("AlwaysAllow", "IfHealthyBudget")  # sets.List order, as NotSupported prints them
_PERCENT = re.compile(r"[0-9]+%")
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
    "regex used for validation is '[0-9]+%')"
)
NEGATIVE_MESSAGE = "must be greater than or equal to 0"
STATUS_COUNTS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")


def _cause(reason: str, field: str, message: str) -> Cause:
    return {"reason": reason, "field": field, "message": message}


def _invalid(field: str, value: Any, detail: str) -> Cause:
    return _cause("FieldValueInvalid", field, f"Invalid value: {_go_value(value)}: {detail}")


def _go_value(value: Any) -> str:
    """field.Error's rendering: ints bare, strings quoted, the rest as JSON."""
    if isinstance(value, bool | int):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def validate(obj: dict[str, Any]) -> list[Cause]:
    return _spec(obj.get("spec") or {}) + _status(obj.get("status") or {})


def _spec(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        # the internal PodDisruptionBudgetSpec has no json tags: its Go field names, in declaration order
        internal = {
            "MinAvailable": spec.get("minAvailable"),
            "Selector": _selector_json(spec.get("selector")),
            "MaxUnavailable": spec.get("maxUnavailable"),
            "UnhealthyPodEvictionPolicy": spec.get("unhealthyPodEvictionPolicy"),
        }
        causes.append(_invalid("spec", internal, "minAvailable and maxUnavailable cannot be both set"))
    for name in ("minAvailable", "maxUnavailable"):
        if spec.get(name) is not None:
            causes += _int_or_percent(spec[name], f"spec.{name}")
    causes += _selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in POLICIES:
        supported = ", ".join(json.dumps(p) for p in POLICIES)
        causes.append(
            _cause(
                "FieldValueNotSupported",
                "spec.unhealthyPodEvictionPolicy",
                f"Unsupported value: {json.dumps(policy)}: supported values: {supported}",
            )
        )
    return causes


def _int_or_percent(value: Any, field: str) -> list[Cause]:
    if isinstance(value, str):
        if not _PERCENT.fullmatch(value):
            return [_invalid(field, value, PERCENT_MESSAGE)]
        if int(value[:-1]) > 100:
            return [_invalid(field, value, "must not be greater than 100%")]
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [_invalid(field, value, NEGATIVE_MESSAGE)] if value < 0 else []
    return [_invalid(field, value, "must be an integer or percentage (e.g '5%%')")]


def _selector_json(selector: Any) -> Any:
    """A metav1.LabelSelector as Go marshals it: matchLabels (keys sorted), then matchExpressions."""
    if not isinstance(selector, dict):
        return selector
    out: dict[str, Any] = {}
    if selector.get("matchLabels"):
        out["matchLabels"] = dict(sorted(selector["matchLabels"].items()))
    if selector.get("matchExpressions"):
        out["matchExpressions"] = [
            {
                "key": e.get("key", ""),
                "operator": e.get("operator", ""),
                **({"values": e["values"]} if e.get("values") else {}),
            }
            for e in selector["matchExpressions"]
        ]
    return out


def _selector(selector: Any, field: str) -> list[Cause]:
    """ValidateLabelSelector (apimachinery pkg/apis/meta/v1/validation): a null selector is valid."""
    from gpuplan.sim.api import validation  # it imports this module

    if not isinstance(selector, dict):
        return []
    causes = validation.validate_labels({"labels": selector.get("matchLabels") or {}}, field)
    causes = [{**c, "field": f"{field}.matchLabels"} for c in causes]
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{field}.matchExpressions[{i}]"
        operator, values = expr.get("operator"), expr.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(
                    _cause(
                        "FieldValueRequired",
                        f"{where}.values",
                        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(
                    _cause(
                        "FieldValueForbidden",
                        f"{where}.values",
                        "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            causes.append(_invalid(f"{where}.operator", operator or "", "not a valid selector operator"))
        problem = validation.qualified_name_problem(str(expr.get("key") or ""))
        if problem:
            causes.append(_invalid(f"{where}.key", expr.get("key") or "", problem))
        for j, value in enumerate(values):
            if not validation.is_label_value(value):
                causes.append(_invalid(f"{where}.values[{j}]", value, validation.LABEL_VALUE_MESSAGE))
    return causes


def _status(status: dict[str, Any]) -> list[Cause]:
    return [
        _invalid(f"status.{name}", status[name], NEGATIVE_MESSAGE)
        for name in STATUS_COUNTS
        if isinstance(status.get(name), int) and status[name] < 0
    ]
