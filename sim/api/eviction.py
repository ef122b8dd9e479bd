"""pods/eviction honouring PodDisruptionBudgets, as ``pkg/registry/core/pod/storage/eviction.go`` does.

``evict(store, namespace, name, ...)`` is ``EvictionREST.Create``:

1. The pod is read. A pod that is Pending, Succeeded, Failed or already terminating (``canIgnorePDB``) is
   deleted without looking at budgets (a pod that is not terminal nor terminating with its resourceVersion
   as precondition, so that it cannot turn ready meanwhile); a conflict re-reads it and tries again.
2. The budgets of the pod's namespace whose selector matches its labels (an invalid selector matches
   nothing, a null one nothing, an empty one everything). More than one: 500 "This pod has more than one
   PodDisruptionBudget, which the eviction subresource does not support." None: the pod is deleted.
3. A pod that is not Ready is let go without spending the budget when ``unhealthyPodEvictionPolicy`` is
   AlwaysAllow, or (IfHealthyBudget, the default) when the budget is met (currentHealthy >= desiredHealthy >
   0); it is then deleted with its resourceVersion as precondition, a conflict answering 429.
4. Otherwise ``checkAndDecrement``: 429 (Retry-After 10) while the controller has not observed the budget's
   generation; 403 when disruptionsAllowed is negative or disruptedPods holds more than 2000 pods; 429
   "Cannot evict pod as it would violate the pod's disruption budget." with the ``DisruptionBudget`` cause
   worded as the real one when no disruption is allowed. Else disruptionsAllowed is decremented (the
   DisruptionAllowed condition updated when it reaches 0) and the pod entered in ``disruptedPods`` at the
   store's time, through the budget's status subresource; a conflict there reads the budget again and
   retries (20 tries, then 504).
5. The pod gets the ``DisruptionTarget`` condition (reason EvictionByEvictionAPI) and is deleted as a DELETE
   deletes it (gracefully, ``sim.api.graceful``).

The real handler pauses about 0.5 s between conflict retries (``EvictionsRetry``); here a retry follows at
once: the store serialises writes, so the state that won is already there to read.

Called by :meth:`gpuplan.sim.api.store.Store.evict` (the HTTP handler's pods/eviction). The disruption
controller (:mod:`gpuplan.sim.controllers.disruption`) shares :func:`budgets_for`, :func:`selects` and
:func:`is_pod_ready`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gpuplan.sim.api import selectors
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.objects import copy_json, meta, now_rfc3339

if TYPE_CHECKING:
    from gpuplan.sim.api.store import Store

Obj = dict[str, Any]

RETRIES = 20  # EvictionsRetry.Steps
MAX_DISRUPTED_POD_SIZE = 2000
CAUSE = "DisruptionBudget"  # policyv1.DisruptionBudgetCause; a StatusCause's Type is its JSON "reason"
CONDITION = "DisruptionAllowed"
MORE_THAN_ONE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MANAGER = "kube-apiserver"  # the apiserver's loopback client writes the budget's status
_TERMINAL = ("Succeeded", "Failed")


def selects(pdb: Obj, pod: Obj) -> bool:
    """Whether the budget's selector matches the pod's labels (same namespace is the caller's test)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False  # LabelSelectorAsSelector(nil) is labels.Nothing()
    try:
        parsed = selectors.from_label_selector(selector)
    except (selectors.SelectorError, KeyError):
        return False  # an invalid selector matches no pod
    return parsed.matches_labels((pod.get("metadata") or {}).get("labels") or {})


def budgets_for(pod: Obj, budgets: Iterable[Obj]) -> list[Obj]:
    namespace = meta(pod).get("namespace")
    return [pdb for pdb in budgets if meta(pdb).get("namespace") == namespace and selects(pdb, pod)]


def is_pod_ready(pod: Obj) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def can_ignore_pdb(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in (*_TERMINAL, "Pending") or bool(meta(pod).get("deletionTimestamp"))


def _enforces_resource_version(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in _TERMINAL and not meta(pod).get("deletionTimestamp")


def set_disruption_allowed(status: Obj, now: str) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition, in place; its observedGeneration is the status' own."""
    if (status.get("disruptionsAllowed") or 0) > 0:
        wanted = {"status": "True", "reason": "SufficientPods"}
    else:
        wanted = {"status": "False", "reason": "InsufficientPods"}
    observed = int(status.get("observedGeneration") or 0)
    condition = {"type": CONDITION, **wanted, "message": "", "observedGeneration": observed}
    set_condition(status, condition, now)


def set_condition(status: Obj, condition: Obj, now: str) -> None:
    """apimeta.SetStatusCondition, in place: the transition time changes only with the status."""
    conditions = list(status.get("conditions") or [])
    for i, found in enumerate(conditions):
        if found.get("type") == condition["type"]:
            since = found.get("lastTransitionTime") if found.get("status") == condition["status"] else now
            conditions[i] = _condition_json({**condition, "lastTransitionTime": since})
            break
    else:
        conditions.append(_condition_json({**condition, "lastTransitionTime": now}))
    status["conditions"] = conditions


def _condition_json(condition: Obj) -> Obj:
    """metav1.Condition as Go writes it: its field order, observedGeneration left out when 0."""
    keys = ("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
    return {k: condition[k] for k in keys if k in condition and (k != "observedGeneration" or condition[k])}


def too_many_requests(name: str) -> ApiError:
    """createTooManyRequestsError: the budget's status is not current yet; retry in 10 s."""
    message = f"The disruption budget {name} is still being processed by the server."
    cause = {"reason": CAUSE, "message": message}
    return ApiError(429, "TooManyRequests", VIOLATION, {"causes": [cause]}, retry_after=10)


def _forbidden(name: str, why: str, detail: str) -> ApiError:
    message = f"The disruption budget {name} does not allow evicting pods currently: {detail}"
    cause = {"reason": CAUSE, "message": message}
    return ApiError(
        403,
        "Forbidden",
        f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
        {"name": name, "group": "policy", "kind": "poddisruptionbudget", "causes": [cause]},
    )


def refusal(pdb: Obj) -> ApiError | None:
    """checkAndDecrement's refusals of a budget as read, or None when it allows one more disruption."""
    name, status = meta(pdb)["name"], pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta(pdb).get("generation") or 0):
        return too_many_requests(name)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return _forbidden(name, "pdb disruptions allowed is negative", "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        return _forbidden(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            "too many pending evictions not confirmed by PDB controller",
        )
    if allowed > 0:
        return None
    current, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)
    refused = condition is not None and condition.get("status") == "False" and bool(condition.get("message"))
    if refused and condition is not None and condition.get("reason") == "SyncFailed":
        message = (
            f"The disruption budget {name} does not allow evicting pods currently because it failed sync: "
            f"{condition['message']}"
        )
    elif current <= desired:
        message = f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
    elif refused and condition is not None:
        message = (
            f"The disruption budget {name} does not allow evicting pods currently "
            f"({condition.get('reason')}): {condition['message']}"
        )
    else:
        message = f"The disruption budget {name} does not allow evicting pods currently"
    return ApiError(429, "TooManyRequests", VIOLATION, {"causes": [{"reason": CAUSE, "message": message}]})


def evict(
    store: Store,
    namespace: str,
    name: str,
    *,
    dry_run: bool = False,
    grace_period_seconds: int | None = None,
    preconditions: dict[str, Any] | None = None,
    propagation: str | None = None,
    manager: str = MANAGER,
) -> Obj:
    """POST pods/NAME/eviction; the Success Status, or the ApiError the real handler answers."""
    pods = store.registry.for_kind("v1", "Pod")
    budgets_rt = store.registry.for_kind("policy/v1", "PodDisruptionBudget")
    assert pods is not None and budgets_rt is not None
    options = Options(dict(preconditions or {}), dry_run, grace_period_seconds, propagation, manager)
    user_rv = bool(options.preconditions.get("resourceVersion"))
    pod: Obj = {}
    for attempt in range(RETRIES):
        pod = store.get(pods, namespace, name)
        if not can_ignore_pdb(pod):
            break
        wanted = dict(options.preconditions)
        if _enforces_resource_version(pod) and not user_rv:
            wanted["resourceVersion"] = meta(pod)["resourceVersion"]
        try:
            _delete(store, pods, pod, options.with_preconditions(wanted))
            return SUCCESS
        except ApiError as exc:
            if exc.code != 409 or user_rv or attempt == RETRIES - 1:
                raise
    matching = budgets_for(pod, store.list(budgets_rt, namespace=namespace).items)
    if len(matching) > 1:
        raise ApiError(500, "", MORE_THAN_ONE)
    if not matching:
        _delete(store, pods, pod, options)
        return SUCCESS
    pdb = matching[0]
    if not is_pod_ready(pod) and _unhealthy_goes(pdb):
        wanted = {**options.preconditions, "resourceVersion": meta(pod)["resourceVersion"]}
        try:
            _delete(store, pods, pod, options.with_preconditions(wanted))
        except ApiError as exc:
            if exc.code == 409 and not user_rv:
                raise too_many_requests(meta(pdb)["name"]) from None
            raise
        return SUCCESS
    _check_and_decrement(store, budgets_rt, pdb, name, dry_run)
    _delete(store, pods, pod, options)
    return SUCCESS


SUCCESS: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


class Options:
    """The eviction's DeleteOptions."""

    def __init__(
        self,
        preconditions: dict[str, Any],
        dry_run: bool,
        grace_period_seconds: int | None,
        propagation: str | None,
        manager: str,
    ) -> None:
        self.preconditions = preconditions
        self.dry_run = dry_run
        self.grace_period_seconds = grace_period_seconds
        self.propagation = propagation
        self.manager = manager

    def with_preconditions(self, preconditions: dict[str, Any]) -> Options:
        return Options(preconditions, self.dry_run, self.grace_period_seconds, self.propagation, self.manager)


def _unhealthy_goes(pdb: Obj) -> bool:
    """An unready pod may go without spending the budget: AlwaysAllow, or IfHealthyBudget (the default)
    while the budget holds."""
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = int(status.get("desiredHealthy") or 0)
    return int(status.get("currentHealthy") or 0) >= desired > 0


def _check_and_decrement(store: Store, rt: Any, pdb: Obj, pod_name: str, dry_run: bool) -> None:
    """Spend one disruption of the budget, re-reading it after a conflict (RetryOnConflict)."""
    name = meta(pdb)["name"]
    for attempt in range(RETRIES):
        if attempt:
            pdb = store.get(rt, meta(pdb)["namespace"], name)
        refused = refusal(pdb)
        if refused is not None:
            raise refused
        updated = copy_json(pdb)
        status = updated.setdefault("status", {})
        status["disruptionsAllowed"] = int(status.get("disruptionsAllowed") or 0) - 1
        if status["disruptionsAllowed"] == 0:
            set_disruption_allowed(status, now_rfc3339(store.clock))
        if dry_run:
            return
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now_rfc3339(store.clock)}
        try:
            namespace = meta(pdb)["namespace"]
            store.update(rt, updated, namespace=namespace, name=name, manager=MANAGER, subresource="status")
            return
        except ApiError as exc:
            if exc.code != 409:
                raise
    raise ApiError(
        504,
        "Timeout",
        f'couldn\'t update PodDisruptionBudget "{name}" due to conflicts',
        {"retryAfterSeconds": 10},
    )


def _delete(store: Store, pods: Any, pod: Obj, options: Options) -> None:
    """addConditionAndDeletePod: the DisruptionTarget condition on the latest pod (its preconditions checked
    against it), then the DELETE with them."""
    preconditions = dict(options.preconditions)
    namespace, name = meta(pod)["namespace"], meta(pod)["name"]
    if not options.dry_run:
        latest = store.get(pods, namespace, name)
        _check_latest(latest, preconditions)
        status = copy_json(latest.get("status") or {})
        changed = _disruption_target(status, now_rfc3339(store.clock))
        if changed:
            body = {**latest, "status": status}
            written = store.update(
                pods, body, namespace=namespace, name=name, manager=options.manager, subresource="status"
            )
            if preconditions.get("resourceVersion"):
                preconditions["resourceVersion"] = meta(written)["resourceVersion"]
    store.delete(
        pods,
        namespace,
        name,
        propagation=options.propagation,
        dry_run=options.dry_run,
        preconditions=preconditions or None,
        grace_period_seconds=options.grace_period_seconds,
    )


def _check_latest(pod: Obj, preconditions: dict[str, Any]) -> None:
    """getLatestPod's precondition checks, with its wording."""
    name = meta(pod)["name"]
    uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != meta(pod).get("uid"):
        why = (
            f"the UID in the precondition ({uid}) does not match the UID in record ({meta(pod).get('uid')}). "
            "The object might have been deleted and then recreated"
        )
    elif rv and rv != meta(pod).get("resourceVersion"):
        why = (
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record "
            f"({meta(pod).get('resourceVersion')}). The object might have been modified"
        )
    else:
        return
    raise ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on Pod "{name}": {why}',
        {"name": name, "kind": "Pod"},
    )


def _disruption_target(status: Obj, now: str) -> bool:
    """podutil.UpdatePodCondition with DisruptionTarget True; whether the status changed."""
    wanted = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    conditions = list(status.get("conditions") or [])
    for i, found in enumerate(conditions):
        if found.get("type") == "DisruptionTarget":
            if found.get("status") == "True":
                wanted["lastTransitionTime"] = found.get("lastTransitionTime")
            if {k: found.get(k) for k in ("status", "reason", "message")} == {
                k: wanted[k] for k in ("status", "reason", "message")
            }:
                return False
            conditions[i] = wanted
            break
    else:
        conditions.append(wanted)
    status["conditions"] = conditions
    return True
