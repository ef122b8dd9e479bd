"""The state in the cluster (design §7.2): Secret ``gpuplan-state-<name>`` holds it, Lease
``gpuplan-lock-<name>`` locks it. Implements :class:`gpuplan.state.backend.StateBackend`; chosen by
:func:`gpuplan.context.state_backend` for ``--state kubernetes://NAMESPACE/NAME`` or ``spec.state``.

Storage. The state's JSON (:func:`gpuplan.state.model.to_json`) is gzipped; the first 1 MiB goes in the main
Secret's ``data.state``, the rest in ``-part-1``, ``-part-2``... Secrets of 512 KiB chunks (a Secret holds at
most 1 MiB, the API server refuses more: fleet facts §7.1). The main Secret is the commit point: its
annotations name the part count and the sha256 of the whole gzip payload. A part holds up to two chunks, under
keys named after the payload digest they belong to: the one the main Secret names and the one being written.
So a writer killed between its part writes and its main write leaves the committed state whole (the old chunk
is still there), which Terraform's and Helm's in-place chunks do not (fleet facts §7). Every write:

1. reads the main Secret (its resourceVersion R) and the stored state, and applies the shared write rules
   (:func:`gpuplan.state.backend.check_write`: lineage, serial, no-op);
2. writes each part with the resourceVersion it read as a precondition (or creates it);
3. replaces the main Secret with ``metadata.resourceVersion: R``. Two writers that read the same R can never
   both win: the second gets 409, reported as a :class:`StateError` ("another writer stored serial N"), and
   nothing of its state is kept as committed;
4. deletes parts the new payload no longer needs.

Lock. The Lease's ``holderIdentity`` is the lock ID; the holder's :class:`LockInfo` is the annotation
``gpuplan.io/lock-info``; ``leaseDurationSeconds`` (60, or ``spec.state.leaseDurationSeconds``) and
``renewTime``, which a heartbeat thread renews every third of the duration while the run lives. A Lease whose
``renewTime`` is older than its duration is expired: the next run takes it over (with a resourceVersion
precondition, so one of two racing runs wins) and says so in one ``Note:`` naming the old holder, where
Terraform's Lease lock never expires (fleet facts §7.1). Expiry compares the holder's ``renewTime`` with this
host's clock, as the Lease's own readers do: hosts whose clocks are apart by more than a duration misjudge it.
A run whose Lease was taken over (its heartbeat finds another holder) writes nothing more. Unlocking clears
the holder and keeps the Lease (its ``leaseTransitions`` count the hand-overs).

Nothing here logs or reports state data; the state itself never holds credentials (the model refuses them).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuplan.errors import GpuplanError, StateError, StateLockedError
from gpuplan.fileio import STATE_LIMIT
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.state_objects import Conflict, Gone, Object, ObjectClient
from gpuplan.state.backend import check_write, hold_lock
from gpuplan.state.document import parse_state
from gpuplan.state.location import KubernetesLocation
from gpuplan.state.lock import LockInfo, locked_error, tell_user
from gpuplan.state.model import StateFile, to_json

MAIN_CHUNK = 1024 * 1024
"""The main Secret's chunk: a Secret's data may total 1 MiB (corev1.MaxSecretSize)."""
PART_CHUNK = MAIN_CHUNK // 2
"""A part's chunk: two of them (the committed one and the one being written) fit in one Secret."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuplan"}
STATE_LABEL = "gpuplan.io/state"
DATA_KEY = "state"
ENCODING = "gpuplan.io/encoding"
PARTS = "gpuplan.io/parts"
DIGEST = "gpuplan.io/digest"
SERIAL = "gpuplan.io/serial"
LINEAGE = "gpuplan.io/lineage"
LOCK_INFO = "gpuplan.io/lock-info"
LEASE_POLL_SECONDS = 1.0
"""How often a run waiting for a held Lease reads it again (sooner when it expires before)."""
_READ_ATTEMPTS = 3  # a reader racing a writer's cleanup of old chunks reads again


def now() -> datetime:
    return datetime.now(UTC)


def micro_time(moment: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def part_key(digest: str) -> str:
    return "g-" + digest[:24]


@dataclass(frozen=True)
class Stored:
    """What a write is made against: the main Secret as read (None: no state yet) and its state."""

    main: Object | None
    state: StateFile | None


@dataclass(frozen=True)
class LeaseView:
    """A read Lease: who holds it (lock ID and info) and until when."""

    lease: Object
    holder: str
    info: LockInfo | None
    renewed: datetime | None
    duration: int | None

    @classmethod
    def of(cls, lease: Object) -> LeaseView:
        spec = lease.get("spec") or {}
        raw = ((lease.get("metadata") or {}).get("annotations") or {}).get(LOCK_INFO)
        info: LockInfo | None = None
        if raw:
            with contextlib.suppress(ValueError):
                info = LockInfo.model_validate_json(raw)
        renewed = parse_time(str(spec.get("renewTime") or spec.get("acquireTime") or ""))
        duration = _int(spec.get("leaseDurationSeconds"), default=0) or None
        return cls(lease, str(spec.get("holderIdentity") or ""), info, renewed, duration)

    @property
    def expires(self) -> datetime | None:
        if self.renewed is None or self.duration is None:
            return None
        return self.renewed + timedelta(seconds=self.duration)

    def expired(self, moment: datetime) -> bool:
        return self.expires is not None and moment > self.expires


class KubernetesStateBackend:
    """One state in the cluster (see the module doc). Thread-safe: apply's workers write through it."""

    def __init__(
        self,
        location: KubernetesLocation,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        clock: Callable[[], datetime] = now,
    ) -> None:
        self.location = location
        self._kubeconfig = kubeconfig
        self._context = context
        self._clock = clock
        self._api = self._client()
        self._mutex = threading.RLock()
        self._heartbeats: dict[str, _Heartbeat] = {}

    # -- naming ----------------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        return self.location.url

    @property
    def lock_where(self) -> str:
        return f"Lease {self.location.namespace}/{self.location.lease_name}"

    def _client(self) -> ObjectClient:
        return ObjectClient(KubernetesProvider(kubeconfig=self._kubeconfig, context=self._context))

    def _secret_path(self, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{self.location.namespace}/secrets"
        return base if name is None else f"{base}/{name}"

    def _lease_path(self, collection: bool = False) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{self.location.namespace}/leases"
        return base if collection else f"{base}/{self.location.lease_name}"

    # -- reading ---------------------------------------------------------------------------------------
    def read(self) -> StateFile | None:
        return self.snapshot().state

    def snapshot(self) -> Stored:
        """The main Secret and the state it commits, read consistently."""
        with self._mutex:
            for _ in range(_READ_ATTEMPTS):
                main = self._api.get(self._secret_path(self.location.secret_name), what=self._what("read"))
                if main is None:
                    return Stored(None, None)
                payload = self._payload(main)
                if payload is not None:
                    return Stored(main, self._decode(payload))
            raise StateError(
                "the state's parts do not match its main Secret",
                where=self.where,
                detail=f"a part of {self.location.secret_name} lacks the chunk its main Secret names.",
                hint="`gpuplan state push --force FILE` replaces the state with a good copy",
            )

    def _payload(self, main: Object) -> bytes | None:
        """The whole gzip payload; None when a part lacks its chunk (a writer moved on: read again)."""
        annotations = (main.get("metadata") or {}).get("annotations") or {}
        digest = str(annotations.get(DIGEST) or "")
        count = _int(annotations.get(PARTS), default=1)
        first = _data(main, DATA_KEY)
        if first is None:
            raise self._damaged("the main Secret has no data.state")
        chunks = [first]
        for index in range(1, count):
            part = self._api.get(self._secret_path(self.location.part_name(index)), what=self._what("read"))
            chunk = None if part is None else _data(part, part_key(digest))
            if chunk is None:
                return None
            chunks.append(chunk)
        payload = b"".join(chunks)
        if digest and hashlib.sha256(payload).hexdigest() != digest:
            raise self._damaged("its content does not match the digest its main Secret records")
        return payload

    def _decode(self, payload: bytes) -> StateFile:
        inflater = zlib.decompressobj(wbits=31)
        try:
            text = inflater.decompress(payload, STATE_LIMIT + 1)
        except zlib.error as exc:
            raise self._damaged(f"its data is not gzip ({exc})") from None
        if len(text) > STATE_LIMIT or inflater.unconsumed_tail:
            raise self._damaged(f"it inflates past {STATE_LIMIT // (1024 * 1024)} MiB")
        return parse_state(
            text, source=self.where, hint="`gpuplan state push --force FILE` replaces it with a good copy"
        )

    def _damaged(self, why: str) -> StateError:
        return StateError(
            f"the state Secret {self.location.secret_name} is damaged: {why}",
            where=self.where,
            hint="`gpuplan state push --force FILE` replaces it with a good copy",
        )

    # -- writing ---------------------------------------------------------------------------------------
    def write(self, state: StateFile, *, force: bool = False) -> None:
        with self._mutex:
            try:
                stored = self.snapshot()
            except StateError:
                if not force:  # push --force replaces even a damaged state
                    raise
                main = self._api.get(self._secret_path(self.location.secret_name), what=self._what("read"))
                stored = Stored(main, None)
            self.commit(stored, state, force=force)

    def commit(self, stored: Stored, state: StateFile, *, force: bool = False) -> None:
        """Write ``state`` over what ``stored`` read; refused if the stored state changed since."""
        with self._mutex:
            self._check_lease_kept()
            if not check_write(stored.state, state, force=force, where=self.where):
                return
            payload = gzip.compress(to_json(state).encode("utf-8"), compresslevel=9, mtime=0)
            digest = hashlib.sha256(payload).hexdigest()
            chunks = [payload[:MAIN_CHUNK]] + [
                payload[i : i + PART_CHUNK] for i in range(MAIN_CHUNK, len(payload), PART_CHUNK)
            ]
            old_count = _int(_annotation(stored.main, PARTS), default=1)
            for index, chunk in enumerate(chunks[1:], start=1):
                self._write_part(index, chunk, digest, committed=_annotation(stored.main, DIGEST))
            self._write_main(stored, state, chunks[0], digest, len(chunks))
            for index in range(len(chunks), old_count):
                self._api.delete(self._secret_path(self.location.part_name(index)), what=self._what("write"))

    def _metadata(self, name: str, annotations: dict[str, str], version: str | None) -> Object:
        metadata: Object = {
            "name": name,
            "namespace": self.location.namespace,
            "labels": {**MANAGED_BY, STATE_LABEL: self.location.name},
            "annotations": {ENCODING: "gzip", **annotations},
        }
        if version:
            metadata["resourceVersion"] = version
        return metadata

    def _write_part(self, index: int, chunk: bytes, digest: str, *, committed: str | None) -> None:
        name = self.location.part_name(index)
        path = self._secret_path(name)
        current = self._api.get(path, what=self._what("write"))
        kept = {
            key: value
            for key, value in ((current or {}).get("data") or {}).items()
            if committed and key == part_key(committed)
        }
        data = {**kept, part_key(digest): base64.b64encode(chunk).decode("ascii")}
        version = (current or {}).get("metadata", {}).get("resourceVersion")
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": self._metadata(name, {}, version),
            "data": data,
        }
        try:
            if current is None:
                self._api.create(self._secret_path(), body, what=self._what("write"))
            else:
                self._api.replace(path, body, what=self._what("write"))
        except Gone:
            raise (
                self._no_namespace() if current is None else self._lost_race(f"part {name} vanished")
            ) from None
        except Conflict:
            raise self._lost_race(f"part {name} changed while this run wrote it") from None

    def _write_main(self, stored: Stored, state: StateFile, chunk: bytes, digest: str, count: int) -> None:
        name = self.location.secret_name
        version = (stored.main or {}).get("metadata", {}).get("resourceVersion")
        annotations = {
            PARTS: str(count),
            DIGEST: digest,
            SERIAL: str(state.serial),
            LINEAGE: state.lineage,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": self._metadata(name, annotations, version),
            "data": {DATA_KEY: base64.b64encode(chunk).decode("ascii")},
        }
        try:
            if stored.main is None:
                self._api.create(self._secret_path(), body, what=self._what("write"))
            else:
                self._api.replace(self._secret_path(name), body, what=self._what("write"))
        except Gone:
            if stored.main is None:
                raise self._no_namespace() from None
            raise self._lost_race(f"Secret {name} was deleted after this run read it") from None
        except Conflict:
            raise self._lost_race(f"Secret {name} changed after this run read it") from None

    def _lost_race(self, what: str) -> StateError:
        try:
            now_stored = _annotation(
                self._api.get(self._secret_path(self.location.secret_name), what="read"), SERIAL
            )
        except StateError:
            now_stored = None
        winner = f"another writer stored serial {now_stored}" if now_stored else "another writer changed it"
        return StateError(
            f"the state was not written: {what} ({winner})",
            where=self.where,
            detail="the write carried the resourceVersion this run read; the cluster refused it, so the "
            "other writer's state stands and nothing of this run's write was committed.",
            hint="run the command again: it starts from the stored state",
        )

    # -- locking ---------------------------------------------------------------------------------------
    def lock(self, operation: str) -> LockInfo:
        with self._mutex:
            info = LockInfo.for_this_process(operation)
            lease = self._api.get(self._lease_path(), what=self._what("lock"))
            if lease is None:
                self._create_lease(info)
                return self._held(info)
            view = LeaseView.of(lease)
            moment = self._clock()
            if view.holder and not view.expired(moment):
                raise self._locked(view)
            broken = view.info if view.holder else None
            self._take_lease(view, info)
            if broken is not None:
                renewed = micro_time(view.renewed) if view.renewed is not None else "(never)"
                tell_user(
                    f"Note: took over the state lock held by {broken.describe()}: its Lease "
                    f"{self.location.lease_name} was last renewed at {renewed}, more than its "
                    f"{view.duration}s ago (the run is gone or cut off from the cluster)."
                )
            return self._held(info.model_copy(update={"broken": broken}))

    def _locked(self, view: LeaseView) -> StateLockedError:
        error = locked_error(view.info, self.where)
        if view.info is None:
            error.summary = f"state is locked by lock ID {view.holder} (its lock info is unreadable)"
        error.hint = (
            f"wait for it with --lock-timeout, or `gpuplan force-unlock {view.holder} --state {self.where}` "
            "if you are sure no other run is using it"
        )
        error.retry_after = LEASE_POLL_SECONDS
        if view.expires is not None:
            left = (view.expires - self._clock()).total_seconds()
            error.retry_after = min(max(left, 0.0) + 0.05, LEASE_POLL_SECONDS)
            expires = micro_time(view.expires)
            expiry = f"its Lease {self.location.lease_name} expires at {expires} unless renewed"
            error.detail = "\n".join(filter(None, [error.detail, expiry]))
        return error

    def _lease_body(self, info: LockInfo | None, version: str | None, transitions: int) -> Object:
        moment = micro_time(self._clock())
        annotations = {LOCK_INFO: info.model_dump_json()} if info is not None else {}
        spec: Object = {"leaseDurationSeconds": self.location.lease_seconds, "leaseTransitions": transitions}
        if info is not None:
            spec.update(holderIdentity=info.id, acquireTime=moment, renewTime=moment)
        metadata: Object = {
            "name": self.location.lease_name,
            "namespace": self.location.namespace,
            "labels": {**MANAGED_BY, STATE_LABEL: self.location.name},
            "annotations": annotations,
        }
        if version:
            metadata["resourceVersion"] = version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _create_lease(self, info: LockInfo) -> None:
        try:
            self._api.create(self._lease_path(collection=True), self._lease_body(info, None, 0), what="lock")
        except Conflict:
            raise self._raced() from None
        except Gone:
            raise self._no_namespace() from None

    def _no_namespace(self) -> StateError:
        namespace = self.location.namespace
        return StateError(
            f"the namespace {namespace} of the state does not exist",
            where=self.where,
            detail="the state's Secret and Lease live in an existing namespace; gpuplan does not create it.",
            hint=f"kubectl create namespace {namespace}, or name another namespace in the URL",
        )

    def _take_lease(self, view: LeaseView, info: LockInfo) -> None:
        metadata = view.lease.get("metadata") or {}
        transitions = _int((view.lease.get("spec") or {}).get("leaseTransitions"), default=0) + 1
        body = self._lease_body(info, metadata.get("resourceVersion"), transitions)
        try:
            self._api.replace(self._lease_path(), body, what=self._what("lock"))
        except (Conflict, Gone):
            raise self._raced() from None

    def _raced(self) -> StateLockedError:
        view = self._lease_view("lock")
        if view is not None and view.holder:
            return self._locked(view)
        return StateLockedError(
            "another run took the state lock at the same moment", where=self.where, hint="retry"
        )

    def _lease_view(self, verb: str) -> LeaseView | None:
        lease = self._api.get(self._lease_path(), what=self._what(verb))
        return LeaseView.of(lease) if lease is not None else None

    def _held(self, info: LockInfo) -> LockInfo:
        beat = _Heartbeat(self, info)
        self._heartbeats[info.id] = beat
        beat.start()
        return info

    def renew(self, lock_id: str, api: ObjectClient) -> str | None:
        """One heartbeat: move ``renewTime`` on; the other holder's description when the Lease is lost."""
        for _ in range(_READ_ATTEMPTS):
            lease = api.get(self._lease_path(), what=self._what("renew the lock"))
            if lease is None:
                return "nobody (the Lease was deleted)"
            view = LeaseView.of(lease)
            if view.holder != lock_id:
                return view.info.describe() if view.info else f"lock ID {view.holder or '(none)'}"
            spec = {**(lease.get("spec") or {}), "renewTime": micro_time(self._clock())}
            try:
                api.replace(self._lease_path(), {**lease, "spec": spec}, what=self._what("renew the lock"))
            except (Conflict, Gone):
                continue  # changed between the read and the write: judge it again
            return None
        return None

    def _check_lease_kept(self) -> None:
        for beat in self._heartbeats.values():
            if beat.lost is not None:
                raise StateLockedError(
                    f"this run's state lock was taken over by {beat.lost}; nothing more is written",
                    where=self.where,
                    detail="its Lease was not renewed in time (the run was paused or cut off from the "
                    "cluster), so another run took it.",
                    hint="check the state (`gpuplan state list`) and plan again",
                )

    def unlock(self, lock_id: str) -> None:
        with self._mutex:
            beat = self._heartbeats.pop(lock_id, None)
            if beat is None:
                raise StateError(f"lock ID {lock_id} is not held by this run", where=self.where)
            beat.stop()
            view = self._lease_view("unlock")
            if view is None or view.holder != lock_id:
                tell_user(
                    f"Warning: the state lock of this run (lock ID {lock_id}) was removed or taken over "
                    "while the run held it; another run may have used the state since."
                )
                return
            self._clear(view)

    def _clear(self, view: LeaseView) -> None:
        metadata = view.lease.get("metadata") or {}
        transitions = _int((view.lease.get("spec") or {}).get("leaseTransitions"), default=0)
        body = self._lease_body(None, metadata.get("resourceVersion"), transitions)
        try:
            self._api.replace(self._lease_path(), body, what=self._what("unlock"))
        except (Conflict, Gone):
            raise StateError(
                "the state lock changed while it was being released", where=self.where, hint="retry"
            ) from None

    def force_unlock(self, lock_id: str) -> LockInfo:
        with self._mutex:
            if lock_id in self._heartbeats:
                self._heartbeats[lock_id].stop()
            view = self._lease_view("unlock")
            if view is None or not view.holder:
                raise StateError(
                    "the state is not locked",
                    where=self.where,
                    detail=f"Lease {self.location.lease_name} has no holder, so nothing to unlock for lock "
                    f"ID {lock_id}",
                )
            if view.holder != lock_id:
                real = view.info.describe() if view.info else "its lock info is unreadable"
                raise StateError(
                    f"lock ID {lock_id} does not match the lock on the state",
                    where=self.where,
                    detail=f"the lock ID is {view.holder} ({real})",
                    hint="pass the lock ID that the error of the blocked run named",
                )
            self._clear(view)
            self._heartbeats.pop(lock_id, None)
            if view.info is None:
                raise StateError(f"lock {lock_id} had no readable lock info", where=self.where)
            return view.info

    def locked(self, operation: str, timeout: float = 0.0) -> contextlib.AbstractContextManager[LockInfo]:
        manager: contextlib.AbstractContextManager[LockInfo] = hold_lock(self, operation, timeout)
        return manager

    def lock_holder(self) -> LockInfo | None:
        view = self._lease_view("read the lock")
        return view.info if view is not None and view.holder else None

    def lock_is_held(self) -> bool:
        """True while the Lease has a holder that renewed it within its duration."""
        view = self._lease_view("read the lock")
        return view is not None and bool(view.holder) and not view.expired(self._clock())

    def close(self) -> None:
        """Release the locks this backend still holds and close its connections."""
        for lock_id in list(self._heartbeats):
            self.unlock(lock_id)
        self._api.close()

    def _what(self, verb: str) -> str:
        return f"{verb} the state {self.where}"


class _Heartbeat:
    """Renews one Lease every third of its duration until stopped, on a client of its own."""

    def __init__(self, backend: KubernetesStateBackend, info: LockInfo) -> None:
        self._backend = backend
        self._info = info
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{info.id[:8]}", daemon=True)
        self.lost: str | None = None
        self.lost_event = threading.Event()
        """Set once the heartbeat found another holder (or none) on the Lease."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        interval = self._backend.location.lease_seconds / 3
        api = self._backend._client()
        try:
            while not self._stop.wait(interval):
                try:
                    other = self._backend.renew(self._info.id, api)
                except GpuplanError:
                    continue  # the cluster did not answer this time; the next beat tries again
                if other is not None:
                    self.lost = other
                    self.lost_event.set()
                    tell_user(
                        f"Warning: this run's state lock (lock ID {self._info.id}) was taken over by {other}."
                    )
                    return
        finally:
            api.close()


def _annotation(obj: Object | None, key: str) -> str | None:
    value = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(key)
    return None if value is None else str(value)


def _data(obj: Object, key: str) -> bytes | None:
    value = (obj.get("data") or {}).get(key)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


def _int(value: Any, *, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
