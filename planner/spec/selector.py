"""The spec's label selectors: comma-separated ``key=value`` (or ``==``), ``key!=value``, ``key`` and ``!key``
terms, the equality-based subset of Kubernetes' selector syntax (k8s.io/apimachinery pkg/labels/selector.go).

One parser for every spec field that takes one: a driver upgrade's ``drain.podSelector`` (matched by
:mod:`gpuplan.planner.driver.rollout`) and ``spec.ignore``'s ``nodes.selector``
(:mod:`gpuplan.planner.spec.ignore`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


def terms(text: str) -> list[str]:
    return [term.strip() for term in text.split(",") if term.strip()]


def matcher(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Whether a label set matches every term of ``text`` (an empty selector matches all)."""
    parts = terms(text)

    def holds(labels: Mapping[str, str]) -> bool:
        return all(_term_holds(term, labels) for term in parts)

    return holds


def problem(text: str) -> str | None:
    """Why ``text`` is no selector of the supported terms, or None."""
    if not text.strip():
        return "it is empty"
    for term in (term.strip() for term in text.split(",")):
        key, value = term.removeprefix("!"), ""
        for operator in ("!=", "==", "="):
            if operator in term:
                key, value = term.split(operator, 1)
                break
        if not _LABEL_KEY.match(key.strip()):
            return f"{key.strip()!r} is not a label key"
        if not _LABEL_VALUE.match(value.strip()):
            return f"{value.strip()!r} is not a label value"
    return None


def _term_holds(term: str, labels: Mapping[str, str]) -> bool:
    if "!=" in term:
        key, value = term.split("!=", 1)
        return labels.get(key.strip()) != value.strip()
    if "=" in term:
        key, value = term.replace("==", "=").split("=", 1)
        return labels.get(key.strip()) == value.strip()
    if term.startswith("!"):
        return term[1:] not in labels
    return term in labels
