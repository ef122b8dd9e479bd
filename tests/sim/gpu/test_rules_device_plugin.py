"""The device plugin advertises GPUs x replicas where driver and runtime work, and fails like the real one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuplan.sim.kubelet import rules
from gpuplan.sim.kubelet.images import Role
from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.scenario import expand_nodes, load_scenario

CTX = rules.PodContext()


def _ready_node(
    build: SimpleNamespace, model: str = "h100-80gb", count: int = 8, **spec: object
) -> NodeGpuState:
    node: NodeGpuState = build.make_node(model, count, driver="580.105.08", toolkit="1.18.1", **spec)
    return node


def test_lab_hand_deployed_plugin_advertises_the_rtx_3060() -> None:
    """The README static manifest (no runtimeClassName) works because the lab's containerd defaults to
    nvidia."""
    scenario = load_scenario("lab")
    node = NodeGpuState(expand_nodes(scenario)[0])
    template = scenario.objects[0]["spec"]["template"]
    pod = {
        "metadata": {"name": "nvidia-device-plugin-daemonset-x", "namespace": "kube-system"},
        "spec": template["spec"],
    }
    outcome = rules.evaluate(pod, node, CTX)
    assert (outcome.phase, outcome.ready, outcome.init_done) == ("Running", True, 0)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "1"}
    assert outcome.effect.manager == "kubelet"


def test_operator_style_plugin_waits_in_toolkit_validation(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", toolkit="1.18.1")  # nvidia handler from the host, but no driver yet
    outcome = rules.evaluate(build.plugin_pod(), node, CTX)
    assert (outcome.phase, outcome.init_done, outcome.waiting_reason, outcome.crash_looping) == (
        "Pending",
        0,
        "PodInitializing",
        False,
    )
    assert outcome.message == "waiting for nvidia container stack to be setup"


def test_without_the_nvidia_handler_the_sandbox_cannot_start(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08")
    outcome = rules.evaluate(build.plugin_pod(), node, CTX)
    assert (outcome.waiting_reason, outcome.init_done) == ("ContainerCreating", 0)


def test_advertises_one_per_gpu_when_everything_works(build: SimpleNamespace) -> None:
    outcome = rules.evaluate(build.plugin_pod(), _ready_node(build), CTX)
    assert (outcome.phase, outcome.ready, outcome.init_done) == ("Running", True, 1)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "8"}


def test_time_slicing_from_the_config_manager_default_key(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"any": build.TIME_SLICING_4}))
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="any"), _ready_node(build), ctx)
    assert outcome.ready and outcome.effect is not None
    assert dict(outcome.effect.resources) == {"nvidia.com/gpu": "32"}


def test_node_label_selects_the_config_key(build: SimpleNamespace) -> None:
    eight = build.TIME_SLICING_4.replace("replicas: 4", "replicas: 8")
    ctx = rules.PodContext(
        config_lookup=build.config_maps(cfg={"four": build.TIME_SLICING_4, "eight": eight})
    )
    node = _ready_node(build, "t4", 4, labels={"nvidia.com/device-plugin.config": "eight"})
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="four"), node, ctx)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "32"}


def test_unknown_key_falls_back_to_no_config_with_the_empty_strategy(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"four": build.TIME_SLICING_4}))
    node = _ready_node(build, labels={"nvidia.com/device-plugin.config": "missing"})
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg"), node, ctx)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "8"}


def test_without_fallback_an_unknown_key_crash_loops_the_config_manager_init(build: SimpleNamespace) -> None:
    ctx = rules.PodContext(
        config_lookup=build.config_maps(cfg={"a": build.TIME_SLICING_4, "b": build.TIME_SLICING_4})
    )
    pod = build.plugin_pod(config_map="cfg")
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        for variable in container.get("env", []):
            if variable["name"] == "FALLBACK_STRATEGIES":
                variable["value"] = "named"
    node = _ready_node(build, labels={"nvidia.com/device-plugin.config": "missing"})
    outcome = rules.evaluate(pod, node, ctx)
    assert (outcome.phase, outcome.init_done, outcome.waiting_reason) == ("Pending", 1, "CrashLoopBackOff")
    assert 'no configuration named "missing"' in (outcome.message or "")


def test_rename_by_default_advertises_gpu_shared(build: SimpleNamespace) -> None:
    config = build.TIME_SLICING_4.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n")
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"any": config}))
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="any"), _ready_node(build), ctx)
    assert outcome.effect is not None
    assert dict(outcome.effect.resources) == {"nvidia.com/gpu.shared": "32", "nvidia.com/gpu": "0"}


def test_mps_sharing_multiplies_too(build: SimpleNamespace) -> None:
    config = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"any": config}))
    node = _ready_node(build)
    node.ready_roles.add(Role.MPS_CONTROL_DAEMON)  # the plugin waits for the MPS daemon (test_rules_mps.py)
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="any"), node, ctx)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "80"}


@pytest.mark.parametrize(
    ("config", "error"),
    [
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: 1\n",
            "number of replicas must be >= 2",
        ),
        ("version: v1\nsharing:\n  timeSlicing:\n    resources: []\n", "no resources specified"),
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n",
            "no replicas specified",
        ),
        ("version: v2\n", "unknown version: v2"),
        (
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: 2\n"
            "      devices: some\n",
            "devices set as 'some' but the only valid string input is 'all'",
        ),
        (
            "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 64\n",
            "maximum number of MPS replicas per GPU is 48",
        ),
    ],
)
def test_invalid_config_crash_loops_with_the_plugins_error(
    build: SimpleNamespace, config: str, error: str
) -> None:
    ctx = rules.PodContext(config_lookup=build.config_maps(cfg={"any": config}))
    outcome = rules.evaluate(build.plugin_pod(config_map="cfg", default_key="any"), _ready_node(build), ctx)
    assert (outcome.phase, outcome.ready, outcome.waiting_reason, outcome.crash_looping) == (
        "Running",
        False,
        "CrashLoopBackOff",
        True,
    )
    assert outcome.message is not None and outcome.message.startswith(
        "error starting plugins: unable to load config"
    )
    assert outcome.message.endswith(error)
    assert outcome.effect is None


def test_config_file_from_a_plainly_mounted_config_map(build: SimpleNamespace) -> None:
    pod = build.plugin_pod(init=False, CONFIG_FILE="/etc/nvidia/plugin.yaml")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/nvidia"}]
    pod["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "plugin-config"}}]
    ctx = rules.PodContext(
        config_lookup=build.config_maps(**{"plugin-config": {"plugin.yaml": build.TIME_SLICING_4}})
    )
    outcome = rules.evaluate(pod, _ready_node(build, "t4", 1), ctx)
    assert outcome.effect is not None and dict(outcome.effect.resources) == {"nvidia.com/gpu": "4"}
    missing = rules.evaluate(
        pod,
        _ready_node(build, "t4", 1),
        rules.PodContext(config_lookup=build.config_maps(**{"plugin-config": {"other.yaml": "x"}})),
    )
    assert missing.crash_looping and "open /etc/nvidia/plugin.yaml: no such file or directory" in (
        missing.message or ""
    )


def test_invalid_mig_strategy(build: SimpleNamespace) -> None:
    outcome = rules.evaluate(build.plugin_pod(mig="weird"), _ready_node(build), CTX)
    assert outcome.crash_looping and "invalid --mig-strategy option: weird" in (outcome.message or "")


def test_without_nvml_it_crash_loops_or_waits_as_fail_on_init_error_says(build: SimpleNamespace) -> None:
    """runc as default runtime: the plugin container gets no NVIDIA libraries."""
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1", defaultRuntime="runc")
    failing = rules.evaluate(build.plugin_pod(init=False, runtime_class=None), node, CTX)
    assert failing.crash_looping and "platform detection failed" in (failing.message or "")
    tolerant = rules.evaluate(
        build.plugin_pod(init=False, runtime_class=None, FAIL_ON_INIT_ERROR="false"), node, CTX
    )
    assert (tolerant.phase, tolerant.ready, tolerant.effect) == ("Running", True, None)
    assert (tolerant.message or "").endswith("No devices found. Waiting indefinitely.")


def test_nvidia_runtime_without_driver_fails_in_the_prestart_hook(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb")
    node.runtime_handlers.add("nvidia")
    outcome = rules.evaluate(build.plugin_pod(init=False), node, CTX)
    assert (outcome.waiting_reason, outcome.crash_looping) == ("RunContainerError", True)
    assert "nvidia-container-cli: initialization error: nvml error: driver not loaded" in (
        outcome.message or ""
    )


def test_removal_sets_capacity_to_zero(build: SimpleNamespace) -> None:
    node = _ready_node(build)
    effect = rules.removal_effect(build.plugin_pod(), node, CTX)
    assert effect is not None and dict(effect.resources) == {"nvidia.com/gpu": "0"}
    node.resources["nvidia.com/gpu.shared"] = "32"
    effect = rules.removal_effect(build.plugin_pod(), node, CTX)
    assert effect is not None and dict(effect.resources) == {
        "nvidia.com/gpu": "0",
        "nvidia.com/gpu.shared": "0",
    }


@pytest.mark.parametrize(
    ("variable", "value", "error"),
    [
        (
            "DEVICE_LIST_STRATEGY",
            "cdi-annotations,bogus",
            "invalid --device-list-strategy option: invalid strategy: bogus",
        ),
        ("DEVICE_ID_STRATEGY", "serial", "invalid --device-id-strategy option: serial"),
    ],
)
def test_invalid_flags_crash_loop(build: SimpleNamespace, variable: str, value: str, error: str) -> None:
    outcome = rules.evaluate(build.plugin_pod(**{variable: value}), _ready_node(build), CTX)
    assert outcome.crash_looping and (outcome.message or "").endswith(error)
    good = rules.evaluate(
        build.plugin_pod(DEVICE_LIST_STRATEGY="cdi-annotations,cdi-cri"), _ready_node(build), CTX
    )
    assert good.ready
