"""A node's label writes go behind the loop (on the real control plane, through the API): until their answer
comes back the cache shows the node as it was. A GFD pod that restarts removes its labels and the new pod
writes them again; judged against the cache alone, the new pod's labels looked written already and were
never sent, so the node lost them while the removal landed."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from gpuplan.sim.kubelet import node_effects
from gpuplan.sim.kubelet.outcomes import NodeEffect

COUNT = "nvidia.com/gpu.count"


class LaggingLoop:
    """A loop whose cache never sees the writes it sends, which wait until :meth:`land`."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.node = {"metadata": {"name": "l40s", "labels": labels}}
        self.cache = SimpleNamespace(node=lambda name: self.node)
        self.store = SimpleNamespace(registry=SimpleNamespace(for_kind=lambda api, kind: object()))
        self.sent: list[tuple[Callable[[], Any], Callable[[], None]]] = []

    def write_behind(self, kind: str, key: Any, write: Callable[[], Any], done: Callable[[], None]) -> None:
        self.sent.append((write, done))

    def land(self) -> None:
        for _, done in self.sent:
            done()
        self.sent.clear()


def test_a_label_removed_and_written_again_before_the_removal_landed_is_sent_again() -> None:
    loop = LaggingLoop({COUNT: "2"})
    state = SimpleNamespace(labels={COUNT: "2"}, pending_labels={})
    gone = NodeEffect(labels={COUNT: None}, manager="gfd")
    back = NodeEffect(labels={COUNT: "2"}, manager="gfd")

    assert node_effects._apply_labels(loop, loop.node, gone, state)  # type: ignore[arg-type]
    assert state.pending_labels == {COUNT: None} and COUNT not in state.labels
    # the new pod's labels, while the cache still shows the old pod's: written, not taken as there
    assert node_effects._apply_labels(loop, loop.node, back, state)  # type: ignore[arg-type]
    assert len(loop.sent) == 2 and state.pending_labels == {COUNT: "2"}
    loop.land()
    assert state.pending_labels == {}
    # once landed, the same labels again are nothing to write
    assert not node_effects._apply_labels(loop, loop.node, back, state)  # type: ignore[arg-type]
