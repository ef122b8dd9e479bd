"""Label and field selectors as the API server reads them, for the in-memory fake's lists and watches.

Label selectors: comma-separated requirements, each equality-based (``k=v``, ``k==v``, ``k!=v``) or
set-based (``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``), all of which must hold (apimachinery's
``labels.Parse``). Field selectors: ``field=value`` / ``field!=value`` over the few fields the server
indexes for the kinds gpuplan reads (``metadata.name``, ``metadata.namespace``, a pod's ``spec.nodeName``
and ``status.phase``); any other field is refused, as the server refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from gpuplan.errors import ProviderError

Matcher = Callable[[Mapping[str, Any]], bool]
"""Whether a manifest matches."""

FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")

_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


def label_matcher(selector: str | None) -> Matcher:
    """The manifest's ``metadata.labels`` satisfy every requirement of ``selector`` (None or "": all)."""
    tests = [_requirement(term.strip()) for term in _terms(selector or "") if term.strip()]

    def matches(manifest: Mapping[str, Any]) -> bool:
        labels: Mapping[str, str] = (manifest.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


def field_matcher(selector: str | None) -> Matcher:
    """The manifest's fields satisfy every ``field=value`` / ``field!=value`` of ``selector``."""
    tests: list[Matcher] = []
    for term in (selector or "").split(","):
        if term.strip():
            tests.append(_field_requirement(term.strip()))
    return lambda manifest: all(test(manifest) for test in tests)


def _terms(selector: str) -> list[str]:
    """The requirements, split at the commas that are not inside a set's parentheses."""
    terms, depth, start = [], 0, 0
    for index, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(selector[start:index])
            start = index + 1
    terms.append(selector[start:])
    return terms


def _requirement(term: str) -> Callable[[Mapping[str, str]], bool]:
    if found := _SET.match(term):
        key, values = found["key"], {v.strip() for v in found["values"].split(",") if v.strip()}
        if found["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if found := _EQUALITY.match(term):
        key, value = found["key"], found["value"]
        if found["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if found := _EXISTS.match(term):
        key, absent = found["key"], bool(found["neg"])
        return lambda labels: (key in labels) != absent
    raise ProviderError(f"unable to parse label selector requirement {term!r}", hint="see `kubectl get -l`")


def _field_requirement(term: str) -> Matcher:
    negated = "!=" in term
    name, _, value = term.partition("!=" if negated else "=")
    name, value = name.strip(), value.strip().removeprefix("=")
    if name not in FIELDS:
        raise ProviderError(
            f'field label not supported: "{name}"', hint=f"the fields served are {', '.join(FIELDS)}"
        )

    def matches(manifest: Mapping[str, Any]) -> bool:
        found = _field(manifest, name)
        return (found != value) if negated else (found == value)

    return matches


def _field(manifest: Mapping[str, Any], path: str) -> str:
    """The field's value as the server compares it: a string, "" when absent."""
    value: Any = manifest
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)
