"""`gpuplan inventory` through the CLI: the `mixed` simulator before and after GFD runs (families, models,
memory, driver and its source, components), --json agreeing with the table, -f SPEC naming the stack, the
request count that grows only by pages, a stopped cluster as one Error: line; and `--local` on a fake NVML
host (GPUPLAN_NVML_FAKE, the command's seam), including hosts without a driver."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan import errors
from gpuplan.cli import run
from gpuplan.planner.observe import inventory
from gpuplan.planner.spec import model as spec_mod
from gpuplan.providers import kubernetes as kubernetes_provider
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.nvml import FAKE_ENV
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.views.gpu import gib

STACK = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: mixed}
spec:
  namespace: gpu-ops
  driver: {owner: external}
  toolkit: {owner: external}
  dcgmExporter: {owner: none}
  validator: {owner: none}
"""
HAND_LABELLED = {"nvidia.com/cuda.driver-version.full": "570.195.03"}  # put on a100-node by hand
Invoke = Callable[..., tuple[int, str, str]]


def mixed_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        scenario_mod.load_scenario("mixed").model_dump_json(exclude_none=True)
    )
    return data


def expected_nodes() -> dict[str, tuple[str, int]]:
    """node -> (catalog model key, GPU count), from the scenario itself."""
    return {node["name"]: (node["gpu"]["model"], node["gpu"]["count"]) for node in mixed_data()["nodes"]}


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Invoke:
    def call(*argv: str) -> tuple[int, str, str]:
        code = run(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def before_gfd(sim_factory: SimFactory, tmp_path: Path) -> tuple[Simulator, Path]:
    """`mixed` as registered: NFD's labels, no GFD; one node carries a driver label set by hand."""
    data = mixed_data()
    data["nodes"][0]["labels"] = dict(HAND_LABELLED)
    sim = sim_factory(data)
    assert sim.wait_idle(30)
    return sim, sim.write_kubeconfig(tmp_path / "before.kubeconfig")


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(STACK)
    return path


@pytest.fixture
def after_gfd(sim_factory: SimFactory, tmp_path: Path, spec_file: Path) -> tuple[Simulator, Path]:
    """`mixed` with the stack's device plugin and GFD running (driver and toolkit are the hosts')."""
    stack = spec_mod.load_spec(spec_file)
    data = mixed_data()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stack.spec.namespace}}
    data["objects"] = [namespace, *(dict(o.manifest) for o in stack.desired_objects())]
    sim = sim_factory(data)
    assert sim.wait_idle(30), "the stack did not settle"
    return sim, sim.write_kubeconfig(tmp_path / "after.kubeconfig")


def table_rows(out: str) -> dict[str, dict[str, str]]:
    """The printed table as {node: {HEADER: cell}}; cells are split where kubectl puts 3+ spaces."""
    lines = out.split("\n\n")[0].splitlines()
    headers = re.split(r"\s{3,}", lines[0])
    rows = [dict(zip(headers, re.split(r"\s{3,}", line))) for line in lines[1:]]
    return {row["NODE"]: row for row in rows}


def summary_of(out: str) -> str:
    return out.rstrip("\n").splitlines()[-1]


# ------------------------------------------------------------------------------------------------ cluster


def test_mixed_before_gfd_runs(before_gfd: tuple[Simulator, Path], invoke: Invoke) -> None:
    """Before GFD: each GPU is what NFD's NodeFeature names (its PCI device id), and the table says so."""
    _, kubeconfig = before_gfd
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "inventory")
    assert (code, err) == (0, "")
    rows = table_rows(out)
    assert set(rows) == set(expected_nodes())
    for name, (key, count) in expected_nodes().items():
        row, model = rows[name], CATALOG[key]
        assert (row["GPU"], row["GPU-SOURCE"], row["FAMILY"], row["COUNT"]) == (
            model.product,
            "NFD NodeFeature",
            model.family,
            str(count),
        )
        assert row["GFD"] == "no" and row["DEVICE-PLUGIN"] == "no"
        assert row["TOOLKIT"] == "yes", "every mixed node has a host toolkit: containerd reports the handler"
        expected_driver = (
            HAND_LABELLED["nvidia.com/cuda.driver-version.full"]
            if name == "a100-node"
            else "unknown until GFD runs"
        )
        assert row["DRIVER"] == expected_driver
        assert row["DRIVER-SOURCE"] == ("GFD label" if name == "a100-node" else "-")
    assert summary_of(out) == (
        "4 nodes, 21 GPUs: ampere 9 (NVIDIA-A100-SXM4-80GB ×8, NVIDIA-GeForce-RTX-3060 ×1), hopper 8, "
        "ada-lovelace 4"
    ), "a driver label alone does not make GFD's the source: NFD's NodeFeature names every GPU"
    code, out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory", "--json")
    document = json.loads(out)
    assert document["summary"]["unidentified_gpu_nodes"] == 0 and document["summary"]["gpus"] == 21
    assert {node["gpu"]["source"] for node in document["nodes"]} == {"nfd"}
    drivers = {node["name"]: node["driver"] for node in document["nodes"]}
    assert drivers["a100-node"] == {"version": "570.195.03", "source": "gfd-label"}
    assert drivers["rtx-node"] == {"version": None, "source": None}


def test_mixed_after_gfd_shows_families_models_and_memory(
    after_gfd: tuple[Simulator, Path], invoke: Invoke
) -> None:
    _, kubeconfig = after_gfd
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "inventory")
    assert (code, err) == (0, "")
    rows = table_rows(out)
    for name, (key, count) in expected_nodes().items():
        model = CATALOG[key]
        assert (rows[name]["GPU"], rows[name]["FAMILY"], rows[name]["COUNT"]) == (
            model.product,
            model.family,
            str(count),
        )
        assert rows[name]["MEMORY"] == f"{gib(model.memory_mib)} GiB"
        assert rows[name]["CC"] == f"{model.cc_major}.{model.cc_minor}"
        assert rows[name]["MIG"] == ("capable" if model.mig_capable else "no")
        assert (rows[name]["DEVICE-PLUGIN"], rows[name]["GFD"], rows[name]["TOOLKIT"]) == (
            str(count),
            "yes",
            "yes",
        )
    assert {row["FAMILY"] for row in rows.values()} == {"ampere", "hopper", "ada-lovelace"}
    assert len({row["GPU"] for row in rows.values() if row["FAMILY"] == "ampere"}) == 2
    assert summary_of(out) == (
        "4 nodes, 21 GPUs: ampere 9 (NVIDIA-A100-SXM4-80GB ×8, NVIDIA-GeForce-RTX-3060 ×1), hopper 8, "
        "ada-lovelace 4"
    )
    widths = {len(line) for line in out.split("\n\n")[0].splitlines()}
    assert max(widths) == len(out.splitlines()[0]), "the header spans the widest row: widths are computed"


def test_json_matches_the_table(after_gfd: tuple[Simulator, Path], invoke: Invoke) -> None:
    _, kubeconfig = after_gfd
    _, table_out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory")
    code, json_out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory", "--json")
    assert code == 0
    document = json.loads(json_out)
    assert document["format_version"] == "1" and document["source"] == "cluster"
    rows = table_rows(table_out)
    assert [node["name"] for node in document["nodes"]] == list(rows)
    for node in document["nodes"]:
        row, gpu = rows[node["name"]], node["gpu"]
        assert (row["GPU"], row["FAMILY"], row["COUNT"]) == (gpu["product"], gpu["family"], str(gpu["count"]))
        assert (row["MEMORY"], row["CC"]) == (f"{gib(gpu['memory_mib'])} GiB", gpu["compute_capability"])
        assert row["DRIVER"] == node["driver"]["version"] and node["driver"]["source"] == "gfd-label"
        assert row["DRIVER-SOURCE"] == "GFD label"
        assert row["DEVICE-PLUGIN"] == str(node["allocatable_gpus"])
    summary = document["summary"]
    assert (summary["nodes"], summary["gpus"]) == (4, sum(n["gpu"]["count"] for n in document["nodes"]))
    assert summary_of(table_out).startswith(f"{summary['nodes']} nodes, {summary['gpus']} GPUs: ")


def test_spec_names_the_stack(after_gfd: tuple[Simulator, Path], spec_file: Path, invoke: Invoke) -> None:
    _, kubeconfig = after_gfd
    code, out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory", "-f", str(spec_file), "--json")
    assert code == 0
    cluster = json.loads(out)["cluster"]
    assert (cluster["stack"], cluster["namespace"]) == ("mixed", "gpu-ops")


def test_requests_grow_only_by_pages(
    sim_factory: SimFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four nodes and twelve cost the same; with 5 nodes a page, twelve cost two pages more of nodes and two
    of NFD's NodeFeatures (one per node)."""

    def requests(scenario: str) -> tuple[int, int]:
        sim = sim_factory(scenario)
        assert sim.wait_idle(30)
        kubeconfig = sim.write_kubeconfig(tmp_path / f"{scenario}.kubeconfig")
        with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
            result = inventory.read_cluster(provider)
        assert result.requests == provider.request_count
        return len(result.nodes), result.requests

    small, large = requests("mixed"), requests("fleet-12")
    assert (small[0], large[0]) == (4, 12) and small[1] == large[1]
    monkeypatch.setattr(kubernetes_provider, "PAGE_SIZE", 5)
    assert requests("fleet-12") == (12, large[1] + 2 + 2)


def test_a_stopped_cluster_is_one_error_line(before_gfd: tuple[Simulator, Path], invoke: Invoke) -> None:
    sim, kubeconfig = before_gfd
    sim.stop()
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "inventory")
    assert code == errors.EXIT_ERROR and out == ""
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [err.splitlines()[0]]
    assert err.startswith("Error: cannot reach the cluster at ") and "Traceback" not in err


def test_an_unreachable_prometheus_is_one_error_line_naming_it(
    before_gfd: tuple[Simulator, Path], invoke: Invoke
) -> None:
    _, kubeconfig = before_gfd
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "inventory", "--prometheus", url)
    assert code == errors.EXIT_ERROR and out == ""
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [err.splitlines()[0]]
    assert err.startswith(f"Error: {url}: cannot reach Prometheus") and "Hint:" in err


def test_local_and_prometheus_are_a_usage_error(invoke: Invoke) -> None:
    code, _, err = invoke("inventory", "--local", "--prometheus", "http://127.0.0.1:9090")
    assert code == errors.EXIT_USAGE and err.startswith("Error: --local reads this host")


def test_local_and_spec_are_a_usage_error(spec_file: Path, invoke: Invoke) -> None:
    code, _, err = invoke("inventory", "--local", "-f", str(spec_file))
    assert code == errors.EXIT_USAGE and err.startswith("Error: --local reads this host")


# ------------------------------------------------------------------------------------------------- --local


def host_description(tmp_path: Path, keys: list[str], **extra: Any) -> Path:
    """A GPUPLAN_NVML_FAKE description of a host with the catalog GPUs ``keys``."""
    gpus = [
        {
            "name": CATALOG[key].name,
            "memory_mib": CATALOG[key].memory_mib,
            "compute_capability": [CATALOG[key].cc_major, CATALOG[key].cc_minor],
            "mig_capable": CATALOG[key].mig_capable,
            "uuid": f"GPU-{index:08d}-test",
            "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0",
            "power_limit_w": CATALOG[key].power_limit_w,
        }
        for index, key in enumerate(keys)
    ]
    path = tmp_path / "host.json"
    path.write_text(
        json.dumps({"driver_version": "580.105.08", "cuda_driver_version": 13000, "gpus": gpus, **extra})
    )
    return path


def test_local_ignores_the_spec_found_in_the_working_directory(
    spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    """Only an -f given on the command line clashes with --local, not ./gpustack.yaml found without it."""
    monkeypatch.setenv(FAKE_ENV, str(host_description(tmp_path, ["l40s"])))
    monkeypatch.chdir(spec_file.parent)
    code, out, err = invoke("inventory", "--local")
    assert (code, err) == (0, "")
    assert summary_of(out) == "1 host, 1 GPU: ada-lovelace 1"


def test_local_reads_this_host_through_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    keys = ["h100-80gb"] * 4 + ["l40s"]
    monkeypatch.setenv(FAKE_ENV, str(host_description(tmp_path, keys)))
    code, out, err = invoke("inventory", "--local")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "Driver 580.105.08, CUDA 13.0 (NVML on this host)"
    lines = out.split("\n\n")[1].splitlines()
    assert re.split(r"\s{3,}", lines[0])[:3] == ["INDEX", "NAME", "UUID"]
    cells = [re.split(r"\s{3,}", line) for line in lines[1:]]
    assert [row[1] for row in cells] == [CATALOG[key].product for key in keys], (
        "GFD's label, as the cluster's"
    )
    assert [row[6] for row in cells] == ["disabled"] * 4 + ["N/A"], "MIG mode, N/A where NVML has none"
    assert cells[0][4] == f"0 / {gib(CATALOG['h100-80gb'].memory_mib)} GiB"
    assert summary_of(out) == "1 host, 5 GPUs: hopper 4, ada-lovelace 1"
    code, out, _ = invoke("inventory", "--local", "--json")
    document = json.loads(out)
    assert (document["format_version"], document["source"]) == ("1", "nvml")
    assert [gpu["uuid"] for gpu in document["host"]["gpus"]] == [row[2] for row in cells]
    assert document["summary"]["gpus"] == len(keys)


@pytest.mark.parametrize(
    ("init_error", "line"),
    [
        (
            "LibraryNotFound",
            "Error: No NVIDIA driver on this host: libnvidia-ml.so.1 not found (NVML: Library Not Found)",
        ),
        (
            "DriverNotLoaded",
            "Error: No NVIDIA driver on this host: the nvidia kernel module is not loaded (NVML: Driver Not "
            "Loaded)",
        ),
        (
            "NoPermission",
            "Error: No access to the NVIDIA driver on this host: permission denied (NVML: No Permission)",
        ),
    ],
)
def test_local_without_driver_is_one_error_line(
    init_error: str, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    monkeypatch.setenv(FAKE_ENV, str(host_description(tmp_path, [], init_error=init_error)))
    code, out, err = invoke("inventory", "--local")
    assert (code, out) == (errors.EXIT_ERROR, "")
    assert err.splitlines()[0] == line
    assert [text for text in err.splitlines() if text.startswith("Error")] == [line]


def test_local_without_driver_from_the_console_script(tmp_path: Path) -> None:
    """The real entry point: exit 1, one Error: line, no traceback (and no debug log: not a bug)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        FAKE_ENV: str(host_description(tmp_path, [], init_error="LibraryNotFound")),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "inventory", "--local"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[0].startswith("Error: No NVIDIA driver on this host")
    assert "Traceback" not in proc.stderr and not (tmp_path / "gpuplan-debug.log").exists()


# ------------------------------------------------------------------------------------------------ rendering


def test_cpu_nodes_and_an_empty_cluster_render_plainly() -> None:
    from gpuplan.providers.fake import FakeKubernetes
    from gpuplan.views import inventory as view

    cpu = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cpu-0", "labels": {}},
        "status": {"runtimeHandlers": [{"name": "runc"}]},
    }
    out = view.render(inventory.read_cluster(FakeKubernetes(nodes=[cpu])).document())
    row = table_rows(out)["cpu-0"]
    assert (row["GPU"], row["DRIVER"], row["TOOLKIT"], row["GFD"]) == ("<none>", "-", "no", "-")
    assert summary_of(out) == "1 node, no NVIDIA GPUs"
    empty = view.render(inventory.read_cluster(FakeKubernetes()).document())
    assert empty == "No nodes found.\n\n0 nodes, no NVIDIA GPUs\n"


def test_the_spec_in_the_working_directory_names_the_stack(
    after_gfd: tuple[Simulator, Path], spec_file: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, kubeconfig = after_gfd
    monkeypatch.chdir(spec_file.parent)  # ./gpustack.yaml, found without -f
    code, out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory", "--json")
    assert code == 0
    assert json.loads(out)["cluster"]["stack"] == "mixed"


def test_no_spec_anywhere_is_fine(
    after_gfd: tuple[Simulator, Path], tmp_path: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, kubeconfig = after_gfd
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "inventory", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["cluster"].get("stack") is None


def test_a_node_no_source_describes_is_unknown_not_gpu_less(
    sim_factory: SimFactory, tmp_path: Path, invoke: Invoke
) -> None:
    """NFD runs in the cluster but not on dark-0, and GFD never ran: nothing says whether it has a GPU."""
    sim = sim_factory(
        {"nodes": [{"name": "dark-0", "gpu": {"model": "t4"}, "nfd": False}, {"name": "cpu-0"}]}
    )
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    code, out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory")
    rows = table_rows(out)
    assert code == 0 and (rows["dark-0"]["GPU"], rows["dark-0"]["GPU-SOURCE"]) == (
        "unknown",
        "not identified",
    )
    assert (rows["cpu-0"]["GPU"], rows["cpu-0"]["GPU-SOURCE"]) == ("<none>", "-"), "NFD saw no NVIDIA device"
    _, out, _ = invoke("--kubeconfig", str(kubeconfig), "inventory", "--json")
    dark = next(node for node in json.loads(out)["nodes"] if node["name"] == "dark-0")
    assert dark["gpu"]["present"] is False and dark["gpu"]["unidentified"].startswith(
        "no GFD labels and no NodeFeature"
    )
