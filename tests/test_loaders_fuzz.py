"""Property: whatever bytes a spec, state or saved plan holds, its loader returns a value or raises gpuplan's
own error for that file (one ``Error:`` line), never another exception, never a hang.

Each loader gets thousands of inputs: valid documents mutated byte by byte (cut, insert, replace), valid
documents with a value swapped for an arbitrary JSON value at a random path, and arbitrary JSON/YAML.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lab_stack import LAB_SPEC

from gpuplan.errors import ConfigError, StateError
from gpuplan.planner.plan import planfile
from gpuplan.planner.spec.model import parse_spec
from gpuplan.state.document import parse_state
from gpuplan.state.model import StateFile, to_json

EXAMPLES = settings(
    max_examples=1000,
    deadline=None,  # hangs are pytest-timeout's to catch; a slow machine is not a failure
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same inputs on every run, so a failure reproduces
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
STATE = to_json(StateFile.new())
PLAN = json.dumps(
    {
        "format_version": "1",
        "gpuplan_version": "0.1.0",
        "created_at": "2026-12-01T00:00:00Z",
        "stack": "lab",
        "namespace": "gpu-operator",
        "namespace_exists": True,
        "spec_file": "gpustack.yaml",
        "spec_digest": "sha256:0",
        "state_lineage": None,
        "state_serial": 0,
        "resource_versions": {},
        "server_version": "v1.37.0",
        "api_requests": 1,
        "nodes_total": 1,
        "gpu_nodes": 1,
        "changes": [],
    }
)


def byte_mutations(text: str) -> st.SearchStrategy[str]:
    """``text`` with a slice cut out, replaced or with something inserted."""
    return st.tuples(
        st.integers(0, len(text)), st.integers(0, 40), st.text(max_size=12) | st.sampled_from(TOKENS)
    ).map(lambda edit: text[: edit[0]] + edit[2] + text[edit[0] + edit[1] :])


TOKENS = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    '"',
    "\n",
    "  ",
    "&a",
    "*a",
    "!!python/object",
    "- ",
    "\t",
    "\x00",
    "null",
]


def swapped(document: Any) -> st.SearchStrategy[Any]:
    """``document`` with the value at a random path replaced by an arbitrary JSON value."""
    paths = list(_paths(document))
    return st.tuples(st.sampled_from(paths), JSON).map(lambda pair: _replace(document, *pair))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Any:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = dict(value) if isinstance(value, dict) else list(value)
    copied[path[0]] = _replace(value[path[0]], path[1:], new)
    return copied


def spec_inputs() -> st.SearchStrategy[str]:
    import yaml

    document = yaml.safe_load(LAB_SPEC)
    return (
        byte_mutations(LAB_SPEC)
        | swapped(document).map(lambda doc: yaml.safe_dump(doc, sort_keys=False))
        | JSON.map(yaml.safe_dump)
    )


def json_inputs(text: str) -> st.SearchStrategy[str]:
    return byte_mutations(text) | swapped(json.loads(text)).map(json.dumps) | JSON.map(json.dumps)


@EXAMPLES
@given(spec_inputs())
@example("\x1f" + LAB_SPEC)  # a control character: PyYAML's reader refused it before the loader's try
def test_any_spec_loads_or_is_a_config_error(text: str) -> None:
    try:
        parse_spec(text, filename="gpustack.yaml")
    except ConfigError as exc:
        assert exc.summary and "internal error" not in exc.summary


@EXAMPLES
@given(json_inputs(STATE))
def test_any_state_loads_or_is_a_state_error(text: str) -> None:
    try:
        parse_state(text, source="gpuplan.state.json")
    except StateError as exc:
        assert exc.summary and exc.where.startswith("gpuplan.state.json")


@EXAMPLES
@given(json_inputs(PLAN))
def test_any_saved_plan_loads_or_is_a_config_error(text: str) -> None:
    try:
        planfile.loads(text, source="p.plan")
    except ConfigError as exc:
        assert exc.summary and exc.where == "p.plan"
