"""The cluster state backend on the simulated API server: Secret ``gpuplan-state-<name>`` (gzip, labelled,
split into ``-part-N`` past 1 MiB) and Lease ``gpuplan-lock-<name>`` (design §7.2).

Round trips, the Secret's shape and content (no credential in it), a state past 1 MiB split and joined, a
writer that dies between its parts and its main Secret leaving the committed state whole, two writers racing
on one resourceVersion (one wins, the other gets a clear error and nothing of it is kept), the Lease's holder,
renewal, release and force-unlock, and a holder killed with ``kill -9`` whose Lease expires and is taken over
with a Note.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from team_state import holding, watch_lease

from gpuplan.errors import StateError, StateLockedError
from gpuplan.providers import state_secret
from gpuplan.providers.state_secret import KubernetesStateBackend
from gpuplan.sim.testing import Kubectl
from gpuplan.state.location import KubernetesLocation, kubernetes_location
from gpuplan.state.model import ResourceRecord, StateFile, make_address

NAMESPACE = "default"


def _location(name: str = "team", lease_seconds: int = 60) -> KubernetesLocation:
    return kubernetes_location(NAMESPACE, name, lease_seconds=lease_seconds)


def _backend(kubeconfig: Path, location: KubernetesLocation | None = None) -> KubernetesStateBackend:
    return KubernetesStateBackend(location or _location(), kubeconfig=str(kubeconfig))


def _record(name: str, payload: str = "x", kind: str = "ConfigMap") -> ResourceRecord:
    owned: dict[str, Any] = {"data": {"payload": payload}}
    if kind == "Secret":
        owned = {"data": {"token": "sha256:" + "0" * 64}}  # a Secret's data only as digests
    return ResourceRecord(
        address=make_address("gfd", kind, "gpu-operator", name),
        component="gfd",
        api_version="v1",
        kind=kind,
        namespace="gpu-operator",
        name=name,
        owned=owned,
        applied_serial=1,
    )


def _secret(kubectl: Kubectl, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", "secret", "-n", NAMESPACE, name, "-o", "json").stdout)
    return found


def _big_state(megabytes: float) -> StateFile:
    """Random hex compresses to half: ``megabytes`` of it make a gzip payload of about half as much."""
    records = [_record(f"cm-{i:03d}", os.urandom(50_000).hex()) for i in range(int(megabytes * 10))]
    return StateFile.new().with_records(records).next_serial()


def test_a_state_round_trips_through_one_labelled_gzip_secret_without_credentials(
    kubeconfig: Path, kubectl: Kubectl
) -> None:
    backend = _backend(kubeconfig)
    assert backend.read() is None
    state = StateFile.new().with_records([_record("cm"), _record("token", kind="Secret")]).next_serial()
    backend.write(state)
    assert backend.read() == state
    secret = _secret(kubectl, "gpuplan-state-team")
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplan"
    assert secret["metadata"]["annotations"]["gpuplan.io/encoding"] == "gzip"
    assert secret["metadata"]["annotations"]["gpuplan.io/parts"] == "1"
    document = json.loads(gzip.decompress(base64.b64decode(secret["data"]["state"])))
    assert document["lineage"] == state.lineage and document["serial"] == 1
    # the Secret record holds a digest where the object held its token; no key of the Secret reads as one
    assert document["resources"][make_address("gfd", "Secret", "gpu-operator", "token")]["owned"] == {
        "data": {"token": "sha256:" + "0" * 64}
    }
    same = state.next_serial()  # the same content at a higher serial: a no-op write, as for the file
    backend.write(same)
    assert (
        _secret(kubectl, "gpuplan-state-team")["metadata"]["resourceVersion"]
        == (secret["metadata"]["resourceVersion"])
    )


def test_a_state_past_1_mib_is_split_into_parts_and_joined_and_the_parts_go_when_it_shrinks(
    kubeconfig: Path, kubectl: Kubectl
) -> None:
    backend = _backend(kubeconfig)
    big = _big_state(4.0)  # about 2 MiB of gzip: the main Secret and two parts
    backend.write(big)
    main = _secret(kubectl, "gpuplan-state-team")
    parts = int(main["metadata"]["annotations"]["gpuplan.io/parts"])
    assert parts >= 2
    for index in range(1, parts):
        assert (
            _secret(kubectl, f"gpuplan-state-team-part-{index}")["metadata"]["labels"][
                "app.kubernetes.io/managed-by"
            ]
            == "gpuplan"
        )
    assert _backend(kubeconfig).read() == big  # a fresh backend joins the parts
    small = big.without(*list(big.resources)[1:]).next_serial()
    backend.write(small)
    assert backend.read() == small
    listed = kubectl("get", "secrets", "-n", NAMESPACE, "-o", "name").stdout.split()
    assert [name for name in listed if "part" in name] == []


def test_the_api_server_refuses_a_secret_past_1_mib_as_a_real_one_does(kubectl: Kubectl) -> None:
    data = base64.b64encode(b"\0" * (1024 * 1024 + 1)).decode()
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "huge"}, "data": {"blob": data}}
    result = kubectl("create", "-n", NAMESPACE, "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode == 1
    assert 'Secret "huge" is invalid: data: Too long: may not be more than 1048576 bytes' in result.stderr


def test_a_writer_that_dies_between_its_parts_and_its_main_secret_leaves_the_committed_state(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(kubeconfig)
    committed = _big_state(4.0)
    backend.write(committed)

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed before the main Secret")

    monkeypatch.setattr(KubernetesStateBackend, "_write_main", killed)
    with pytest.raises(KeyboardInterrupt):
        backend.write(committed.with_record(_record("cm-000", os.urandom(50_000).hex())).next_serial())
    monkeypatch.undo()
    assert _backend(kubeconfig).read() == committed  # every part still holds the committed chunk
    later = committed.with_record(_record("extra")).next_serial()
    backend.write(later)  # and the next writer goes on from it
    assert _backend(kubeconfig).read() == later


def test_two_writers_racing_on_one_resource_version_never_lose_an_update(kubeconfig: Path) -> None:
    first, second = _backend(kubeconfig), _backend(kubeconfig)
    base = StateFile.new().with_record(_record("base")).next_serial()
    first.write(base)
    seen_by_first, seen_by_second = first.snapshot(), second.snapshot()  # both read resourceVersion R
    ours = base.with_record(_record("from-second")).next_serial()
    second.commit(seen_by_second, ours)
    with pytest.raises(StateError) as lost:
        first.commit(seen_by_first, base.with_record(_record("from-first")).next_serial())
    assert "the state was not written" in lost.value.summary
    assert "another writer stored serial 2" in lost.value.summary
    assert first.read() == ours  # the winner's state stands whole


def test_writers_in_threads_that_retry_their_lost_races_lose_no_update(kubeconfig: Path) -> None:
    """Each writer adds its record from what it read; a refused write starts again from the stored state.
    Without the resourceVersion precondition, a write made from a stale read would drop another's record."""
    _backend(kubeconfig).write(StateFile.new().next_serial())
    start = threading.Barrier(4)

    def writer(n: int) -> None:
        backend = _backend(kubeconfig)
        start.wait(timeout=30)
        while True:
            seen = backend.snapshot()
            assert seen.state is not None
            try:
                backend.commit(seen, seen.state.with_record(_record(f"from-{n}")).next_serial())
                return
            except StateError:
                continue  # another writer won this round: read again

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    final = _backend(kubeconfig).read()
    assert final is not None
    assert sorted(record.name for record in final.resources.values()) == [f"from-{n}" for n in range(4)]
    assert final.serial == 1 + 4  # one generation per write that won


def test_the_lease_names_its_holder_is_renewed_and_released(kubeconfig: Path, kubectl: Kubectl) -> None:
    location = _location(lease_seconds=2)
    holder, other = _backend(kubeconfig, location), _backend(kubeconfig, location)
    info = holder.lock("apply")
    lease = json.loads(kubectl("get", "lease", "-n", NAMESPACE, "gpuplan-lock-team", "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"] == info.id and lease["spec"]["leaseDurationSeconds"] == 2
    annotated = json.loads(lease["metadata"]["annotations"]["gpuplan.io/lock-info"])
    assert annotated["id"] == info.id and annotated["pid"] == os.getpid()
    acquired = state_secret.parse_time(lease["spec"]["acquireTime"])
    assert acquired is not None

    def renewed_past_its_duration(seen: dict[str, Any]) -> bool:
        renewed = state_secret.parse_time(seen["spec"].get("renewTime", ""))
        return renewed is not None and (renewed - acquired).total_seconds() > 2

    renewed = watch_lease(kubeconfig, NAMESPACE, "gpuplan-lock-team", renewed_past_its_duration)
    assert renewed["spec"]["holderIdentity"] == info.id
    with pytest.raises(StateLockedError) as locked:
        other.lock("plan")
    assert f"lock ID {info.id}" in locked.value.summary and "unless renewed" in locked.value.detail
    holder.unlock(info.id)
    released = json.loads(kubectl("get", "lease", "-n", NAMESPACE, "gpuplan-lock-team", "-o", "json").stdout)
    assert "holderIdentity" not in released["spec"]
    again = other.lock("plan")
    with pytest.raises(StateError, match="does not match"):
        holder.force_unlock("not-the-id")
    assert holder.force_unlock(again.id).id == again.id
    other.close()
    holder.close()


def test_a_run_whose_lease_was_taken_over_writes_nothing_more(
    kubeconfig: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    location = _location(lease_seconds=1)
    paused, other = _backend(kubeconfig, location), _backend(kubeconfig, location)
    info = paused.lock("apply")
    other.force_unlock(info.id)  # as if its Lease had expired while the run was paused
    taken = other.lock("apply")
    assert paused._heartbeats[info.id].lost_event.wait(timeout=30)  # its next beat finds the new holder
    with pytest.raises(StateLockedError, match="this run's state lock was taken over by pid"):
        paused.write(StateFile.new().next_serial())
    assert other.read() is None
    assert f"lock ID {info.id}) was taken over" in capfd.readouterr().err
    other.unlock(taken.id)
    paused.close()
    other.close()


LEASE_SECONDS = 5
"""Long enough that the lock right after the kill finds the Lease live, short enough to wait for."""


def test_a_holder_killed_with_kill_9_leaves_a_lease_that_expires_and_is_taken_over_with_a_note(
    kubeconfig: Path, kubectl: Kubectl, capfd: pytest.CaptureFixture[str]
) -> None:
    with holding(kubeconfig, "kubernetes://default/team", lease_seconds=LEASE_SECONDS) as holder:
        os.kill(holder.pid, signal.SIGKILL)
        holder.process.wait(timeout=30)
    lock_id = holder.lock_id
    backend = _backend(kubeconfig, _location(lease_seconds=LEASE_SECONDS))
    with pytest.raises(StateLockedError, match=f"pid {holder.pid}"):  # within the Lease's duration
        backend.lock("apply")
    # waits (as --lock-timeout does) until the Lease's renewTime is older than its duration, then takes it
    with backend.locked("apply", timeout=60) as info:
        assert info.broken is not None and info.broken.id == lock_id
    note = capfd.readouterr().err
    assert f"Note: took over the state lock held by pid {holder.pid}" in note and lock_id in note
    backend.close()
