"""Label and field selectors with the grammar and error messages of Kubernetes' ``labels.Parse``.

``parse_labels("app=x,tier in (a,b),!legacy")`` and ``parse_fields("spec.nodeName=n1")`` return selectors
whose ``matches(obj)`` the store uses for list and watch; ``from_label_selector`` turns a metav1
LabelSelector dict (``matchLabels``/``matchExpressions``, as DaemonSets carry) into the same type for the
controllers. Parse errors raise ``SelectorError`` (the store answers 400 BadRequest with its message).

Callers: ``sim.api.store`` (list/watch), ``sim.controllers`` (DaemonSet selectors, node selectors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_OPERATORS = ("==", "!=", "=", "(", ")", ",", "!", ">", "<")
_SPECIAL = set(" \t\n=!(),<>")


class SelectorError(ValueError):
    """A selector string that a real API server would refuse with 400 BadRequest."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        return present and _compare_int(value, self.values[0], self.operator)


def _compare_int(value: str | None, bound: str, operator: str) -> bool:
    try:
        number = int(value or "")
    except ValueError:
        return False
    return number > int(bound) if operator == "gt" else number < int(bound)


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)

    def matches_labels(self, labels: dict[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> str:
        """The next token, "" at the end."""
        text = self.text
        while self.pos < len(text) and text[self.pos] in " \t\n":
            self.pos += 1
        if self.pos >= len(text):
            return ""
        for op in _OPERATORS:
            if text.startswith(op, self.pos):
                self.pos += len(op)
                return op
        start = self.pos
        while self.pos < len(text) and text[self.pos] not in _SPECIAL:
            self.pos += 1
        return text[start : self.pos]

    def peek(self) -> str:
        saved = self.pos
        token = self.next()
        self.pos = saved
        return token


def _is_identifier(token: str) -> bool:
    return token != "" and token not in _OPERATORS


def parse_labels(text: str | None) -> LabelSelector:
    """Parse a labelSelector query parameter; raise SelectorError with the apiserver's wording."""
    if text is None or not text.strip():
        return LabelSelector()
    lexer = _Lexer(text)
    requirements = []
    while True:
        requirements.append(_parse_requirement(lexer))
        token = lexer.next()
        if token == "":
            break
        if token != ",":
            raise SelectorError(f"found '{token}', expected: ',' or 'end of string'")
    return LabelSelector(tuple(requirements))


def _parse_requirement(lexer: _Lexer) -> Requirement:
    token = lexer.next()
    if token == "!":
        key = lexer.next()
        if not _is_identifier(key):
            raise SelectorError(f"found '{key}', expected: identifier after '!'")
        _validate_key(key)
        return Requirement(key, "!")
    if not _is_identifier(token):
        raise SelectorError(f"found '{token}', expected: !, identifier, or 'end of string'")
    key = token
    _validate_key(key)
    following = lexer.peek()
    if following in ("", ","):
        return Requirement(key, "exists")
    operator = lexer.next()
    if operator in ("=", "==", "!="):
        value = lexer.peek()
        value = "" if value in ("", ",") else lexer.next()
        if not _is_identifier(value) and value != "":
            raise SelectorError(f"found '{value}', expected: identifier")
        _validate_value(value)
        return Requirement(key, "!=" if operator == "!=" else "=", (value,))
    if operator in ("in", "notin"):
        return Requirement(key, operator, _parse_value_set(lexer))
    if operator in (">", "<"):
        bound = lexer.next()
        if not re.fullmatch(r"-?\d+", bound):
            raise SelectorError(
                f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                f"an integer: found '{bound}'"
            )
        return Requirement(key, "gt" if operator == ">" else "lt", (bound,))
    raise SelectorError(f"found '{operator}', expected: in, notin, =, ==, !=, gt, lt")


def _parse_value_set(lexer: _Lexer) -> tuple[str, ...]:
    opening = lexer.next()
    if opening != "(":
        raise SelectorError(f"found '{opening}', expected: '('")
    values: list[str] = []
    while True:
        token = lexer.next()
        if token == ")" and not values:
            break
        if token in (",", ")"):
            values.append("")
        elif _is_identifier(token):
            _validate_value(token)
            values.append(token)
            token = lexer.next()
        else:
            raise SelectorError(f"found '{token}', expected: ',', ')' or identifier")
        if token == ")":
            break
        if token != ",":
            raise SelectorError(f"found '{token}', expected: ',' or ')'")
    return tuple(values)


def _validate_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    problems = []
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        problems.append(
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    if problems:
        raise SelectorError(
            f'unable to parse requirement: <nil>: Invalid value: "{key}": ' + ", ".join(problems)
        )


def _validate_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise SelectorError(
            f'unable to parse requirement: values[0][{value}]: Invalid value: "{value}": a valid label must '
            "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
            "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )


_EXPRESSION_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def from_label_selector(selector: dict[str, Any] | None) -> LabelSelector:
    """A metav1 LabelSelector (``matchLabels`` + ``matchExpressions``) as a LabelSelector."""
    selector = selector or {}
    requirements = [
        Requirement(k, "=", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expr in selector.get("matchExpressions") or []:
        operator = _EXPRESSION_OPERATORS.get(expr.get("operator", ""))
        if operator is None:
            raise SelectorError(f'"{expr.get("operator")}" is not a valid label selector operator')
        requirements.append(Requirement(expr["key"], operator, tuple(expr.get("values") or ())))
    return LabelSelector(tuple(requirements))


# Field labels each kind supports, as the real registry strategies declare them (GetAttrs/field label
# conversion); metadata.name and metadata.namespace work for every kind.
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
SUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",),
    "Secret": ("type",),
    "Event": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: dict[str, Any]) -> bool:
        return all((field_value(obj, r.field) == r.value) == r.equal for r in self.requirements)

    def exact(self, field: str) -> str | None:
        """The value an ``=`` requirement pins ``field`` to, so the store can use an index."""
        for r in self.requirements:
            if r.field == field and r.equal:
                return r.value
        return None

    @property
    def empty(self) -> bool:
        return not self.requirements


def field_value(obj: dict[str, Any], field: str) -> str:
    """The string a field selector compares (booleans as "true"/"false", missing as "")."""
    if field == "source":
        field = "source.component"
    value: Any = obj
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def parse_fields(text: str | None, kind: str | None = None) -> FieldSelector:
    """Parse a fieldSelector; with ``kind``, refuse fields that kind's real registry does not support."""
    if text is None or not text.strip():
        return FieldSelector()
    requirements = []
    for term in _split_unescaped(text, ","):
        for op, equal in (("!=", False), ("==", True), ("=", True)):  # noqa: B007 (read after the loop)
            parts = _split_unescaped(term, op, limit=1)
            if len(parts) == 2:
                field, value = parts[0].strip(), _unescape(parts[1].strip())
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        if kind is not None and field not in _COMMON_FIELDS + SUPPORTED_FIELDS.get(kind, ()):
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, equal, value))
    return FieldSelector(tuple(requirements))


def _split_unescaped(text: str, sep: str, limit: int = -1) -> list[str]:
    parts, current, i = [], "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current += text[i : i + 2]
            i += 2
        elif text.startswith(sep, i) and limit != 0:
            parts.append(current)
            current = ""
            i += len(sep)
            limit -= 1
        else:
            current += text[i]
            i += 1
    parts.append(current)
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)
