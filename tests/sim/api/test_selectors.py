"""Label and field selectors: the grammar of labels.Parse, matching, and the apiserver's errors."""

from __future__ import annotations

import pytest

from gpuplan.sim.api import selectors

LABELS = {"app": "nvidia-device-plugin", "tier": "gpu", "nvidia.com/gpu.present": "true", "count": "4"}


def matches(text: str) -> bool:
    return selectors.parse_labels(text).matches({"metadata": {"labels": LABELS}})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("app=nvidia-device-plugin", True),
        ("app==nvidia-device-plugin", True),
        ("app!=nvidia-device-plugin", False),
        ("app!=other", True),
        ("missing!=x", True),
        ("tier in (gpu,cpu)", True),
        ("tier in (cpu)", False),
        ("tier notin (cpu)", True),
        ("tier notin (gpu, cpu)", False),
        ("missing notin (a)", True),
        ("nvidia.com/gpu.present", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("app=nvidia-device-plugin,tier=gpu", True),
        ("app=nvidia-device-plugin,tier=cpu", False),
        ("count>3", True),
        ("count<3", False),
        ("empty=", False),
        ("", True),
    ],
)
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert matches(text) is expected


def test_empty_value_matches_empty_label() -> None:
    assert selectors.parse_labels("a=").matches({"metadata": {"labels": {"a": ""}}})


@pytest.mark.parametrize(
    "text, message",
    [
        ("tier in gpu", "found 'gpu', expected: '('"),
        ("tier in (gpu", "found '', expected: ',' or ')'"),
        ("app=x y", "found 'y', expected: ',' or 'end of string'"),
        ("=x", "found '=', expected: !, identifier, or 'end of string'"),
        ("app x", "found 'x', expected: in, notin, =, ==, !=, gt, lt"),
    ],
)
def test_label_selector_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(selectors.SelectorError) as err:
        selectors.parse_labels(text)
    assert str(err.value) == message


def test_invalid_label_value_is_refused() -> None:
    with pytest.raises(selectors.SelectorError, match="a valid label must be an empty string"):
        selectors.parse_labels("app=-bad-")


def test_invalid_label_key_is_refused() -> None:
    with pytest.raises(selectors.SelectorError, match="name part must consist of alphanumeric"):
        selectors.parse_labels("bad_key_=x,-x")


def test_from_label_selector_dict() -> None:
    sel = selectors.from_label_selector(
        {
            "matchLabels": {"app": "gfd"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert sel.matches_labels({"app": "gfd", "zone": "a"})
    assert not sel.matches_labels({"app": "gfd", "zone": "c"})
    assert not sel.matches_labels({"app": "gfd", "zone": "a", "legacy": "1"})


def test_unknown_expression_operator_is_refused() -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.from_label_selector({"matchExpressions": [{"key": "a", "operator": "Near"}]})


POD = {
    "metadata": {"name": "p1", "namespace": "gpu-operator"},
    "spec": {"nodeName": "node-1", "hostNetwork": True},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("metadata.namespace=gpu-operator,spec.nodeName=node-1", True),
        ("spec.nodeName=node-2", False),
        ("status.phase=Running", True),
        ("status.phase!=Pending", True),
        ("spec.hostNetwork=true", True),
    ],
)
def test_field_selector_matches_pods(text: str, expected: bool) -> None:
    assert selectors.parse_fields(text, "Pod").matches(POD) is expected


def test_unsupported_field_is_refused_with_real_message() -> None:
    with pytest.raises(selectors.SelectorError) as err:
        selectors.parse_fields("spec.nodeName=n1", "DaemonSet")
    assert str(err.value) == "field label not supported: spec.nodeName"


def test_field_selector_without_operator_is_refused() -> None:
    with pytest.raises(selectors.SelectorError, match="can't understand 'metadata.name'"):
        selectors.parse_fields("metadata.name", "Pod")


def test_field_selector_escapes() -> None:
    sel = selectors.parse_fields(r"metadata.name=a\,b", "Pod")
    assert sel.requirements[0].value == "a,b"


def test_event_involved_object_fields() -> None:
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p1"}}
    assert selectors.parse_fields("involvedObject.kind=Pod,involvedObject.name=p1", "Event").matches(event)
