"""The kubelet's pulls that cannot succeed: ErrImagePull, then ImagePullBackOff.

A pod whose image tag the registry lacks (:func:`gpuplan.sim.kubelet.image_catalog.exists`) fails its first
pull with ErrImagePull (``rpc error: code = NotFound ...: not found``); the kubelet then backs off and shows
ImagePullBackOff (``Back-off pulling image "...": ErrImagePull: ...``) from the next sync on, as
pkg/kubelet/images/image_manager.go does. Here the back-off step comes after the runtime's first back-off
delay (``timing.crashLoopBackoffSeconds``, the kubelet's 10 s scaled down) and the pod stays in
ImagePullBackOff: the tag never appears. A pull from a registry the node cannot reach
(``registry_network``, the scenario node's ``unreachableRegistries``) goes the same way with the network's
error, whatever the tag. Explicit image faults (``faults.images``) take precedence.

The two states reach the pure rules as image faults of internal kinds (``image_catalog.NOT_FOUND`` and
``NOT_FOUND_BACK_OFF``, ``registry_network.UNREACHABLE`` and ``UNREACHABLE_BACK_OFF``), which
``checks.image_failure`` words. Owned by the kubelet runtime, on the loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from gpuplan.sim.controllers.cache import Key
from gpuplan.sim.controllers.loop import Loop, Timer
from gpuplan.sim.kubelet import registry_network
from gpuplan.sim.kubelet.image_catalog import NOT_FOUND, NOT_FOUND_BACK_OFF, exists


class ImagePulls:
    """Per pod: whether a pull of a missing image has failed once and the kubelet is backing off."""

    def __init__(self, loop: Loop, back_off_seconds: Callable[[], float]) -> None:
        self.loop = loop
        self._back_off_seconds = back_off_seconds
        self._backing_off: set[Key] = set()
        self._timers: dict[Key, Timer] = {}

    def faults(
        self,
        key: Key,
        images: Iterable[str],
        explicit: Mapping[str, str],
        unreachable: Collection[str] = frozenset(),
    ) -> Mapping[str, str]:
        """``explicit`` plus the pod's images that cannot be pulled (from a registry in ``unreachable``, or
        a tag the registry does not have), in their current pull state."""
        backing_off = key in self._backing_off
        failing = {}
        for image in images:
            if image in explicit:
                continue
            if registry_network.unreachable(image, unreachable):
                failing[image] = (
                    registry_network.UNREACHABLE_BACK_OFF if backing_off else registry_network.UNREACHABLE
                )
            elif not exists(image):
                failing[image] = NOT_FOUND_BACK_OFF if backing_off else NOT_FOUND
        return {**explicit, **failing} if failing else explicit

    def pulled(
        self,
        key: Key,
        images: Iterable[str],
        explicit: Mapping[str, str],
        again: Callable[[], None],
        unreachable: Collection[str] = frozenset(),
    ) -> None:
        """After an evaluation: a first failed pull starts the back-off; ``again`` re-evaluates the pod."""
        missing = any(
            image not in explicit and (registry_network.unreachable(image, unreachable) or not exists(image))
            for image in images
        )
        if not missing:
            self.forget(key)
            return
        if key in self._backing_off or key in self._timers:
            return

        def back_off() -> None:
            self._timers.pop(key, None)
            self._backing_off.add(key)
            again()

        self._timers[key] = self.loop.call_later(self._back_off_seconds(), back_off)

    def forget(self, key: Key) -> None:
        self._backing_off.discard(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
