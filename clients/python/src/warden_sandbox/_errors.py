"""Errors: what the daemon refused (a problem object with a stable ``code``,
a ``message`` for people and, when one option is at fault, its ``field``),
the daemon not being reachable, and a command that failed when asked to
succeed."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Type

if TYPE_CHECKING:
    from ._models import CommandResult

__all__ = [
    "WardenError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "InvalidRequestError",
    "TooManyRequestsError",
    "QuotaExceededError",
    "BusyError",
    "ServerError",
    "WardenConnectionError",
    "CommandExitError",
]


class WardenError(Exception):
    """The daemon answered with an error.

    ``status`` is the HTTP status; ``code`` the problem's stable code
    (``invalid_spec``, ``not_found``, ``forbidden``, ...); ``message`` what
    was wrong and what to do; ``field`` the JSON path of the request's
    field at fault (e.g. ``/spec/resources/memory``), when one is;
    ``details`` the items a refusal is about, when there are several (the
    flagged changes of a refused commit, its conflicts); ``reason`` the
    stable reason code under ``code`` when the daemon gives one (a 409
    ``conflict`` whose reason is ``changes_lost``); ``retry_after`` the
    seconds the daemon said to wait before asking again (its
    ``Retry-After``), for a refusal that passes by itself, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: str = "error",
        field: Optional[str] = None,
        details: Any = None,
        reason: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.details = details
        self.reason = reason
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f" (at {self.field})" if self.field else ""
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.code}: {self.message}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, field={self.field!r})"
        )


class BadRequestError(WardenError):
    """400: the request was malformed (a bad name, query or value)."""


class AuthenticationError(WardenError):
    """401: no token, or a token the daemon does not know (or revoked)."""


class PermissionDeniedError(WardenError):
    """403: the token lacks the scope, is for another sandbox, or asked for
    something only the daemon's owner may do."""


class NotFoundError(WardenError):
    """404: no such sandbox, command or route."""


class ConflictError(WardenError):
    """409: the sandbox is not in a state that allows it (not running,
    already exists, standard input closed, ...)."""


class InvalidRequestError(WardenError):
    """422: the request is well-formed but its content is refused (an
    invalid spec: ``field`` says where)."""


class TooManyRequestsError(WardenError):
    """429: the daemon would not take this on now. Every 429 is one, so
    code that catches this catches both kinds below (and a 429 of a code
    this client does not know yet is this class itself)."""


class QuotaExceededError(TooManyRequestsError):
    """429 ``quota``: the token's quota (sandboxes, memory, disk,
    snapshots) would be exceeded. It stays so until something of the
    token's is removed: waiting alone does not help (``retry_after`` is
    ``None``)."""


class BusyError(TooManyRequestsError):
    """429 ``too_many_sessions``: a bound on long-lived answers is full
    (``details["bound"]``). ``per_daemon`` (other tokens' sessions) and a
    sandbox's supervisor serving all it may (``reason`` ``busy``,
    ``per_sandbox``) pass by themselves: ``retry_after`` says when to ask
    again. The caller's own bounds (``per_token``, ``per_kind``) pass when
    it closes one of its own sessions (``retry_after`` is ``None``).

    429 ``too_many_watches`` likewise, for the files watches' own bounds:
    ``per_token`` (the caller's watches; closing one passes it) and
    ``per_daemon`` (every token's, with ``retry_after``)."""


class ServerError(WardenError):
    """5xx: the daemon failed."""


class WardenConnectionError(WardenError):
    """The daemon could not be reached (is ``warden serve`` running?)."""


_BY_STATUS: Dict[int, Type[WardenError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidRequestError,
    429: TooManyRequestsError,
}

#: A 429's class by its problem's code.
_BY_CODE_429: Dict[str, Type[WardenError]] = {
    "quota": QuotaExceededError,
    "too_many_sessions": BusyError,
    "too_many_watches": BusyError,
}

#: The longest wait a ``Retry-After`` is taken for (a day): a larger or
#: unreadable value is not passed on as a wait.
_MOST_RETRY_AFTER = 86400.0


def retry_after_of(headers: Optional[Mapping[str, str]]) -> Optional[float]:
    """The seconds a ``Retry-After`` header says to wait: delta-seconds or
    an HTTP date (seconds from now, at least 0); ``None`` when there is
    none or it cannot be read."""
    if headers is None:
        return None
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    seconds: Optional[float]
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
    if seconds > _MOST_RETRY_AFTER:
        return None
    return seconds


def error_from_response(
    status: int, body: bytes, headers: Optional[Mapping[str, str]] = None
) -> WardenError:
    """The exception for an error answer: its problem object when the body
    is one, else the status and whatever text came; ``headers``, when
    given, for its ``Retry-After``."""
    problem: Any = None
    try:
        problem = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        problem = None
    if isinstance(problem, dict) and isinstance(problem.get("message"), str):
        code = str(problem.get("code") or f"http_{status}")
        message = problem["message"]
        field = problem.get("field")
        field = field if isinstance(field, str) else None
        details = problem.get("details")
        reason = problem.get("reason")
        reason = reason if isinstance(reason, str) else None
    else:
        code = f"http_{status}"
        text = body.decode("utf-8", errors="replace").strip()
        message = text or f"the daemon answered HTTP {status}"
        field = None
        details = None
        reason = None
    cls = _BY_CODE_429.get(code, TooManyRequestsError) if status == 429 else _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else WardenError
    return cls(
        message,
        status=status,
        code=code,
        field=field,
        details=details,
        reason=reason,
        retry_after=retry_after_of(headers),
    )


class CommandExitError(Exception):
    """A command run with ``check=True`` exited with a non-zero status;
    ``result`` holds its status and output."""

    def __init__(self, result: "CommandResult") -> None:
        how = " (timed out)" if result.timed_out else ""
        super().__init__(
            f"command {result.id} exited with status {result.exit_code}{how}: "
            f"{result.stderr.strip()[-500:]}"
        )
        self.result = result
        self.exit_code = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr
