"""The descriptions of ``gpuplan schema``, taken from the string under each field of a spec model.

The models document their fields the way the code reads best, with a string literal under each annotated
field (PEP 257's attribute docstrings). pydantic can collect those as the fields' descriptions when a model
class is created (``use_attribute_docstrings``), but it reads and tokenises each class's source to do so:
30 ms of every command that loads the spec, for text only the JSON Schema shows. :class:`DocumentedSchema`
reads them when a schema is generated instead, by the same rule: the string literal right after a field's
annotated assignment, in the class that declares it, cleaned with :func:`inspect.cleandoc`; a description
given with ``Field(description=...)`` wins.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


@cache
def attribute_docstrings(cls: type) -> dict[str, str]:
    """Field name -> its docstring, for the fields ``cls`` itself declares ({} when its source is not
    available, as in a frozen application)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    definition = ast.parse(source).body[0]
    if not isinstance(definition, ast.ClassDef):
        return {}
    found: dict[str, str] = {}
    for statement, following in zip(definition.body, definition.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def field_docstring(model: type[BaseModel], name: str) -> str | None:
    """The docstring of field ``name`` from the nearest class of ``model``'s MRO that declares it."""
    for cls in model.__mro__:
        if name in getattr(cls, "__annotations__", {}):
            return attribute_docstrings(cls).get(name)
    return None


class DocumentedSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, each model field described by its docstring (see the module doc)."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        generated = super().model_schema(schema)
        model = schema["cls"]
        properties: dict[str, Any] = generated.get("properties") or {}
        for name, info in model.model_fields.items():
            shown = properties.get(info.alias or name) if self.by_alias else properties.get(name)
            if shown is None or info.description is not None:
                continue
            described = field_docstring(model, name)
            if described:
                shown["description"] = described
        return generated
