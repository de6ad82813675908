"""Errors: what the daemon refused (a problem object with a stable ``code``,
a ``message`` for people and, when one option is at fault, its ``field``),
the daemon not being reachable, and a command that failed when asked to
succeed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

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
    "QuotaExceededError",
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
    ``conflict`` whose reason is ``changes_lost``).
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
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.details = details
        self.reason = reason

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


class QuotaExceededError(WardenError):
    """429: the token's quota (sandboxes, memory) would be exceeded."""


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
    429: QuotaExceededError,
}


def error_from_response(status: int, body: bytes) -> WardenError:
    """The exception for an error answer: its problem object when the body
    is one, else the status and whatever text came."""
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
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else WardenError
    return cls(message, status=status, code=code, field=field, details=details, reason=reason)


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
