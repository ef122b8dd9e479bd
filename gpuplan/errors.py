"""The one error hierarchy of gpuplan, and the exit codes of design §4.

Every error a user can cause is a :class:`GpuplanError`: the CLI prints it as one ``Error:`` line with an
indented detail and hint, and exits with its ``exit_code``; no traceback. Anything else is a bug: the CLI
prints one line and writes the traceback to ``gpuplan-debug.log``.

    GpuplanError                      exit 1
     ├─ UsageError                    exit 64 (click's own usage errors are remapped to it)
     ├─ ConfigError (ValueError)      a spec, scenario or plan file is malformed
     ├─ StateError                    the state file is unreadable, foreign or older
     │   ├─ StateLockedError          another run holds the lock
     │   └─ StalePlanError            a saved plan no longer matches state or cluster
     ├─ ProviderError                 the cluster or NVML said no
     │   ├─ ClusterUnreachableError
     │   ├─ AccessDeniedError
     │   ├─ ConflictError
     │   └─ TransientProviderError    worth retrying (retry_after seconds, when the server said)
     ├─ Refusals                      several errors at once (the rules a plan breaks), an Error: line each
     ├─ ApplyFailedError              a change failed its gate (rolled_back says whether it was undone)
     │   └─ ApplyInterruptedError     exit 130: Ctrl-C or SIGTERM stopped the walk (undone as any failure)
     └─ Interrupted                   exit 130: Ctrl-C anywhere else (while planning: nothing was changed)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2  # changes pending (plan --detailed-exitcode) or drift found (drift report)
EXIT_USAGE = 64  # EX_USAGE; click's default 2 is remapped so that cron can trust 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


class GpuplanError(Exception):
    """An error shown to the user without a traceback."""

    exit_code: ClassVar[int] = EXIT_ERROR

    def __init__(self, summary: str, *, detail: str = "", hint: str = "", where: str = "") -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail
        self.hint = hint
        self.where = where  # file:line:column, a field path, an address or an object: what the error is about

    def render(self) -> str:
        """The text the CLI prints: one ``Error:`` line, then indented detail and hint."""
        head = f"Error: {self.where}: {self.summary}" if self.where else f"Error: {self.summary}"
        lines = [head]
        lines += [f"  {line}" for line in self.detail.splitlines() if line.strip()]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        return "\n".join(lines)


class UsageError(GpuplanError):
    exit_code: ClassVar[int] = EXIT_USAGE


class ConfigError(GpuplanError, ValueError):
    pass


class StateError(GpuplanError):
    pass


class StateLockedError(StateError):
    retry_after: float | None = None
    """When the lock could be free again, in seconds, if the backend knows (a Lease's expiry); a run waiting
    for it (``--lock-timeout``) tries no sooner."""


class StalePlanError(StateError):
    pass


class ProviderError(GpuplanError):
    pass


class ClusterUnreachableError(ProviderError):
    pass


class AccessDeniedError(ProviderError):
    pass


class ConflictError(ProviderError):
    pass


class TransientProviderError(ProviderError):
    def __init__(self, summary: str, *, retry_after: float | None = None, **kwargs: str) -> None:
        super().__init__(summary, **kwargs)
        self.retry_after = retry_after


class Refusals(GpuplanError):
    """Several errors found together (every rule a plan breaks), shown as one ``Error:`` line each, so a
    user fixes them all in one round instead of one per run."""

    def __init__(self, found: Sequence[GpuplanError]) -> None:
        super().__init__(found[0].summary if found else "refused")
        self.found = tuple(found)

    def render(self) -> str:
        return "\n".join(error.render() for error in self.found)


class ApplyFailedError(GpuplanError):
    def __init__(self, summary: str, *, rolled_back: bool = False, **kwargs: str) -> None:
        super().__init__(summary, **kwargs)
        self.rolled_back = rolled_back


class ApplyInterruptedError(ApplyFailedError):
    exit_code: ClassVar[int] = EXIT_INTERRUPTED


class Interrupted(GpuplanError):
    exit_code: ClassVar[int] = EXIT_INTERRUPTED
