"""tests/lab_stack.py builds the lab's gpustack.yaml the tests share: its flow-style full stack says what the
demo's spec says, and its sections land where the callers expect them."""

from __future__ import annotations

import pytest
from lab_stack import LAB_BLOCK_HEADER, LAB_HEADER, LAB_SPEC, full_lab_spec, lab_spec

from gpuplan.commands import demo
from gpuplan.planner.spec.model import parse_spec


def test_the_full_stack_is_the_demos_and_the_flow_copy_says_the_same() -> None:
    assert LAB_SPEC is demo.SPEC
    printed = parse_spec(LAB_SPEC, filename="gpustack.yaml")
    assert parse_spec(full_lab_spec(), filename="gpustack.yaml").model_dump() == printed.model_dump()
    assert printed.spec.driver.owner == "external" and printed.spec.driver.version == "580.105.08"


def test_the_header_is_the_host_driver_and_toolkit_with_gpuplan_defaults_for_the_rest() -> None:
    loaded = parse_spec(LAB_HEADER, filename="gpustack.yaml")
    assert (loaded.metadata.name, loaded.spec.driver.owner, loaded.spec.toolkit.owner) == (
        "lab",
        "external",
        "external",
    )
    assert loaded.spec.device_plugin.owner == "gpuplan"


def test_sections_follow_in_order_and_a_host_section_is_replaced_in_place_or_dropped() -> None:
    text = lab_spec(devicePlugin="{owner: external}", driver="{owner: external}", gfd="{owner: none}")
    assert text.splitlines()[4:] == [
        "  driver: {owner: external}",
        "  toolkit: {owner: external}",
        "  devicePlugin: {owner: external}",
        "  gfd: {owner: none}",
    ]
    assert "toolkit" not in lab_spec(toolkit=None)
    assert full_lab_spec(validator="{owner: none}").endswith("  validator: {owner: none}\n")


def test_the_block_header_is_the_demos_host_part_and_takes_str_format() -> None:
    assert LAB_SPEC.startswith(LAB_BLOCK_HEADER) and "{" not in LAB_BLOCK_HEADER
    loaded = parse_spec(
        (LAB_BLOCK_HEADER + "  gfd:\n    owner: {owner}\n").format(owner="none"), filename="x.yaml"
    )
    assert (loaded.spec.driver.version, loaded.spec.toolkit.owner, loaded.spec.gfd.owner) == (
        "580.105.08",
        "external",
        "none",
    )


@pytest.mark.parametrize(
    "text",
    [LAB_HEADER + "  devicePlugin:\n    version: v0.19.0\n", lab_spec(devicePlugin="{version: v0.19.0}")],
)
def test_a_block_or_flow_section_appended_to_the_header_parses(text: str) -> None:
    assert parse_spec(text, filename="gpustack.yaml").spec.device_plugin.version == "v0.19.0"
