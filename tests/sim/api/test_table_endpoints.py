"""The ENDPOINTS and PORTS cells of `kubectl get endpoints` and `endpointslices`, as the real printers."""

from __future__ import annotations

from gpuplan.sim.api import table_endpoints as t


def test_endpoints_list_ready_pairs_three_then_how_many_more() -> None:
    subsets = [
        {
            "addresses": [{"ip": f"10.0.0.{i}"} for i in range(1, 5)],
            "notReadyAddresses": [{"ip": "10.0.0.9"}],
            "ports": [{"port": 80}],
        }
    ]
    assert t.endpoints_cell({"subsets": subsets}) == "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more..."
    assert t.endpoints_cell({"subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]}) == (
        "[fd00::1]:80"
    )
    assert t.endpoints_cell({"subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]}) == "10.0.0.1"
    assert t.endpoints_cell({}) == "<none>"
    assert (
        t.endpoints_cell({"subsets": [{"notReadyAddresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 1}]}]})
        == ""
    )


def test_slices_list_ports_and_addresses_or_unset() -> None:
    full = {
        "ports": [{"port": 80}, {"name": "named"}, {}, {"port": 4}],
        "endpoints": [{"addresses": [f"10.0.0.{i}"]} for i in range(1, 3)],
    }
    assert t.slice_ports_cell(full) == "80,named,* + 1 more..."
    assert t.slice_endpoints_cell(full) == "10.0.0.1,10.0.0.2"
    placeholder = {"ports": None, "endpoints": None}
    assert t.slice_ports_cell(placeholder) == t.slice_endpoints_cell(placeholder) == "<unset>"
