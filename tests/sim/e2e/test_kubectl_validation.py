"""kubectl's default validation (OpenAPI v3 backed, server-side ``fieldValidation=Strict``) accepts every
object gpuplan renders and every object ``gpuplan drift cronjob`` prints, refuses an unknown field in a
custom resource from its CRD's ``openAPIV3Schema`` as a real server does, and ``kubectl explain`` reads the
built-in kinds gpuplan uses and a CRD."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from lab_stack import LAB_SPEC, STACK_HEADER

from gpuplan.cli import run
from gpuplan.planner.spec import model as spec
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

pytestmark = pytest.mark.kubectl

NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: gpu-operator}\n"
# Every component gpuplan owns by default, then the configurations that render more objects or fields.
BODIES = [
    "  {}\n",
    "  devicePlugin:\n    config:\n      timeSlicing: {replicas: 4, renameByDefault: true}\n",
    "  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 10}}}\n",
    "  devicePlugin: {config: {name: sharing, default: a100}}\n",
    "  dcgmExporter: {metricsConfigMap: dcgm-metrics, enablePodLabels: true, serviceType: NodePort,"
    " internalTrafficPolicy: Local}\n  driver: {kernelModuleType: open, osTag: rhel9}\n",
]


def rendered(text: str) -> list[dict[str, object]]:
    stack = spec.parse_spec(text, filename="gpustack.yaml")
    return [dict(o.manifest) for o in stack.desired_objects(stack.context())]


def cronjob_objects(spec_file: Path) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert run(["drift", "cronjob", "-f", str(spec_file)]) == 0
    return out.getvalue()


def test_every_rendered_object_passes_default_validation(
    lab_sim: Simulator, kubectl: Kubectl, tmp_path: Path
) -> None:
    kubectl("apply", "-f", "-", input=NAMESPACE)
    documents = [doc for body in BODIES for doc in rendered(STACK_HEADER + body)] + rendered(LAB_SPEC)
    kinds = {str(doc["kind"]) for doc in documents}
    assert kinds >= {"DaemonSet", "Service", "ConfigMap", "RuntimeClass", "ServiceAccount", "ClusterRole"}
    for index, doc in enumerate(documents):
        path = tmp_path / f"{index:03}.yaml"
        path.write_text(yaml.safe_dump(doc))
    result = kubectl("apply", "--dry-run=server", "-f", str(tmp_path), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("(server dry run)") == len(documents)


def test_the_drift_cronjob_objects_pass_default_validation(
    lab_sim: Simulator, kubectl: Kubectl, tmp_path: Path
) -> None:
    kubectl("apply", "-f", "-", input=NAMESPACE)
    spec_file = tmp_path / "gpustack.yaml"
    for text in (LAB_SPEC, STACK_HEADER + BODIES[-1]):
        spec_file.write_text(text)
        printed = cronjob_objects(spec_file)
        count = sum(1 for doc in yaml.safe_load_all(printed) if doc)
        result = kubectl("apply", "--dry-run=server", "-f", "-", input=printed, check=False)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert result.stdout.count("(server dry run)") == count
        assert "cronjob.batch/gpuplan-drift created (server dry run)" in result.stdout


CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: nvidiadrivers.nvidia.com}
spec:
  group: nvidia.com
  scope: Cluster
  names: {kind: NVIDIADriver, listKind: NVIDIADriverList, plural: nvidiadrivers, singular: nvidiadriver}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        description: NVIDIADriver is the Schema for the nvidiadrivers API
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            description: NVIDIADriverSpec defines the desired state of NVIDIADriver
            type: object
            properties:
              driverType: {type: string, enum: [gpu, vgpu, vgpu-host-manager], description: Driver type}
              version: {type: string, description: NVIDIA Driver version}
              nodeSelector: {type: object, additionalProperties: {type: string}}
              env:
                type: array
                items: {type: object, properties: {name: {type: string}, value: {type: string}}}
              manager: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, properties: {state: {type: string}}}
"""
GOOD = """\
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata: {name: default, labels: {team: gpu}}
spec:
  driverType: gpu
  version: "580.105.08"
  nodeSelector: {nvidia.com/gpu.present: "true"}
  env: [{name: A, value: "1"}]
  manager: {env: [{name: ENABLE_AUTO_DRAIN, value: "true"}]}
"""
BAD = GOOD.replace("name: default", "name: typo").replace("  version:", "  versoin:")


def test_a_custom_resource_is_validated_against_its_crd_schema(lab_sim: Simulator, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=CRD)
    assert "nvidiadriver.nvidia.com/default created" in kubectl("apply", "-f", "-", input=GOOD).stdout
    refused = kubectl("apply", "-f", "-", input=BAD, check=False)
    assert refused.returncode == 1
    assert (
        'NVIDIADriver in version "v1alpha1" cannot be handled as a NVIDIADriver: strict decoding error: '
        'unknown field "spec.versoin"'
    ) in refused.stderr
    warned = kubectl("apply", "--validate=warn", "-f", "-", input=BAD)
    assert 'unknown field "spec.versoin"' in warned.stderr
    stored = kubectl("get", "nvidiadriver", "typo", "-o", "jsonpath={.spec}").stdout
    assert "versoin" not in stored and '"driverType":"gpu"' in stored


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("daemonsets", "DaemonSet represents the configuration of a daemon set."),
        ("daemonsets.spec.template.spec.containers", "List of containers belonging to the pod."),
        ("nodes", "Node is a worker node in Kubernetes."),
        ("pods", "Pod is a collection of containers that can run on a host."),
        ("configmaps", "ConfigMap holds configuration data for pods to consume."),
        ("services", "Service is a named abstraction of software service"),
        ("cronjobs", "CronJob represents the configuration of a single cron job."),
        ("jobs", "Job represents the configuration of a single job."),
        ("runtimeclasses", "RuntimeClass defines a class of container runtime supported in the cluster."),
    ],
)
def test_explain_reads_the_builtin_kinds(kubectl: Kubectl, path: str, expected: str) -> None:
    out = kubectl("explain", path).stdout
    assert " ".join(out.split()).find(expected) >= 0, out


def test_explain_reads_a_crd(lab_sim: Simulator, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=CRD)
    out = kubectl("explain", "nvidiadrivers.spec").stdout
    assert "KIND:       NVIDIADriver" in out and "VERSION:    v1alpha1" in out
    assert "NVIDIADriverSpec defines the desired state of NVIDIADriver" in out
    assert "driverType\t<string>" in out and "enum: gpu, vgpu, vgpu-host-manager" in out
    assert "nodeSelector\t<map[string]string>" in out
