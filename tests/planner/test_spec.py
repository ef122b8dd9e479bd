"""gpustack.yaml: valid specs load with their defaults; every bad spec gives one precise error and exit 1."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpuplan import cli, errors
from gpuplan.planner.spec import model as spec

HERE = Path(__file__).parent
BAD_SPECS = sorted((HERE / "bad_specs").glob("*.yaml"))

DESIGN_EXAMPLE = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  namespace: gpu-operator          # where gpuplan's objects live (default gpu-operator)
  driver:
    owner: external                # gpuplan | external | none  (default gpuplan)
    version: "580.105.08"          # external: the version every GPU node must report
  toolkit:
    owner: external
  devicePlugin:
    version: v0.20.1
  gfd:
    version: v0.20.1
  dcgmExporter:
    version: 4.6.0-4.8.3-distroless
  validator: {}
"""
"""Design §3.1's example to the letter, its comments included: the demo's stack (tests/lab_stack.py) says the
same, but the error positions below are read off this text's layout, so it is kept as the design prints it."""

FULL_SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: fleet}
spec:
  namespace: gpu-stack
  nodeSelector: {node-role.example.com/gpu: "true"}
  daemonsets:
    tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoExecute, tolerationSeconds: 30}]
    priorityClassName: gpu-critical
    labels: {team: ml}
    annotations: {owner: platform}
    updateStrategy: RollingUpdate
    maxUnavailable: 25%
  mig: {strategy: mixed}
  cdi: {enabled: false}
  driver:
    version: "580.105.08"
    kernelModuleType: open
    osTag: ubuntu22.04
    upgradePolicy:
      maxParallelUpgrades: 2
      maxUnavailable: 1
      podDeletion: {force: true, timeoutSeconds: 120, deleteEmptyDir: true}
      drain: {enable: true, podSelector: "app=train", timeoutSeconds: 600}
    manager: {version: v0.12.0}
  toolkit: {version: v1.20.1, installDir: /opt/nvidia, runtime: crio}
  devicePlugin:
    version: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    imagePullPolicy: Always
    imagePullSecrets: [ngc]
    env: [{name: FAIL_ON_INIT_ERROR, value: "false"}]
    resources: {limits: {cpu: 1, memory: 512Mi}}
    args: ["--fail-on-init-error=false"]
    healthTimeoutSeconds: 120
    config: {name: sharing-configs, default: any}
  gfd: {version: v0.20.1, sleepInterval: 30s}
  dcgmExporter: {metricsConfigMap: custom-metrics, enablePodLabels: true}
  validator: {owner: none}
"""


def test_design_example_loads_with_owners_and_versions() -> None:
    loaded = spec.parse_spec(DESIGN_EXAMPLE, filename="gpustack.yaml")
    components = loaded.components()
    assert list(components) == [
        "driver",
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
        "migManager",
    ]
    assert {name: c.owner for name, c in components.items()} == {
        "driver": "external",
        "toolkit": "external",
        "devicePlugin": "gpuplan",
        "gfd": "gpuplan",
        "dcgmExporter": "gpuplan",
        "validator": "gpuplan",
        "migManager": "none",
    }
    assert components["driver"].explicit_version() == "580.105.08"
    assert components["toolkit"].explicit_version() is None


def test_defaults_follow_gpu_operator_v26_7() -> None:
    loaded = spec.parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\n", filename="gpustack.yaml"
    )
    images = {name: c.image_ref() for name, c in loaded.components().items()}
    assert images == {
        "driver": "nvcr.io/nvidia/driver:595.91.07",
        "toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.1",
        "devicePlugin": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
        "gfd": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
        "dcgmExporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
        "validator": "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "migManager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0",
    }
    assert loaded.spec.mig_manager.owner == "none"  # off unless a MIG config is asked for
    assert loaded.spec.mig.config == "all-disabled"
    s = loaded.spec
    assert s.namespace == "gpu-operator"
    assert s.node_selector == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert s.daemonsets.priority_class_name == "system-node-critical"
    assert s.daemonsets.max_unavailable == "1"
    assert [t.model_dump(exclude_none=True) for t in s.daemonsets.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert (s.mig.strategy, s.cdi.enabled, s.driver.kernel_module_type) == ("single", True, "auto")
    assert s.driver.manager.image_ref() == "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
    assert all(c.owner == "gpuplan" for n, c in loaded.components().items() if n != "migManager")


def test_every_documented_key_is_accepted_and_reaches_the_context() -> None:
    loaded = spec.parse_spec(FULL_SPEC, filename="full.yaml")
    context = loaded.context()
    assert context.namespace == "gpu-stack" and context.stack_name == "fleet"
    assert context.container_runtime == "crio"  # toolkit.runtime wins over what the nodes say
    assert context.owners["validator"] == "none"
    assert (context.mig_strategy, context.cdi_enabled) == ("mixed", False)
    assert context.daemonsets.max_unavailable == "25%"
    assert (
        loaded.spec.driver.upgrade_policy.max_unavailable == "1"
    )  # YAML int kept as the string Kubernetes takes
    assert loaded.spec.device_plugin.resources is not None
    assert loaded.spec.device_plugin.resources.limits == {"cpu": "1", "memory": "512Mi"}
    assert loaded.spec.device_plugin.image_ref().startswith("nvcr.io/nvidia/k8s-device-plugin@sha256:")
    assert loaded.spec.driver.image_for(context) == "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"
    assert context.sharing is not None and context.sharing.default_key() == "any"


def test_context_takes_os_tag_and_runtime_from_the_nodes() -> None:
    loaded = spec.parse_spec(DESIGN_EXAMPLE, filename="gpustack.yaml")
    context = loaded.context(os_tag="rhel9", container_runtime="docker")
    assert (context.os_tag, context.container_runtime) == ("rhel9", "docker")
    assert loaded.context().os_tag == "ubuntu24.04"


def test_load_spec_reads_a_file_and_names_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_text(DESIGN_EXAMPLE)
    assert spec.load_spec(path).metadata.name == "lab"
    with pytest.raises(errors.ConfigError) as caught:
        spec.load_spec(tmp_path / "missing.yaml")
    assert "cannot read the spec" in caught.value.summary
    assert caught.value.where.endswith("missing.yaml")


def _expectation(path: Path) -> tuple[str, str, list[str]]:
    lines = path.read_text().splitlines()
    match = re.match(r"# expect (\d+:\d+) (.*)", lines[0])
    assert match, f"{path.name} must start with '# expect LINE:COL message'"
    hints = [line.removeprefix("# hint ") for line in lines[1:] if line.startswith("# hint ")]
    return match.group(1), match.group(2), hints


def test_the_bad_spec_corpus_is_large_enough() -> None:
    assert len(BAD_SPECS) >= 15


@pytest.mark.parametrize("path", BAD_SPECS, ids=[p.stem for p in BAD_SPECS])
def test_bad_spec_gives_one_error_line_with_position_and_exit_1(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    position, message, hints = _expectation(path)
    monkeypatch.chdir(path.parent)
    assert cli.run(["validate", "-f", path.name]) == errors.EXIT_ERROR
    captured = capsys.readouterr()
    error_lines = [line for line in (captured.out + captured.err).splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, captured.err
    assert error_lines[0].startswith(f"Error: {path.name}:{position}: {message}"), error_lines[0]
    assert "Traceback" not in captured.err
    for hint in hints:
        assert hint in captured.err


def test_an_error_names_the_field_path_and_lists_the_other_problems() -> None:
    text = DESIGN_EXAMPLE.replace("version: v0.20.1\n  gfd", "versoin: v0.20.1\n  gfd").replace(
        "owner: external\n  devicePlugin", "owner: externl\n  devicePlugin"
    )
    with pytest.raises(errors.ConfigError) as caught:
        spec.parse_spec(text, filename="gpustack.yaml")
    error = caught.value
    assert error.where == "gpustack.yaml:11:12"  # the first problem in file order: toolkit.owner
    assert "field: spec.toolkit.owner" in error.detail
    assert (
        "also gpustack.yaml:13:5: unknown field 'versoin' (field spec.devicePlugin.versoin)" in error.detail
    )


def test_json_schema_is_draft_2020_12_with_descriptions_and_checks_specs() -> None:
    schema = spec.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for text in (DESIGN_EXAMPLE, FULL_SPEC):
        assert list(validator.iter_errors(yaml.safe_load(text))) == []
    bad = yaml.safe_load(DESIGN_EXAMPLE.replace("version: v0.20.1\n  gfd", "versoin: v0.20.1\n  gfd"))
    assert list(validator.iter_errors(bad)), "the schema rejects unknown keys as the loader does"
    stack = schema["$defs"]["StackSpec"]["properties"]
    assert set(stack) >= {
        "namespace",
        "nodeSelector",
        "daemonsets",
        "mig",
        "cdi",
        "driver",
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
    }
    assert all(prop.get("description") for prop in stack.values())
    assert schema["$defs"]["DevicePluginConfig"]["properties"]["version"]["default"] == "v0.20.1"


def test_an_empty_section_means_its_defaults() -> None:
    loaded = spec.parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
        "  validator:\n  devicePlugin:\n    resources:\n",
        filename="gpustack.yaml",
    )
    assert loaded.spec.validator.owner == "gpuplan" and loaded.spec.validator.version == "v26.7.0"
    assert loaded.spec.device_plugin.resources is None


QUANTITY_SPEC = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
# resources as written in gpustack.yaml -> what the spec keeps (YAML 1.1 reads 2e9 as a string, +1 as an int
# and .5 as a float: the same quantity either way)
ACCEPTED_QUANTITIES = {
    "2e9": "2e9",
    "1E3": "1E3",
    "1e-1": "1e-1",
    "+1": "1",
    "'+1'": "+1",
    ".5": "0.5",
    "'.5'": ".5",
    "5.": "5.0",
    "'5.'": "5.",
    "0.5": "0.5",
    "2": "2",
    "100m": "100m",
    "1.5Gi": "1.5Gi",
    "1E": "1E",
    "3n": "3n",
    "4u": "4u",
    '"0"': "0",
}
REFUSED_QUANTITIES = ["1e", "1e1.5", "1ki", "1K", "512MB", "1.1.M", ".5i", "abc", ".", "'1 '", ".inf"]


@pytest.mark.parametrize(("written", "kept"), ACCEPTED_QUANTITIES.items(), ids=list(ACCEPTED_QUANTITIES))
def test_every_kubernetes_quantity_is_accepted(written: str, kept: str) -> None:
    text = QUANTITY_SPEC + f"  devicePlugin: {{resources: {{limits: {{memory: {written}}}}}}}\n"
    resources = spec.parse_spec(text, filename="gpustack.yaml").spec.device_plugin.resources
    assert resources is not None and resources.limits == {"memory": kept}


@pytest.mark.parametrize("written", REFUSED_QUANTITIES)
def test_what_the_api_server_refuses_is_one_error_naming_the_value(written: str) -> None:
    text = QUANTITY_SPEC + f"  devicePlugin: {{resources: {{requests: {{cpu: {written}}}}}}}\n"
    with pytest.raises(errors.ConfigError) as caught:
        spec.parse_spec(text, filename="gpustack.yaml")
    shown = yaml.safe_load(written)
    assert caught.value.summary == f"invalid value '{shown}' for 'cpu'"
    assert "\n" not in caught.value.summary
    assert caught.value.hint == "expected a Kubernetes quantity such as 500m, 2, 0.5, 512Mi or 2e9"
    assert "field: spec.devicePlugin.resources.requests.cpu" in caught.value.detail


def test_a_negative_request_is_refused_as_the_api_server_does() -> None:
    text = QUANTITY_SPEC + "  devicePlugin: {resources: {limits: {cpu: '-1e-3'}}}\n"
    with pytest.raises(errors.ConfigError) as caught:
        spec.parse_spec(text, filename="gpustack.yaml")
    assert caught.value.summary == "invalid value '-1e-3' for 'cpu'"
    assert caught.value.hint == "expected a quantity of zero or more"
    loaded = spec.parse_spec(text.replace("-1e-3", "-0"), filename="gpustack.yaml")  # zero, signed or not
    assert loaded.spec.device_plugin.resources is not None


@pytest.mark.parametrize(
    ("rule", "field", "message"),
    [
        (
            "{address: gfd/DaemonSets/gpu-operator/gpu-feature-discovery, paths: [spec]}",
            "address",
            "no object",
        ),
        (
            "{address: gfd/DaemonSet/gpu-operator/gpu-feature-discovery, paths: ['spec.x[name=y']}",
            "paths[0]",
            "does not parse",
        ),
        ("{nodes: {selector: pool=lab}, checks: [allocatible]}", "checks[0]", "unknown check"),
        ("{nodes: {selector: 'pool=la b'}, checks: [allocatable]}", "nodes.selector", "does not parse"),
    ],
)
def test_a_bad_ignore_rule_names_the_file_line_and_field_with_a_hint(
    rule: str, field: str, message: str
) -> None:
    from gpuplan.errors import ConfigError
    from gpuplan.planner.spec.model import parse_spec

    text = (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n  ignore:\n    - "
        + rule
        + "\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_spec(text, filename="gpustack.yaml")
    error = caught.value
    assert message in str(error) and "gpustack.yaml:6:" in str(error.where)
    assert f"spec.ignore[0].{field}" in str(error) + str(error.detail) and error.hint


def test_ignore_checks_are_the_apply_gates_and_telemetry() -> None:
    from gpuplan.planner.health.nodes import JUDGES
    from gpuplan.planner.spec.ignore import CHECKS

    assert set(CHECKS) == {*JUDGES, "telemetry"}
