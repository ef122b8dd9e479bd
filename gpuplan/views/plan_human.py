"""The human plan, in Terraform's shape, rendered from the plan's JSON document (never from the Plan object).

Rendering from :meth:`gpuplan.planner.plan.build.Plan.document` (what ``--json`` prints) means the two views
cannot disagree (Terraform renders its human plan from jsonplan the same way). Sections, in order: the header
and the components (owners, versions with "(default)" where the spec left them out, the verification of
external components), the GPUs by the source that identified them (GFD labels, NFD NodeFeature), the drift
block ("Objects have changed outside gpuplan"), the differences ``spec.ignore`` declares (kept, never
silent), the actions per component in
graph order (``+`` create, ``~`` update, ``-/+`` replace, ``-`` destroy, ``<=`` adopt; per field ``path:
before -> after``, the reason, the nodes, the GPU pods a driver change evicts per node, and a change's note
when it cannot be undone in place), conflicts with their resolutions, findings, and the summary line (with one
line counting the changes that cannot be undone in place, so a destroy plan's end stays short before the
prompt).

Callers: the ``plan`` and ``show`` commands. Colour comes from a :class:`~gpuplan.views.colour.Palette`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuplan.planner.plan.model import ABSENT_TEXT, capacity_line
from gpuplan.views import gpu_sources
from gpuplan.views.colour import PLAIN, Palette
from gpuplan.views.layout import fit, terminal_width, wrap

SYMBOLS = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "adopt": "<="}
LEGEND = {
    "create": "create",
    "update": "update in-place",
    "replace": "destroy and then create replacement",
    "delete": "destroy",
    "adopt": "adopt into the state (recorded, not recreated)",
}
NODE_NAMES_SHOWN = 3
POD_NAMES_SHOWN = 5
"""GPU pod names shown per node under a driver change; the JSON has them all."""
VALUE_WIDTH = 100
TEXT_WHOLE = 40
"""A multi-line text (a ConfigMap's YAML file) up to this many lines is shown whole, every parent key of a
change with it; a longer one shows TEXT_CONTEXT unchanged lines around each change."""
TEXT_CONTEXT = 3
Doc = Mapping[str, Any]


def summary_line(document: Doc) -> str:
    """``Plan: N to add, N to change, N to replace, N to destroy.`` (adopt first when there is any)."""
    counts = document.get("summary") or {}
    adopt = f"{counts.get('adopt', 0)} to adopt, " if counts.get("adopt") else ""
    return (
        f"Plan: {adopt}{counts.get('create', 0)} to add, {counts.get('update', 0)} to change, "
        f"{counts.get('replace', 0)} to replace, {counts.get('delete', 0)} to destroy."
    )


def value(text: Any) -> str:
    """A field value on one line: JSON, shortened in the middle when long."""
    rendered = "(absent)" if text is None else json.dumps(text, ensure_ascii=False, separators=(", ", ": "))
    if len(rendered) > VALUE_WIDTH:
        rendered = rendered[: VALUE_WIDTH - 20] + " ... " + rendered[-15:]
    return rendered


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def node_list(names: Sequence[str]) -> str:
    count = len(names)
    shown = ", ".join(names[:NODE_NAMES_SHOWN])
    more = f" and {count - NODE_NAMES_SHOWN} more" if count > NODE_NAMES_SHOWN else ""
    return f"{_count(count, 'node')} ({shown}{more})"


def render(document: Doc, *, palette: Palette = PLAIN, width: int | None = None) -> str:
    """The whole human plan, as text ending in a newline, its lines wrapped to ``width`` (default: the
    terminal's)."""
    width = width or terminal_width()
    sections = [
        fit(_header(document, palette), width),
        _components(document, palette, width),
        fit(_gpus(document), width),
        fit(_pools(document, palette), width),
        fit(_drift(document, palette), width),
        fit(_ignored(document, palette), width),
        fit(_actions(document, palette), width),
        _conflicts(document, palette, width),
        fit(_findings(document, palette), width),
        fit(_outcome(document, palette), width),
    ]
    return "\n\n".join(section for section in sections if section) + "\n"


def _header(document: Doc, palette: Palette) -> str:
    serial = f"state serial {document['state_serial']}" if document.get("state_lineage") else "no state yet"
    lines = [
        palette.bold(f"gpuplan plan for stack {document['stack']}")
        + f" (namespace {document['namespace']}; {_count(document['nodes_total'], 'node')}, "
        f"{document['gpu_nodes']} with NVIDIA GPUs; {serial}; {document['api_requests']} API requests)"
    ]
    if document.get("destroy"):
        lines.append(palette.yellow("Destroy plan: every object of the stack is removed."))
    if document.get("targets"):
        lines.append(
            palette.yellow(
                f"Targeted plan (--target {', '.join(document['targets'])}, with their "
                "dependencies): incomplete; other components were not planned."
            )
        )
    if not document.get("namespace_exists") and not document.get("destroy"):
        lines.append(f"Note: namespace {document['namespace']} does not exist yet; apply creates it first.")
    return "\n".join(lines)


def _components(document: Doc, palette: Palette, fit_to: int) -> str:
    components: Mapping[str, Doc] = document.get("components") or {}
    if not components:
        return ""
    width = max(len(name) for name in components)
    lines = [palette.bold("Components:")]
    for name, status in components.items():
        version = status.get("version") or ""
        if version and status.get("version_default"):
            version += " (default)"
        if version and name == "driver" and status.get("owner") == "external":
            version = f"expected {version}"  # the version the nodes must report, whatever they report now
        state = status.get("status", "")
        paint = {
            "verified": palette.green,
            "in-sync": palette.green,
            "mismatch": palette.red,
            "conflict": palette.red,
            "unknown": palette.yellow,
            "partial": palette.yellow,
        }.get(state, str)
        line = f"  {name:<{width}}  {status.get('owner', ''):<8}  {paint(state)}"
        detail = "; ".join(part for part in (version, status.get("detail")) if part)
        lines += wrap(line + (f": {detail}" if detail else ""), fit_to, hang=width + 14)  # under the status
    return "\n".join(lines)


def _gpus(document: Doc) -> str:
    """Per source and GPU model, the nodes it identified (the compatibility rules ran on these)."""
    rows: Sequence[Doc] = document.get("node_gpus") or []
    if not rows:
        return ""
    groups = gpu_sources.grouped(rows)
    width = max(len(source) for source, _, _ in groups)
    lines = ["GPUs, by the source that identified them:"]
    lines += [
        f"  {source:<{width}}  {gpu + ': ' if gpu else ''}{node_list(nodes)}" for source, gpu, nodes in groups
    ]
    return "\n".join(lines)


def _pools(document: Doc, palette: Palette) -> str:
    """Each node pool: its nodes, its own objects, its capacity change and the node labels apply writes."""
    pools: Mapping[str, Sequence[str]] = document.get("pools") or {}
    labels = [item for item in document.get("node_labels") or [] if item.get("before")]
    capacity: Sequence[Doc] = document.get("capacity") or []
    if not pools and not labels and not capacity:
        return ""
    lines = [palette.bold("Node pools:" if pools or labels else "Capacity:")]
    pending = [c for c in document.get("changes") or [] if c["action"] != "no-op"]
    for pool, nodes in pools.items():
        lines.append(f"  {pool}: {node_list(list(nodes)) if nodes else 'no node matches its nodeSelector'}")
        own = [c for c in pending if c["address"].endswith(f"-{pool}") and c["kind"] == "DaemonSet"]
        lines += [f"    {_painter(c['action'], palette)(c['action'])} {c['address']}" for c in own]
        lines += [f"    capacity: {capacity_line(c, pool=False)}" for c in capacity if c["pool"] == pool]
        lines += [f"    {_labels_line(item)}" for item in labels if item.get("pool") == pool]
    # the nodes of no pool: a stack-wide sharing or MIG change, and the stack's own labels
    lines += [f"  (no pool): capacity: {capacity_line(c, pool=False)}" for c in capacity if not c.get("pool")]
    lines += [f"  (no pool): {_labels_line(item)}" for item in labels if item.get("pool") is None]
    return "\n".join(lines)


def _labels_line(item: Doc) -> str:
    nodes = sorted(item.get("before") or {})
    if item.get("value") is None:
        return f"remove label {item['label']} from {node_list(nodes)}"
    return f"label {node_list(nodes)} {item['label']}={item['value']}"


def _fields(item: Doc, palette: Palette, *, drift: bool) -> list[str]:
    return [line for field in item.get("fields") or [] for line in _field_lines(field, palette, drift=drift)]


def _field_lines(field: Doc, palette: Palette, *, drift: bool) -> list[str]:
    """``path: before -> after``, or for a multi-line text (the YAML file a ConfigMap carries) the path and
    then the text's lines as a diff, so the change is read where it is, not in a value cut in the middle."""
    before, after = field.get("before"), field.get("after")
    managers = field.get("managers") or []
    by = palette.dim(f"  ({'changed' if drift else 'drifted'} by {', '.join(managers)})") if managers else ""
    if not (_multiline(before) or _multiline(after)) or not all(
        isinstance(side, str) or side is None for side in (before, after)
    ):
        return [f"      {field['path']}: {value(before)} -> {value(after)}{by}"]
    return [f"      {field['path']}:{by}", *text_diff(before or "", after or "", palette)]


def _multiline(text: Any) -> bool:
    return isinstance(text, str) and "\n" in text.rstrip("\n")


def text_diff(before: str, after: str, palette: Palette = PLAIN, *, indent: str = "          ") -> list[str]:
    """The lines of ``before`` and ``after`` as a diff: ``-`` removed, ``+`` added, the unchanged ones (all of
    them up to TEXT_WHOLE lines, else TEXT_CONTEXT around each change and ``...`` for the rest)."""
    old, new = before.splitlines(), after.splitlines()
    context = max(len(old), len(new)) if max(len(old), len(new)) <= TEXT_WHOLE else TEXT_CONTEXT
    groups = list(difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_grouped_opcodes(context))
    lines: list[str] = []
    for number, group in enumerate(groups):
        if number or group[0][1] > 0:
            lines.append(f"{indent}  ...")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [f"{indent}  {line}" for line in old[i1:i2]]
                continue
            lines += [palette.red(f"{indent}- {line}") for line in old[i1:i2]]
            lines += [palette.green(f"{indent}+ {line}") for line in new[j1:j2]]
    if groups and groups[-1][-1][2] < len(old):
        lines.append(f"{indent}  ...")
    return lines


def _ignored(document: Doc, palette: Palette) -> str:
    """The differences ``spec.ignore`` declares: listed so they are never silent, and left as they are."""
    ignored: Sequence[Doc] = document.get("ignored") or []
    if not ignored:
        return ""
    lines = [
        palette.bold(
            "Ignored (spec.ignore): these differences are declared, so the plan keeps them as they are:"
        ),
        "",
    ]
    for item in ignored:
        lines.append(palette.dim(f"  = {item['address']}") + f"  (paths: {', '.join(item['paths'])})")
        lines += _fields(item, palette, drift=True)
    return "\n".join(lines)


def _drift(document: Doc, palette: Palette) -> str:
    drift: Sequence[Doc] = document.get("drift") or []
    if not drift:
        return ""
    lines = [
        palette.bold(palette.yellow("Note: Objects have changed outside gpuplan")),
        "",
        "gpuplan detected the following changes made outside gpuplan since it last recorded these objects:",
        "",
    ]
    for item in drift:
        if item["status"] == "deleted":
            lines.append(palette.red(f"  - {item['address']}") + " was deleted outside gpuplan")
            continue
        lines.append(palette.yellow(f"  ~ {item['address']}"))
        lines += _fields(item, palette, drift=True)
    lines.append("")
    if document.get("refresh_only"):
        lines.append(
            "This is a refresh-only plan, so gpuplan will not take any actions to undo these. If you "
            "expected these changes, applying this plan records them in the state without changing the "
            "cluster (apply of refresh-only plans comes with `gpuplan apply`)."
        )
    else:
        lines.append(
            "Unless you have made equivalent changes to the configuration, the plan below reverts them."
        )
    return "\n".join(lines)


def _images(change: Doc) -> list[str]:
    manifest = change.get("after") or change.get("before") or {}
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [
        str(container.get("image")) for container in pod.get("containers") or [] if container.get("image")
    ]


def _painter(action: str, palette: Palette) -> Callable[[str], str]:
    return {
        "create": palette.green,
        "update": palette.yellow,
        "replace": palette.red,
        "delete": palette.red,
        "adopt": palette.cyan,
    }.get(action, str)


def _change_lines(change: Doc, component: Doc, palette: Palette) -> list[str]:
    action = change["action"]
    lines = [_painter(action, palette)(f"  {SYMBOLS[action]} {change['address']}")]
    if not _goes_without_saying(change):
        lines.append(palette.dim(f"      # {change['reason_text']}"))
    if change.get("replaces"):
        lines.append(f"      replaces: {change['replaces']}")
    if action in ("create", "replace", "adopt"):
        for image in _images(change):
            default = component.get("version_default") and image == component.get("image")
            lines.append(f"      image: {image}" + (" (default)" if default else ""))
    lines += _fields(change, palette, drift=False)
    if change.get("nodes"):
        lines.append(f"      nodes: {node_list(change['nodes'])}")
    if change.get("disruptive"):
        lines.append(palette.red(f"      ! disruptive: {change['disruption']}"))
        lines += gpu_pod_lines(change)
    if change.get("undo"):
        lines.append(palette.red(f"      ! {change['undo']}"))
    return lines


def _goes_without_saying(change: Doc) -> bool:
    """A create of an object that does not exist yet: the ``+`` says all its reason would."""
    return change["action"] == "create" and change.get("reason_text") == ABSENT_TEXT


def gpu_pod_lines(change: Doc) -> list[str]:
    """Under a disruptive driver change, one line per node with GPU pods ("evicts on node-1: ns/a, ns/b" for
    an update or an adopt that sets fields, or "GPU pods on node-1: ..." for a delete or replace, which evicts
    nothing), one line for the nodes read without any, and the plan's note on what it did not read. Nothing
    for a plan made without the reads (a saved plan of an older gpuplan)."""
    pods: Mapping[str, Sequence[str]] | None = change.get("gpu_pods")
    if pods is None:  # not read: an older saved plan (no note), or a reader that may not list pods (a note)
        return [f"        {change['gpu_pods_note']}"] if change.get("gpu_pods_note") else []
    # an update or an adopt that sets fields goes through the node-by-node rollout, which evicts first
    rolled = change["action"] in ("update", "adopt") and change.get("component") == "driver"
    verb = "evicts on" if rolled else "GPU pods on"  # a MIG change repartitions the GPUs under its pods
    lines = []
    for node, names in pods.items():
        if names:
            more = f" and {len(names) - POD_NAMES_SHOWN} more" if len(names) > POD_NAMES_SHOWN else ""
            lines.append(f"        {verb} {node}: {', '.join(names[:POD_NAMES_SHOWN])}{more}")
    empty = [node for node, names in pods.items() if not names]
    if empty:
        lines.append(f"        no GPU pods on {', '.join(empty)}")
    if change.get("gpu_pods_note"):
        lines.append(f"        {change['gpu_pods_note']}")
    # said here, not first at apply: the rollout would stop at the pod with its node cordoned
    blocked: Mapping[str, str] = change.get("gpu_pods_blocked") or {}
    lines += [f"        ! blocks the rollout: {why}" for why in blocked.values()]
    return lines


def _actions(document: Doc, palette: Palette) -> str:
    changes = [change for change in document.get("changes") or [] if change["action"] != "no-op"]
    if not changes:
        return ""
    used = [action for action in SYMBOLS if any(change["action"] == action for change in changes)]
    lines = [
        "gpuplan will perform the following actions. Resource actions are indicated with the following "
        "symbols:"
    ]
    lines += [f"  {_painter(action, palette)(SYMBOLS[action]):<3} {LEGEND[action]}" for action in used]
    components: Mapping[str, Doc] = document.get("components") or {}
    seen: list[str] = []
    for change in changes:  # changes come in apply order: graph order, deletions last in reverse
        if change["component"] not in seen:
            seen.append(change["component"])
    for name in seen:
        status = components.get(name) or {}
        heading = f"# {name} (owner {status.get('owner', '?')}"
        heading += f", {status['image']})" if status.get("image") else ")"
        lines += ["", palette.bold(heading)]
        for change in changes:
            if change["component"] == name:
                lines += _change_lines(change, status, palette)
    return "\n".join(lines)


def _conflicts(document: Doc, palette: Palette, width: int) -> str:
    """The conflicts, wrapped but for the resolving commands, which stay whole to be copied."""
    conflicts: Sequence[Doc] = document.get("conflicts") or []
    if not conflicts:
        return ""
    lines = wrap(
        palette.bold(palette.red("Conflicts:")) + " other owners already run components gpuplan is to own. "
        "This plan can be shown and saved, but apply refuses it until they are resolved.",
        width,
    )
    if any(conflict.get("owner_kind") == "gpu-operator" for conflict in conflicts):
        # said once for all of the operator's objects: the one way out that keeps their pods running
        lines += [
            "",
            *wrap(
                "  The GPU Operator's: `gpuplan takeover` hands the GPU Operator's components over to "
                "gpuplan in place (no pod deleted; `gpuplan rollback` gives them back):",
                width,
            ),
            f"        gpuplan takeover -f {document.get('spec_file') or 'SPEC'}",
        ]
    for conflict in conflicts:
        where = (
            f"{conflict['namespace']}/{conflict['name']}" if conflict.get("namespace") else conflict["name"]
        )
        lines += [
            "",
            *wrap(
                f"  {conflict['component']}: {conflict['kind']} {where} already runs it "
                f"(owner: {conflict['owner']})",
                width,
            ),
            "    Resolve it with one of:",
        ]
        for resolution in conflict.get("resolutions") or []:
            lines += [*wrap(f"    - {resolution['summary']}:", width), f"        {resolution['command']}"]
    return "\n".join(lines)


def _findings(document: Doc, palette: Palette) -> str:
    findings: Sequence[Doc] = document.get("findings") or []
    if not findings:
        return ""
    lines = [palette.bold("Findings:")]
    for finding, nodes in group_findings(findings):
        label = palette.red("Error") if finding["severity"] == "error" else palette.yellow("Warning")
        scope = finding_scope(finding, nodes)
        lines.append(f"  {label}: {scope + ': ' if scope else ''}{finding['message']}")
        if finding.get("hint"):
            lines.append(f"    Hint: {finding['hint']}")
    return "\n".join(lines)


def finding_scope(finding: Doc, nodes: Sequence[str]) -> str:
    """``devicePlugin, on 3 nodes: a, b, c``: the component and the nodes a (grouped) finding is about."""
    where = (f"node {nodes[0]}" if len(nodes) == 1 else f"on {names_shown(nodes)}") if nodes else None
    return ", ".join(part for part in (finding.get("component"), where) if part)


def group_findings(findings: Sequence[Doc]) -> list[tuple[Doc, list[str]]]:
    """Findings that differ only by node, as one finding and its nodes (in first-seen order): a fleet whose
    200 nodes all lack GFD shows one warning "on 200 nodes: ...", not 200 lines. The JSON stays per node."""
    groups: dict[tuple[Any, ...], tuple[Doc, list[str]]] = {}
    for finding in findings:
        key = (
            finding["severity"],
            finding.get("component"),
            finding["message"],
            finding.get("hint"),
            finding.get("node") is None,
        )
        _, nodes = groups.setdefault(key, (finding, []))
        if finding.get("node"):
            nodes.append(str(finding["node"]))
    return list(groups.values())


def names_shown(names: Sequence[str]) -> str:
    """``200 nodes: gpu-0001, gpu-0002, gpu-0003 and 197 more``."""
    more = f" and {len(names) - NODE_NAMES_SHOWN} more" if len(names) > NODE_NAMES_SHOWN else ""
    return f"{_count(len(names), 'node')}: {', '.join(names[:NODE_NAMES_SHOWN])}{more}"


def _outcome(document: Doc, palette: Palette) -> str:
    pending = [change for change in document.get("changes") or [] if change["action"] != "no-op"]
    labels = [item for item in document.get("node_labels") or [] if item.get("before")]
    if document.get("refresh_only"):
        line = (
            f"Refresh-only plan: {len(document.get('drift') or [])} object(s) changed outside gpuplan; no "
            "actions."
            if document.get("drift")
            else "No changes. The state matches the cluster: nothing changed outside gpuplan."
        )
    elif pending:
        line = palette.bold(summary_line(document))
    elif labels:
        line = palette.bold(f"Plan: {_count(len(labels), 'node label change')} (see the node pools).")
    else:
        line = palette.green("No changes. The cluster matches the configuration.")
    lines = [line]
    not_in_place = sum(1 for change in pending if change.get("undo"))
    if not_in_place and not document.get("refresh_only"):
        # every note is beside its change above; the lines before the prompt only count them
        lines.append(
            palette.red(
                f"{_count(not_in_place, 'change')} cannot be undone in place (the ! notes "
                "above): a rollback recreates those objects as new objects, with new uids."
            )
        )
    if not document.get("applicable", True):
        lines.append(palette.red("This plan cannot be applied:"))
        lines += [f"  - {blocker}" for blocker in document.get("blockers") or []]
    return "\n".join(lines)
