"""``as=Table`` printers for core/v1 Endpoints and discovery.k8s.io/v1 EndpointSlices, as the real
apiserver's.

``printEndpoints`` and ``printEndpointSlice`` of ``pkg/printers/internalversion/printers.go``:

- Endpoints: NAME, ENDPOINTS, AGE. ENDPOINTS lists the ready ``ip:port`` pairs (``formatEndpoints``; a subset
  without ports lists its IPs), at most 3, then `` + N more...``; ``<none>`` without subsets.
- EndpointSlices: NAME, ADDRESSTYPE, PORTS, ENDPOINTS, AGE. PORTS and ENDPOINTS list at most 3 port numbers
  and addresses (``formatDiscoveryPorts``, ``formatDiscoveryEndpoints``), then `` + N more...``; ``<unset>``
  when there are none.

Registered in :data:`gpuplan.sim.api.tables._PRINTERS` (``PRINTERS`` here); pure functions of plain dicts.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from gpuplan.sim.api import table_events

Obj = Mapping[str, Any]
_column = table_events._column
_MAX = 3
_NAME = _column("Name", fmt="name", description="Name must be unique within a namespace.")
_AGE = _column(
    "Age",
    description="CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def _age(obj: Obj, now: datetime.datetime) -> str:
    return str(table_events._since(obj.get("metadata", {}).get("creationTimestamp"), now))


def _with_more(items: list[str], total: int, empty: str) -> str:
    """listWithMoreString / formatEndpoints: the first three, then how many more."""
    text = ",".join(items[:_MAX])
    if total > _MAX:
        return f"{text} + {total - _MAX} more..."
    return text or empty


def _host_port(ip: str, port: Any) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def endpoints_cell(endpoints: Obj) -> str:
    found = endpoints.get("subsets") or []
    if not found:
        return "<none>"
    items: list[str] = []
    for subset in found:
        addresses = [a.get("ip", "") for a in subset.get("addresses") or []]
        ports = subset.get("ports") or []
        if not ports:
            items.extend(addresses)
        for port in ports:
            items.extend(_host_port(ip, port.get("port")) for ip in addresses)
    return _with_more(items, len(items), "")


ENDPOINTS_COLUMNS = [
    _NAME,
    _column("Endpoints", description="Endpoints of the object, IP address and port pairs"),
    _AGE,
]


def endpoints_cells(endpoints: Obj, now: datetime.datetime) -> list[Any]:
    return [endpoints["metadata"]["name"], endpoints_cell(endpoints), _age(endpoints, now)]


def slice_ports_cell(slice_obj: Obj) -> str:
    ports = slice_obj.get("ports") or []
    numbers = [str(p["port"]) if p.get("port") is not None else p.get("name") or "*" for p in ports]
    return _with_more(numbers, len(numbers), "<unset>")


def slice_endpoints_cell(slice_obj: Obj) -> str:
    addresses = [a for e in slice_obj.get("endpoints") or [] for a in e.get("addresses") or []]
    return _with_more(addresses, len(addresses), "<unset>")


ENDPOINTSLICE_COLUMNS = [
    _NAME,
    _column(
        "AddressType", description="AddressType specifies the type of address carried by this EndpointSlice."
    ),
    _column("Ports", description="Ports specifies the list of network ports exposed by each endpoint."),
    _column("Endpoints", description="Endpoints is a list of unique endpoints in this slice."),
    _AGE,
]


def endpointslice_cells(slice_obj: Obj, now: datetime.datetime) -> list[Any]:
    return [
        slice_obj["metadata"]["name"],
        slice_obj.get("addressType", ""),
        slice_ports_cell(slice_obj),
        slice_endpoints_cell(slice_obj),
        _age(slice_obj, now),
    ]


PRINTERS: dict[tuple[str, str], tuple[list[table_events.Column], table_events.RowCells]] = {
    ("", "endpoints"): (ENDPOINTS_COLUMNS, endpoints_cells),
    ("discovery.k8s.io", "endpointslices"): (ENDPOINTSLICE_COLUMNS, endpointslice_cells),
}
