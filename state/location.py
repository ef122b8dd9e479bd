"""Where a state lives, from what the user wrote: a path, ``file://PATH`` or ``kubernetes://NAMESPACE/NAME``.

Callers: :func:`gpuplan.context.state_backend` (``--state``, ``spec.state``) and ``gpuplan state migrate
--to URL``. Pure: this layer never talks to the cluster; the backend for a :class:`KubernetesLocation` lives
in :mod:`gpuplan.providers.state_secret`.

Anything that looks like a URL (``scheme://``) and is not one of the two gpuplan understands is an error,
never a file of that name: ``--state s3://bucket/x`` read as a local path would start an empty state beside
the spec and report "nothing is managed yet". ``scheme:/rest`` counts as a URL too: a click ``Path`` option
collapses the two slashes of ``kubernetes://ns/x`` into one, and no one names a folder ``kubernetes:``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import StateError

KUBERNETES_SCHEME = "kubernetes"
FILE_SCHEME = "file"
DEFAULT_LEASE_SECONDS = 60
"""How long a Lease not renewed still holds the lock (design §7.2); ``spec.state.leaseDurationSeconds``."""

SECRET_PREFIX = "gpuplan-state-"
LEASE_PREFIX = "gpuplan-lock-"
PART_INFIX = "-part-"
MAX_NAME = 40
"""Long enough for a team's name, short enough that ``gpuplan-state-<name>-part-<n>`` stays a valid label."""

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PART_LIKE = re.compile(r".*-part-[0-9]+")
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?P<slashes>/+)(?P<rest>.*)", re.DOTALL)
_FORMS = "a path, file:///abs/path or kubernetes://NAMESPACE/NAME"


@dataclass(frozen=True)
class KubernetesLocation:
    """A state kept in the cluster: Secret ``gpuplan-state-<name>`` and Lease ``gpuplan-lock-<name>``."""

    namespace: str
    name: str
    lease_seconds: int = DEFAULT_LEASE_SECONDS

    @property
    def url(self) -> str:
        return f"{KUBERNETES_SCHEME}://{self.namespace}/{self.name}"

    @property
    def secret_name(self) -> str:
        return SECRET_PREFIX + self.name

    @property
    def lease_name(self) -> str:
        return LEASE_PREFIX + self.name

    def part_name(self, index: int) -> str:
        """The Secret of chunk ``index`` (0 is the main Secret itself)."""
        return self.secret_name if index == 0 else f"{self.secret_name}{PART_INFIX}{index}"


Location = Path | KubernetesLocation


def parse_location(text: str, *, lease_seconds: int = DEFAULT_LEASE_SECONDS) -> Location:
    """The location ``text`` names; a URL gpuplan does not understand is a :class:`StateError`."""
    match = _URL.fullmatch(text)
    if match is None:
        if not text:
            raise StateError("the state location is empty", hint=f"pass {_FORMS}")
        return Path(text)
    scheme, rest = match["scheme"], match["rest"]
    shown = f"{scheme}://{rest}"
    if scheme == FILE_SCHEME:
        return Path("/" + rest)
    if scheme == KUBERNETES_SCHEME:
        namespace, _, name = rest.partition("/")
        return kubernetes_location(namespace, name, lease_seconds=lease_seconds, where=shown)
    raise StateError(
        f"gpuplan does not understand the state URL scheme {scheme}://",
        where=shown,
        detail="gpuplan keeps a state in a local file or in the cluster (a Secret and a Lease).",
        hint=f"pass {_FORMS}",
    )


def kubernetes_location(
    namespace: str, name: str, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, where: str = ""
) -> KubernetesLocation:
    """A checked :class:`KubernetesLocation`: a namespace and a name that make valid object names."""
    where = where or f"{KUBERNETES_SCHEME}://{namespace}/{name}"
    hint = "write kubernetes://NAMESPACE/NAME, e.g. kubernetes://gpu-operator/team-a"
    if not namespace or not name or "/" in name:
        raise StateError(
            "a kubernetes:// state URL names a namespace and a state name, nothing more or less",
            where=where,
            hint=hint,
        )
    if not _LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise StateError(
            f"{namespace!r} is not a namespace name (lower case letters, digits and '-', at most 63)",
            where=where,
            hint=hint,
        )
    if not _LABEL.fullmatch(name) or len(name) > MAX_NAME:
        raise StateError(
            f"{name!r} is not a state name (lower case letters, digits and '-', at most {MAX_NAME})",
            where=where,
            hint=hint,
        )
    if _PART_LIKE.fullmatch(name):
        # gpuplan-state-x-part-1 is the second chunk of state x: such a name would read another state's part
        raise StateError(
            f"a state name may not end in -part-<number> ({name!r})", where=where, hint="choose another name"
        )
    if lease_seconds < 1:
        raise StateError(f"leaseDurationSeconds must be at least 1, not {lease_seconds}", where=where)
    return KubernetesLocation(namespace, name, lease_seconds)


def describe(location: Location) -> str:
    """How errors and messages name a location."""
    return location.url if isinstance(location, KubernetesLocation) else str(location)
