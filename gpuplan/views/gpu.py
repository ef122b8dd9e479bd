"""How every human view names a GPU and its memory, and says a yes or no.

One form everywhere, so that ``gpuplan inventory``, the drift report and the demo agree: the name is GFD's
product label (``nvidia.com/gpu.product``, e.g. ``NVIDIA-GeForce-RTX-3060``; an NVML name such as
``NVIDIA GeForce RTX 3060`` becomes that label as GFD makes it, spaces to dashes), the memory is in GiB
(``12 GiB``, ``79.6 GiB``) from the MiB the documents keep. The JSON documents keep their own keys and
numbers.
"""

from __future__ import annotations

from typing import NamedTuple

UNKNOWN = "unknown"


class GpuWords(NamedTuple):
    name: str
    memory: str


def gpu_words(product: str | None, memory_mib: float | None, *, unknown: str = UNKNOWN) -> GpuWords:
    """The name and memory of a GPU as the human views print them; ``unknown`` for what is not known."""
    return GpuWords(
        product_label(product) if product else unknown,
        f"{gib(memory_mib)} GiB" if memory_mib else unknown,
    )


def product_label(name: str) -> str:
    """GFD's ``nvidia.com/gpu.product`` for a GPU name: the name with its spaces as dashes."""
    return "-".join(name.split())


def gib(mib: float) -> str:
    """MiB as GiB: whole when whole (12288 -> ``12``), else one decimal (81559 -> ``79.6``)."""
    value = round(mib / 1024, 1)
    return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"


def cell(value: object) -> str:
    """A table cell: a boolean as ``yes``/``no`` (never Python's True/False), anything else as text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
