"""What the apiserver refuses in a discovery.k8s.io/v1 EndpointSlice (pkg/apis/discovery/validation).

``ValidateEndpointSlice``: ``addressType`` required and one of FQDN, IPv4, IPv6 (immutable on update); at
most 1000 endpoints, each with 1 to 100 addresses valid for the address type, a valid ``nodeName`` and
``hostname``; at most 20000 ports, each with a unique DNS-label name (or ``""``), a protocol TCP, UDP or SCTP,
and a port number from 1 to 65535 when one is given. The messages are the apiserver's field errors.
Registered in :mod:`gpuplan.sim.api.validation`; pure functions of plain dicts.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from gpuplan.sim.api import validation as v

Cause = v.Cause

ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")
PROTOCOLS = ("SCTP", "TCP", "UDP")
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 20000


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(json.dumps(s) for s in supported)
    return {
        "reason": "FieldValueNotSupported",
        "message": f"Unsupported value: {json.dumps(value)}: supported values: {listed}",
        "field": field,
    }


def _too_many(field: str, count: int, limit: int) -> Cause:
    return {
        "reason": "FieldValueTooMany",
        "message": f"Too many: {count}: must have at most {limit} items",
        "field": field,
    }


def _duplicate(field: str, value: Any) -> Cause:
    return {
        "reason": "FieldValueDuplicate",
        "message": f"Duplicate value: {json.dumps(value)}",
        "field": field,
    }


def _address_problem(address: Any, address_type: str) -> str | None:
    if address_type == "FQDN":
        ok = isinstance(address, str) and v._is_subdomain(address)
        return None if ok else v.SUBDOMAIN_MESSAGE
    try:
        parsed = ipaddress.ip_address(str(address))
    except ValueError:
        parsed = None
    wanted = ipaddress.IPv4Address if address_type == "IPv4" else ipaddress.IPv6Address
    return None if isinstance(parsed, wanted) else f"must be a valid {address_type} address"


def _endpoint(endpoint: Any, field: str, address_type: str) -> list[Cause]:
    causes: list[Cause] = []
    addresses = endpoint.get("addresses") or [] if isinstance(endpoint, dict) else []
    if not addresses:
        causes.append(v.required(f"{field}.addresses", "must contain at least 1 address"))
    elif len(addresses) > MAX_ADDRESSES:
        causes.append(_too_many(f"{field}.addresses", len(addresses), MAX_ADDRESSES))
    for index, address in enumerate(addresses[:MAX_ADDRESSES]):
        problem = _address_problem(address, address_type) if address_type in ADDRESS_TYPES else None
        if problem is not None:
            causes.append(v.invalid(f"{field}.addresses[{index}]", address, problem))
    node = endpoint.get("nodeName") if isinstance(endpoint, dict) else None
    if node and not v._is_subdomain(node):
        causes.append(v.invalid(f"{field}.nodeName", node, v.SUBDOMAIN_MESSAGE))
    hostname = endpoint.get("hostname") if isinstance(endpoint, dict) else None
    if hostname and (len(hostname) > 63 or not v._LABEL.fullmatch(hostname)):
        causes.append(v.invalid(f"{field}.hostname", hostname, v.LABEL_MESSAGE))
    return causes


def _ports(ports: list[Any]) -> list[Cause]:
    causes: list[Cause] = []
    if len(ports) > MAX_PORTS:
        return [_too_many("ports", len(ports), MAX_PORTS)]
    seen: set[str] = set()
    for index, port in enumerate(ports):
        field = f"ports[{index}]"
        name = port.get("name") or ""
        if name and (len(name) > 63 or not v._LABEL.fullmatch(name)):
            causes.append(v.invalid(f"{field}.name", name, v.LABEL_MESSAGE))
        if name in seen:
            causes.append(_duplicate(f"{field}.name", name))
        seen.add(name)
        protocol = port.get("protocol")
        if not protocol:
            causes.append(v.required(f"{field}.protocol"))
        elif protocol not in PROTOCOLS:
            causes.append(_unsupported(f"{field}.protocol", protocol, PROTOCOLS))
        number = port.get("port")
        if number is not None and not (isinstance(number, int) and 1 <= number <= 65535):
            causes.append(v.invalid(f"{field}.port", number, "must be between 1 and 65535, inclusive"))
    return causes


def validate(obj: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    address_type = obj.get("addressType")
    if not address_type:
        causes.append(v.required("addressType"))
    elif address_type not in ADDRESS_TYPES:
        causes.append(_unsupported("addressType", address_type, ADDRESS_TYPES))
    endpoints = obj.get("endpoints") or []
    if len(endpoints) > MAX_ENDPOINTS:
        causes.append(_too_many("endpoints", len(endpoints), MAX_ENDPOINTS))
    for index, endpoint in enumerate(endpoints[:MAX_ENDPOINTS]):
        causes += _endpoint(endpoint, f"endpoints[{index}]", str(address_type))
    return causes + _ports(obj.get("ports") or [])


def validate_update(old: dict[str, Any], new: dict[str, Any]) -> list[Cause]:
    if old.get("addressType") != new.get("addressType"):
        return [v.invalid("addressType", new.get("addressType"), "field is immutable")]
    return []
