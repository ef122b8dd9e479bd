"""The spec's ``telemetry`` block: loaded with defaults, checked with positions, documented by the schema, and
the thresholds `drift report` (by hand or from `drift cronjob`) judges with, under the CLI's flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuplan.cli import run
from gpuplan.commands import drift as drift_cmd
from gpuplan.errors import ConfigError
from gpuplan.planner.spec import model as spec
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

HEAD = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\n"
TUNED = HEAD + "spec:\n  telemetry:\n    temperatureCelsius: 70\n    utilisationPercent: 95\n    xid: false\n"


def test_the_block_is_optional_with_defaults_that_make_sense() -> None:
    settings = spec.parse_spec(HEAD, filename="gpustack.yaml").spec.telemetry
    assert (
        settings.temperature_celsius,
        settings.utilisation_percent,
        settings.xid,
        settings.memory_used_percent,
    ) == (85, None, True, None)
    tuned = spec.parse_spec(TUNED, filename="gpustack.yaml").spec.telemetry
    assert (tuned.temperature_celsius, tuned.utilisation_percent, tuned.xid) == (70, 95, False)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("utilisationPercent: 150", "utilisationPercent"),
        ("temperatureCelsius: -5", "temperatureCelsius"),
        ("temprature: 80", "temprature"),
    ],
)
def test_a_bad_threshold_is_a_config_error_at_its_line(line: str, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        spec.parse_spec(HEAD + f"spec:\n  telemetry:\n    {line}\n", filename="gpustack.yaml")
    assert raised.value.where.startswith("gpustack.yaml:6:") and field in raised.value.render()


PROMETHEUS = "spec:\n  telemetry:\n    prometheus:\n      url: https://prometheus.monitoring:9090\n"


def test_the_prometheus_source_is_optional_strict_and_in_the_schema() -> None:
    assert spec.parse_spec(HEAD, filename="gpustack.yaml").spec.telemetry.prometheus is None
    text = HEAD + PROMETHEUS + "      bearerTokenFile: /var/run/secrets/token\n      caFile: ca.pem\n"
    source = spec.parse_spec(text, filename="gpustack.yaml").spec.telemetry.prometheus
    assert source is not None
    assert (source.url, source.bearer_token_file, source.ca_file) == (
        "https://prometheus.monitoring:9090",
        "/var/run/secrets/token",
        "ca.pem",
    )
    for bad, field in (("      tokenFile: t\n", "tokenFile"), ("", "url")):
        broken = text.replace("      bearerTokenFile: /var/run/secrets/token\n", bad)
        if field == "url":
            broken = broken.replace("https://prometheus.monitoring:9090", "prometheus:9090")
        with pytest.raises(ConfigError) as raised:
            spec.parse_spec(broken, filename="gpustack.yaml")
        assert raised.value.where.startswith("gpustack.yaml:") and field in raised.value.render()
    schema = spec.json_schema()
    properties = schema["$defs"]["PrometheusSettings"]["properties"]
    assert set(properties) == {"url", "bearerTokenFile", "caFile"}
    assert schema["$defs"]["PrometheusSettings"]["required"] == ["url"]
    assert all(prop.get("description") for prop in properties.values())
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(yaml.safe_load(text))) == []


def test_the_schema_documents_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    schema = spec.json_schema()
    assert "telemetry" in schema["$defs"]["StackSpec"]["properties"]
    properties = schema["$defs"]["TelemetrySettings"]["properties"]
    assert set(properties) == {
        "temperatureCelsius",
        "utilisationPercent",
        "xid",
        "memoryUsedPercent",
        "prometheus",
    }
    assert all(prop.get("description") for prop in properties.values())
    assert properties["temperatureCelsius"]["default"] == 85
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(yaml.safe_load(TUNED))) == []
    assert list(validator.iter_errors(yaml.safe_load(TUNED.replace("95", "101"))))


@pytest.fixture
def seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The thresholds each `drift report` run judged with (the cluster read is replaced)."""
    thresholds: list[Any] = []

    class Clean:
        drift = False

        def document(self) -> dict[str, Any]:
            return {}

        def exit_code(self) -> int:
            return 0

    def check(*args: Any, **kwargs: Any) -> Clean:
        thresholds.append(kwargs["thresholds"])
        return Clean()

    LocalFileBackend(tmp_path / "gpuplan.state.json").write(StateFile.new().next_serial())
    monkeypatch.setattr(drift_cmd, "check", check)
    monkeypatch.setattr(drift_cmd, "render", lambda document, output_format, color: "")
    return thresholds


def test_drift_report_takes_the_spec_s_thresholds_and_the_flags_override_them(
    tmp_path: Path, seen: list[Any]
) -> None:
    spec_file = tmp_path / "gpustack.yaml"
    spec_file.write_text(TUNED)
    assert run(["drift", "report", "-f", str(spec_file)]) == 0
    assert (
        run(
            [
                "drift",
                "report",
                "-f",
                str(spec_file),
                "--temperature-threshold",
                "90",
                "--xid",
                "--memory-used-threshold",
                "80",
            ]
        )
        == 0
    )
    assert [(t.temperature_c, t.utilisation_percent, t.report_xid, t.memory_used_percent) for t in seen] == [
        (70, 95, False, None),
        (90, 95, True, 80),
    ]


def test_the_cronjob_carries_the_spec_so_the_in_cluster_report_uses_its_thresholds(
    tmp_path: Path, seen: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "gpustack.yaml"
    spec_file.write_text(TUNED)
    assert run(["drift", "cronjob", "-f", str(spec_file)]) == 0
    objects = {obj["kind"]: obj for obj in yaml.safe_load_all(capsys.readouterr().out) if obj}
    carried = tmp_path / "carried.yaml"
    carried.write_text(objects["ConfigMap"]["data"]["gpustack.yaml"])
    [container] = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert not [arg for arg in container["command"] if "threshold" in arg or "xid" in arg]
    assert run([*container["command"][1:3], "-f", str(carried)]) == 0, "the job's command on the carried spec"
    assert (seen[0].temperature_c, seen[0].utilisation_percent, seen[0].report_xid) == (70, 95, False)
