"""``gpuplan schema`` describes each field by the string under it, read when a schema is made (not when the
spec models load): the string right after the field, from the class that declares it; ``Field(description=)``
wins."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpuplan.modules.values import Model
from gpuplan.planner.spec import model as spec_model
from gpuplan.planner.spec.docstrings import DocumentedSchema, attribute_docstrings


class Base(Model):
    kept_name: str = "a"
    """Said  by the base
    class."""

    undocumented: int = 0


class Derived(Base):
    own_field: bool = True
    """Said by the derived class."""

    given: str = Field(default="x", description="given with Field")
    """Not this one."""


def properties(model: type[BaseModel]) -> dict[str, dict[str, object]]:
    schema = model.model_json_schema(by_alias=True, schema_generator=DocumentedSchema)
    found: dict[str, dict[str, object]] = schema["properties"]
    return found


def test_each_field_is_described_by_the_string_under_it_in_the_class_that_declares_it() -> None:
    shown = properties(Derived)
    assert shown["keptName"]["description"] == "Said  by the base\nclass."
    assert shown["ownField"]["description"] == "Said by the derived class."
    assert "description" not in shown["undocumented"]


def test_a_description_given_with_field_wins() -> None:
    assert properties(Derived)["given"]["description"] == "given with Field"


def test_only_the_declaring_class_s_own_fields_are_read() -> None:
    assert attribute_docstrings(Derived) == {
        "own_field": "Said by the derived class.",
        "given": "Not this one.",
    }


def test_the_spec_models_load_without_their_descriptions_and_the_schema_has_them() -> None:
    assert spec_model.Spec.model_fields["spec"].description is None
    schema = spec_model.json_schema()
    described = [
        prop
        for definition in schema["$defs"].values()
        for prop in (definition.get("properties") or {}).values()
        if "description" in prop
    ]
    assert len(described) > 100
