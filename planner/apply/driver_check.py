"""The driver's version gate, deferred until something in the cluster reports a driver version.

Nothing reports the driver version of a node but GPU Feature Discovery (the label
``nvidia.com/cuda.driver-version.full``, facts §4) and the DCGM exporter (``DCGM_FI_DRIVER_VERSION`` on its
samples, facts §6), and both come after the driver in the dependency graph. So a gpuplan-owned driver
installed from nothing, or an external driver checked before GFD runs, has no version to compare yet: the
driver's gate is then its rollout (every targeted node runs a Ready driver pod of the current template,
:func:`gpuplan.planner.health.gates.in_sync`), and the version is verified as soon as a source exists: at once
when GFD or an exporter already reports it, else after the component whose gate made one appear (GFD's labels,
the exporter's scrape). A source this apply is rolling out (its changes made, its gate not passed yet)
does not count until its gate passes: its labels or samples may still be the old pods' or only some nodes',
and the driver's gate must not come to wait on a rollout that its dependents' gates judge. A wrong version
there fails the apply, which rolls back as for any failed gate. If no
source ever appears in the apply, the walker says so as a warning: "driver version unverified".

Used by the apply walker (:mod:`gpuplan.planner.apply.walker`): :meth:`DriverVersionCheck.gates_now` filters
the driver's gates before its wait, :meth:`DriverVersionCheck.due` hands the deferred gate to the walker when
a source exists (once: the first caller takes it, under a lock, as components run in parallel).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from gpuplan.errors import TransientProviderError
from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health import wait as health_wait
from gpuplan.providers.protocols import HealthReader

VERSION_GATE = "driver-version"
SOURCES = frozenset({"gfd", "dcgmExporter"})
"""The components that report a node's driver version (GFD's label, the exporter's samples)."""
UNVERIFIED = "driver version unverified: no GFD or DCGM exporter on these nodes"


class DriverVersionCheck:
    """The driver-version gate of one apply: pending until verified, or until the apply ends."""

    def __init__(self, checks: Mapping[str, Sequence[HealthCheck]], *, pending: bool) -> None:
        """``checks``: every component's gates; ``pending``: whether this apply verifies the driver version
        (it changes something; an apply with no work checks nothing)."""
        self.version_gates = tuple(c for c in checks.get("driver", ()) if c.kind == VERSION_GATE)
        # the exporter's scrape gate, so that a reading also scrapes DCGM's driver version on each node
        self.scrape_gates = tuple(c for c in checks.get("dcgmExporter", ()) if c.kind == "dcgm-metrics")
        self._pending = pending and bool(self.version_gates)
        self._lock = threading.Lock()
        self._rolling: set[str] = set()

    def rolling_out(self, component: str) -> None:
        """The walker starts ``component``'s changes: if it reports driver versions, it is no source until
        :meth:`settled`."""
        if component in SOURCES:
            with self._lock:
                self._rolling.add(component)

    def settled(self, component: str) -> None:
        """``component``'s gates passed: what it reports counts again."""
        with self._lock:
            self._rolling.discard(component)

    @property
    def timeout(self) -> float:
        """The driver's healthTimeoutSeconds (not the exporter's, whose scrape gate may join the wait)."""
        seconds: float = health_wait.component_timeout(self.version_gates)
        return seconds

    @property
    def pending(self) -> bool:
        return self._pending

    def gates_now(
        self,
        component: str,
        gates: Sequence[HealthCheck],
        provider: HealthReader,
        options: health_wait.WaitOptions,
    ) -> tuple[HealthCheck, ...]:
        """The gates ``component`` waits for now: the driver's without its version gate while nothing reports
        a version (the walker verifies it later, :meth:`due`)."""
        if component != "driver" or not self._pending:
            return tuple(gates)
        extra = self._source(provider, options)
        if extra is not None:
            with self._lock:
                self._pending = False
            return tuple(gates) + extra
        return tuple(gate for gate in gates if gate.kind != VERSION_GATE)

    def due(self, provider: HealthReader, options: health_wait.WaitOptions) -> tuple[HealthCheck, ...] | None:
        """The gates that verify the driver version now that a source reports it; None while none does or
        once another caller took them."""
        if not self._pending:
            return None
        extra = self._source(provider, options)
        if extra is None:
            return None
        with self._lock:
            if not self._pending:
                return None
            self._pending = False
        return self.version_gates + extra

    def _source(
        self, provider: HealthReader, options: health_wait.WaitOptions
    ) -> tuple[HealthCheck, ...] | None:
        """None when nothing reports a driver version on the nodes the driver targets; else the gates the
        verification needs beside the version gate: none for GFD's label, the exporter's scrape gate when
        only DCGM reports it (so that each reading scrapes the exporter)."""
        with self._lock:
            rolling = set(self._rolling)
        try:
            if "gfd" not in rolling:
                labels = health_wait.observe(self.version_gates, provider, options)
                if health_nodes.driver_reported(labels):
                    return ()
            if not self.scrape_gates or "dcgmExporter" in rolling:
                return None
            scraped = health_wait.observe(self.version_gates + self.scrape_gates, provider, options)
        except TransientProviderError:  # the cluster did not answer: ask again after the next component
            return None
        return self.scrape_gates if health_nodes.driver_reported(scraped) else None
