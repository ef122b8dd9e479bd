"""Generate ``protobuf_data/messages.json.gz``: the protobuf field tables of the kinds the simulator serves.

kubectl's generator commands (``create token``, ``create job --from``, ``auth can-i``, ``auth whoami``, ...)
send built-in kinds as ``application/vnd.kubernetes.protobuf`` (client-go's typed clients default to it), so
the server must read that encoding (:mod:`gpuplan.sim.api.protobuf`). The tables come from the Kubernetes
sources: the ``generated.proto`` files (field numbers, message types, repeated, maps) and the Go types
(``json:"name,omitempty"`` tags and pointers, which decide which zero values JSON leaves out).

Run ``python -m gpuplan.sim.api.gen_protobuf K8S_API_DIR K8S_APIMACHINERY_DIR`` (checkouts of
github.com/kubernetes/api and github.com/kubernetes/apimachinery) after adding a built-in kind. Each message
becomes ``{field number: [json name, type, repeated, omit zero]}``; ``type`` is a scalar (``string``,
``int64``, ``bytes`` ...), a message name, or ``map:KEY:VALUE``.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

from gpuplan.sim.api.registry import Registry

OUTPUT = Path(__file__).parent / "protobuf_data" / "messages.json.gz"
_FIELD = re.compile(r"^\s*(optional|repeated)?\s*([\w.]+|map<[\w.]+,\s*[\w.]+>)\s+(\w+)\s*=\s*(\d+);")
_TAG = re.compile(r'json:"([^"]*)"[^`]*protobuf:"[^"]*name=(\w+)')
_EXTRA_ROOTS = (
    "k8s.io.api.authentication.v1.TokenRequest",
    "k8s.io.api.policy.v1.Eviction",
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
)
SCALARS = frozenset({"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float"})


def package_of(group: str) -> str:
    """The proto package of a built-in API group: ``batch`` -> k8s.io.api.batch.v1 (core for "")."""
    return "core" if not group else group.split(".")[0]


def parse_proto(text: str) -> tuple[str, dict[str, list[tuple[int, str, str, bool]]]]:
    """(package, {message: [(number, proto name, type, repeated)]}) of one generated.proto."""
    package = re.search(r"^package ([\w.]+);", text, re.M)
    assert package is not None
    pkg = package.group(1)
    messages: dict[str, list[tuple[int, str, str, bool]]] = {}
    current: list[tuple[int, str, str, bool]] | None = None
    for line in text.splitlines():
        start = re.match(r"^message (\w+) \{", line)
        if start:
            current = messages.setdefault(f"{pkg}.{start.group(1)}", [])
            continue
        if line.startswith("}"):
            current = None
            continue
        field = _FIELD.match(line)
        if current is not None and field:
            label, kind, name, number = field.groups()
            current.append((int(number), name, _qualify(kind, pkg), label == "repeated"))
    return pkg, messages


def _qualify(kind: str, pkg: str) -> str:
    if kind.startswith("map<"):
        key, value = (part.strip() for part in kind[4:-1].split(","))
        return f"map:{_qualify(key, pkg)}:{_qualify(value, pkg)}"
    if kind in SCALARS:
        return kind
    return kind[1:] if kind.startswith(".") else f"{pkg}.{kind}"


def parse_go_tags(text: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """{struct: {proto name: (json name, omit zero)}}: omitempty on a non-pointer field drops its zero."""
    structs: dict[str, dict[str, tuple[str, bool]]] = {}
    current: dict[str, tuple[str, bool]] | None = None
    for line in text.splitlines():
        start = re.match(r"^type (\w+) struct \{", line)
        if start:
            current = structs.setdefault(start.group(1), {})
            continue
        if line.startswith("}"):
            current = None
            continue
        tag = _TAG.search(line)
        if current is None or tag is None:
            continue
        json_name, _, options = tag.group(1).partition(",")
        go_type = line.split("`")[0].split()[-1]
        pointer = go_type.startswith("*")
        current[tag.group(2)] = (json_name, "omitempty" in options and not pointer)
    return structs


def build(api_dir: Path, machinery_dir: Path) -> dict[str, Any]:
    messages: dict[str, list[tuple[int, str, str, bool]]] = {}
    tags: dict[str, dict[str, tuple[str, bool]]] = {}
    for proto in [*api_dir.glob("*/*/generated.proto"), *machinery_dir.glob("pkg/**/generated.proto")]:
        pkg, found = parse_proto(proto.read_text())
        messages.update(found)
        for go_file in proto.parent.glob("*.go"):
            if go_file.name.endswith("_test.go") or go_file.name.startswith(("zz_", "generated")):
                continue
            for struct, fields in parse_go_tags(go_file.read_text()).items():
                tags.setdefault(f"{pkg}.{struct}", {}).update(fields)
    roots = [
        f"k8s.io.api.{package_of(rt.group)}.{rt.version}.{rt.kind}"
        for rt in Registry.builtin().all()
        if not rt.group.endswith("apiextensions.k8s.io")
    ]
    table: dict[str, Any] = {}
    pending = [name for name in [*roots, *_EXTRA_ROOTS] if name in messages]
    while pending:
        name = pending.pop()
        if name in table:
            continue
        entry: dict[str, Any] = {}
        for number, proto_name, kind, repeated in messages[name]:
            json_name, omit = tags.get(name, {}).get(proto_name, (proto_name, True))
            entry[str(number)] = [json_name, kind, repeated, omit]
            for part in kind.removeprefix("map:").split(":"):
                if part not in SCALARS and part in messages:
                    pending.append(part)
        table[name] = entry
    return table


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 64
    table = build(Path(argv[0]), Path(argv[1]))
    OUTPUT.parent.mkdir(exist_ok=True)
    data = json.dumps(table, sort_keys=True, separators=(",", ":")).encode()
    OUTPUT.write_bytes(gzip.compress(data, mtime=0))
    print(f"wrote {OUTPUT} ({len(table)} messages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
