"""Authorization: the RBAC authorizer, the request attributes it judges, and the self-review endpoints.

As kube-apiserver with ``--authorization-mode=RBAC`` (the Node authorizer is not simulated):

- **Attributes** come from the method and path as ``RequestInfoFactory.NewRequestInfo`` derives them
  (staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go): ``/api/v1/...`` and
  ``/apis/G/V/...`` are resource requests (verb get/list/watch/create/update/patch/delete/deletecollection,
  ``namespaces/NS`` moves to the namespace, the third segment after the name is the subresource, a list with
  ``fieldSelector=metadata.name=X`` names X); everything else is a non-resource request whose verb is the
  lower-cased method.
- **Rules** match as ``RuleAllows`` (plugin/pkg/auth/authorizer/rbac/rbac.go and
  pkg/apis/rbac/v1/evaluation_helpers.go): verbs and apiGroups with ``*``, resources with ``*``, ``pods/log``
  and ``*/log``, resourceNames (empty: any), nonResourceURLs equal or ``/prefix*``.
- **Bindings**: every ClusterRoleBinding, then the RoleBindings of the request's namespace (a RoleBinding
  may refer to a ClusterRole, which then applies in that namespace only); subjects User, Group and
  ServiceAccount (a RoleBinding's ServiceAccount subject without a namespace means the binding's).
  Aggregated ClusterRoles are not computed: a ClusterRole's ``rules`` are what it grants.
- ``system:masters`` is allowed everything without a rule (kube-apiserver's privileged-group authorizer).
- The bootstrap policy a fresh cluster holds (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go):
  ``cluster-admin`` (bound to system:masters), ``system:discovery`` and ``system:basic-user`` (bound to
  system:authenticated), ``system:public-info-viewer`` (system:authenticated and system:unauthenticated).
  They are built in rather than stored (the store's seeded objects stay as they are); a stored ClusterRole
  or ClusterRoleBinding of the same name replaces its built-in, as a cluster admin's edit would.
- A denial is 403 Forbidden worded as ``responsewriters.Forbidden`` does
  (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go):
  ``pods is forbidden: User "u" cannot list resource "pods" in API group "" in the namespace "ns"``.

Review endpoints (authorization.k8s.io/v1 SelfSubjectAccessReview and SelfSubjectRulesReview for
``kubectl auth can-i [--list]``; authentication.k8s.io/v1 SelfSubjectReview for ``kubectl auth whoami``):
``access_endpoint`` serves them and TokenRequest. Caller: ``sim.api.server``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gpuplan.sim.api.protocol import (
    Request,
    Response,
    decode_body,
    json_response,
    method_not_allowed,
)
from gpuplan.sim.api.registry import RBAC
from gpuplan.sim.api.routing import Route
from gpuplan.sim.api.store import ApiError, Store
from gpuplan.sim.api.tokens import (
    AUTHENTICATED,
    MASTERS,
    SERVICE_ACCOUNT_PREFIX,
    SERVICE_ACCOUNTS_GROUP,
    Tokens,
    UserInfo,
)

Obj = dict[str, Any]

UNAUTHENTICATED = "system:unauthenticated"
AUTHORIZATION_GROUP = "authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"
# Resources whose answer the server computes for the caller (never stored).
REVIEW_KINDS = {
    (AUTHORIZATION_GROUP, "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
    (AUTHORIZATION_GROUP, "selfsubjectrulesreviews"): "SelfSubjectRulesReview",
    (AUTHENTICATION_GROUP, "selfsubjectreviews"): "SelfSubjectReview",
}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

_HEALTH_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/"]
BOOTSTRAP_CLUSTER_ROLES: dict[str, list[Obj]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "system:discovery": [
        {
            "nonResourceURLs": [
                *_HEALTH_URLS,
                "/openapi",
                "/openapi/*",
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
            ],
            "verbs": ["get"],
        }
    ],
    "system:basic-user": [
        {
            "apiGroups": [AUTHORIZATION_GROUP],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            "verbs": ["create"],
        },
        {"apiGroups": [AUTHENTICATION_GROUP], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    ],
    "system:public-info-viewer": [{"nonResourceURLs": list(_HEALTH_URLS), "verbs": ["get"]}],
}
# binding name (= role name) -> groups bound
BOOTSTRAP_BINDINGS: dict[str, list[str]] = {
    "cluster-admin": [MASTERS],
    "system:discovery": [AUTHENTICATED],
    "system:basic-user": [AUTHENTICATED],
    "system:public-info-viewer": [AUTHENTICATED, UNAUTHENTICATED],
}


@dataclass(frozen=True)
class Attributes:
    """``authorizer.Attributes`` of one request."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, list[str]]) -> Attributes:
    """What ``NewRequestInfo`` makes of a request (see the module docstring)."""
    parts = [unquote(p) for p in path.split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path=path)
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return non_resource
    verb = _VERBS.get(method.upper())
    if not rest or verb is None:
        return non_resource
    if rest[0] in ("watch", "proxy") and len(rest) > 1:  # the deprecated /watch/ and /proxy/ prefixes
        verb = "watch" if rest[0] == "watch" else "proxy"
        rest = rest[1:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if _flag(query, "watch") else "list"
        name = _name_from_field_selector(query)
    elif not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path, group, version, resource, subresource, namespace, name)


def _flag(query: Mapping[str, list[str]], name: str) -> bool:
    values = query.get(name) or [""]
    return values[-1].lower() in ("1", "t", "true")


def _name_from_field_selector(query: Mapping[str, list[str]]) -> str:
    for term in ((query.get("fieldSelector") or [""])[-1]).split(","):
        key, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and key.strip() == "metadata.name" and "!" not in key:
            return value.strip()
    return ""


@dataclass(frozen=True)
class _Grant:
    """One role's rules through one binding, and how the RBAC authorizer describes it."""

    rules: list[Obj]
    description: str


class Authorizer:
    """The RBAC authorizer over the store's Roles, ClusterRoles and bindings (read at each decision)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def check(self, attrs: Attributes) -> None:
        """Raise the apiserver's 403 when ``attrs`` is not allowed."""
        allowed, _ = self.decide(attrs)
        if not allowed:
            raise forbidden(attrs)

    def decide(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): the reason names the binding that allowed it, as the RBAC authorizer does."""
        if MASTERS in attrs.user.groups:
            return True, ""
        for grant in self._grants(attrs.user, attrs.namespace):
            if any(rule_allows(attrs, rule) for rule in grant.rules):
                return True, f"RBAC: allowed by {grant.description}"
        return False, ""

    def rules(self, user: UserInfo, namespace: str) -> list[Obj]:
        """Every rule that applies to ``user`` in ``namespace`` (SelfSubjectRulesReview)."""
        if MASTERS in user.groups:
            return list(BOOTSTRAP_CLUSTER_ROLES["cluster-admin"])
        return [rule for grant in self._grants(user, namespace) for rule in grant.rules]

    # -- bindings -------------------------------------------------------------------------------------
    def _grants(self, user: UserInfo, namespace: str) -> Iterator[_Grant]:
        cluster_roles = self._cluster_roles()
        for binding in self._cluster_role_bindings():
            subject = _matching_subject(binding, user, "")
            role = cluster_roles.get(binding.get("roleRef", {}).get("name", ""))
            if subject is not None and role is not None and binding["roleRef"].get("kind") == "ClusterRole":
                yield _Grant(
                    role,
                    f'ClusterRoleBinding "{binding["metadata"]["name"]}" of ClusterRole '
                    f'"{binding["roleRef"]["name"]}" to {_describe(subject, "")}',
                )
        if not namespace:
            return
        for binding in self._list("rolebindings", namespace):
            subject = _matching_subject(binding, user, namespace)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            rules = (
                cluster_roles.get(ref.get("name", ""))
                if ref.get("kind") == "ClusterRole"
                else self._role(namespace, ref.get("name", ""))
            )
            if rules is not None:
                yield _Grant(
                    rules,
                    f'RoleBinding "{binding["metadata"]["name"]}/{namespace}" of {ref.get("kind")} '
                    f'"{ref.get("name")}" to {_describe(subject, namespace)}',
                )

    def _cluster_roles(self) -> dict[str, list[Obj]]:
        roles = {name: list(rules) for name, rules in BOOTSTRAP_CLUSTER_ROLES.items()}
        for role in self._list("clusterroles", None):
            roles[role["metadata"]["name"]] = list(role.get("rules") or [])
        return roles

    def _cluster_role_bindings(self) -> list[Obj]:
        stored = {b["metadata"]["name"]: b for b in self._list("clusterrolebindings", None)}
        built_in = [
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": group} for group in groups],
            }
            for name, groups in BOOTSTRAP_BINDINGS.items()
            if name not in stored
        ]
        return built_in + list(stored.values())

    def _role(self, namespace: str, name: str) -> list[Obj] | None:
        rt = self.store.registry.get(RBAC, "v1", "roles")
        if rt is None:
            return None
        try:
            return list(self.store.get(rt, namespace, name).get("rules") or [])
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    def _list(self, plural: str, namespace: str | None) -> list[Obj]:
        rt = self.store.registry.get(RBAC, "v1", plural)
        return self.store.list(rt, namespace=namespace).items if rt is not None else []

    # -- review endpoints -----------------------------------------------------------------------------
    def review(self, kind: str, user: UserInfo, body: Obj | None) -> Obj:
        """The answer to a POST of a self-review ``kind`` (a REVIEW_KINDS value)."""
        body = body or {}
        spec = body.get("spec") or {}
        group = AUTHENTICATION_GROUP if kind == "SelfSubjectReview" else AUTHORIZATION_GROUP
        answer: Obj = {
            "kind": kind,
            "apiVersion": f"{group}/v1",
            "metadata": {"creationTimestamp": None},
        }
        if kind == "SelfSubjectReview":
            answer["status"] = {"userInfo": user.as_status()}
        elif kind == "SelfSubjectRulesReview":
            answer["spec"] = spec
            answer["status"] = self._rules_status(user, str(spec.get("namespace") or ""))
        else:
            answer["spec"] = spec
            answer["status"] = self._access_status(user, spec)
        return answer

    def _access_status(self, user: UserInfo, spec: Obj) -> Obj:
        resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if resource:
            attrs = Attributes(
                user,
                str(resource.get("verb") or ""),
                True,
                api_group=str(resource.get("group") or ""),
                api_version=str(resource.get("version") or ""),
                resource=str(resource.get("resource") or ""),
                subresource=str(resource.get("subresource") or ""),
                namespace=str(resource.get("namespace") or ""),
                name=str(resource.get("name") or ""),
            )
        elif non_resource:
            attrs = Attributes(
                user, str(non_resource.get("verb") or ""), False, path=str(non_resource.get("path") or "")
            )
        else:
            raise ApiError(
                422,
                "Invalid",
                'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
                'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be '
                "specified",
            )
        allowed, reason = self.decide(attrs)
        status: Obj = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return status

    def _rules_status(self, user: UserInfo, namespace: str) -> Obj:
        resource_rules, non_resource_rules = [], []
        for rule in self.rules(user, namespace):
            if rule.get("nonResourceURLs"):
                non_resource_rules.append(
                    {"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]}
                )
            else:
                entry = {
                    key: rule[key]
                    for key in ("verbs", "apiGroups", "resources", "resourceNames")
                    if key in rule
                }
                resource_rules.append(entry)
        return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}


def _matching_subject(binding: Obj, user: UserInfo, namespace: str) -> Obj | None:
    for subject in binding.get("subjects") or []:
        if _applies(subject, user, namespace):
            return dict(subject)
    return None


def _applies(subject: Obj, user: UserInfo, binding_namespace: str) -> bool:
    """``appliesToUser`` of plugin/pkg/auth/authorizer/rbac/rbac.go."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"
    return False


def _describe(subject: Obj, binding_namespace: str) -> str:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    """``RuleAllows`` of plugin/pkg/auth/authorizer/rbac/rbac.go."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or [], attrs.path)
    if not _has(rule.get("apiGroups"), attrs.api_group):
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not (
        "*" in resources
        or combined in resources
        or (attrs.subresource and f"*/{attrs.subresource}" in resources)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _has(values: Any, wanted: str) -> bool:
    values = values or []
    return "*" in values or wanted in values


def _url_matches(urls: list[str], path: str) -> bool:
    return any(url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1])) for url in urls)


def forbidden_message(attrs: Attributes) -> str:
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" {where}'


def forbidden(attrs: Attributes) -> ApiError:
    """``apierrors.NewForbidden(groupResource, name, forbiddenMessage)``, as the apiserver answers."""
    why = forbidden_message(attrs)
    if not attrs.resource_request:
        return ApiError(403, "Forbidden", f"forbidden: {why}")
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    details: Obj = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    details["kind"] = attrs.resource
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def impersonate(user: UserInfo, headers: Mapping[str, str], authorizer: Authorizer) -> UserInfo:
    """The user an ``Impersonate-User`` (and ``Impersonate-Group``) request acts as, once ``user`` may
    ``impersonate`` them (staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go): a
    ServiceAccount name needs the verb on ``serviceaccounts`` in its namespace, any other on ``users``, each
    group on ``groups``. kubectl's ``--as`` / ``--as-group``. Only one group header is read (the request's
    headers are a mapping)."""
    name = headers.get("impersonate-user", "")
    group = headers.get("impersonate-group", "")
    if not name:
        if group:
            raise ApiError(400, "BadRequest", f"requested [{{Group  {group} }}] without impersonating a user")
        return user
    namespace, _, account = name.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if name.startswith(SERVICE_ACCOUNT_PREFIX) and account:
        checks = [("serviceaccounts", namespace, account)]
        groups = [] if group else [SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}"]
    else:
        checks, groups = [("users", "", name)], []
    if group:
        checks.append(("groups", "", group))
        groups.append(group)
    for resource, where, target in checks:
        authorizer.check(
            Attributes(user, "impersonate", True, resource=resource, namespace=where, name=target)
        )
    if AUTHENTICATED not in groups:
        groups.append(AUTHENTICATED)
    return UserInfo(name, tuple(groups))


def access_endpoint(
    target: Route, request: Request, user: UserInfo, tokens: Tokens, authorizer: Authorizer
) -> Response | None:
    """TokenRequest and the self-reviews, answered for the caller and never stored; None for any other
    resource route."""
    assert target.rt is not None
    review = REVIEW_KINDS.get((target.rt.group, target.rt.plural))
    token = target.subresource == "token" and target.rt.plural == "serviceaccounts"
    if review is None and not token:
        return None
    if request.method != "POST" or (review is not None and target.name is not None):
        raise method_not_allowed()
    body = decode_body(request) if request.body.strip() else None
    body = body if isinstance(body, dict) else None
    if review is not None:
        return json_response(201, authorizer.review(review, user, body))
    assert target.namespace is not None and target.name is not None
    return json_response(201, tokens.token_request(target.namespace, target.name, body))
