"""`gpuplan schema`: valid JSON, draft 2020-12, usable to check a spec."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from lab_stack import lab_spec

from gpuplan import cli

SPEC = lab_spec(toolkit=None, devicePlugin="{config: {timeSlicing: {replicas: 4}}}")


def test_schema_prints_a_draft_2020_12_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Spec" and schema["description"].startswith("gpustack.yaml")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(yaml.safe_load(SPEC))) == []
    wrong = yaml.safe_load(SPEC.replace("owner: external", "owner: somebody"))
    assert [e.message for e in validator.iter_errors(wrong)] == [
        "'somebody' is not one of ['gpuplan', 'external', 'none']"
    ]


def test_schema_describes_the_owner_and_its_values(capsys: pytest.CaptureFixture[str]) -> None:
    cli.run(["schema"])
    schema = json.loads(capsys.readouterr().out)
    owner = schema["$defs"]["DriverConfig"]["properties"]["owner"]
    assert owner["enum"] == ["gpuplan", "external", "none"] and owner["default"] == "gpuplan"
    assert "external" in owner["description"]
