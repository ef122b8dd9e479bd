"""What the tests of a state in the cluster share: watching its Lease with the real kubectl, and a run that
holds its lock in a process of its own (to be killed, or to let go when told).

Imported as ``from team_state import ...`` (tests/conftest.py puts tests/ on ``sys.path``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.sim.testing import kubectl_binary

HOLDER = """
import sys
from gpuplan.providers.state_secret import KubernetesStateBackend
from gpuplan.state.location import parse_location
location = parse_location(sys.argv[2], lease_seconds=int(sys.argv[3]))
backend = KubernetesStateBackend(location, kubeconfig=sys.argv[1])
print(backend.lock("apply").id, flush=True)
sys.stdin.read()
backend.close()
"""


def watch_lease(
    kubeconfig: Path, namespace: str, name: str, until: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """``kubectl get leases -w`` (by name, so from before the Lease exists) until ``until`` holds for it."""
    argv = [
        kubectl_binary(),
        f"--kubeconfig={kubeconfig}",
        "get",
        "leases",
        "-n",
        namespace,
        "-w",
        "-o",
        "json",
    ]
    watch = subprocess.Popen(
        [*argv, f"--field-selector=metadata.name={name}"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert watch.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in watch.stdout:
            buffer += line
            try:
                seen, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                continue
            buffer = buffer.lstrip()[end:]
            for lease in seen.get("items", []) if seen.get("kind") == "List" else [seen]:
                if until(lease):
                    found: dict[str, Any] = lease
                    return found
        raise AssertionError(f"the watch of Lease {namespace}/{name} ended before it was as awaited")
    finally:
        watch.kill()
        watch.wait(timeout=30)
        if watch.stdout is not None:
            watch.stdout.close()


@dataclass
class Holder:
    """A run holding the state's lock: its process and the lock ID it took."""

    process: subprocess.Popen[str]
    lock_id: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def release(self) -> int:
        """Let the run unlock and end; its exit code."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=60)


@contextmanager
def holding(kubeconfig: Path, url: str, *, lease_seconds: int = 60) -> Iterator[Holder]:
    """A process that locks the state at ``url`` and holds it until released, killed or the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(kubeconfig), url, str(lease_seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield Holder(process, process.stdout.readline().strip())
    finally:
        process.kill()
        process.wait(timeout=60)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
