"""Python client for warden's daemon (``warden serve``): sandboxes for AI
agents and untrusted code.

::

    from warden_sandbox import Sandbox

    with Sandbox.create(timeout=600) as sb:
        r = sb.commands.run("python3 -c 'print(6 * 7)'")
        print(r.exit_code, r.stdout)

The daemon is found through ``host`` or ``$WARDEN_HOST``
(``unix:///path/to/daemon.sock`` or ``http://127.0.0.1:PORT``), else its
socket in warden's state directory; a token (needed over TCP) through
``token`` or ``$WARDEN_TOKEN``.

Every sandbox of a process talks to its daemon over one connection pool
(one per event loop for the asyncio client), closed at exit, or by
:func:`close` (:func:`aclose` for the running loop's).
"""

from ._async import (
    AsyncApprovals,
    AsyncClient,
    AsyncCommandHandle,
    AsyncCommands,
    AsyncEgress,
    AsyncSandbox,
)
from ._core import default_socket, default_state_dir
from ._pool import aclose, close
from ._errors import (
    AuthenticationError,
    BadRequestError,
    CommandExitError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    BusyError,
    TooManyRequestsError,
    ServerError,
    WardenConnectionError,
    WardenError,
)
from ._models import Approval, CommandInfo, CommandResult, Forks, OutputChunk, SandboxInfo, SnapshotInfo
from ._sync import Approvals, Client, CommandHandle, Commands, Egress, Sandbox
from ._models import (
    Change,
    Changes,
    ChangeFlag,
    CommandInfo,
    CommandResult,
    CommitResult,
    OutputChunk,
    SandboxInfo,
)
from ._files import AsyncFiles, AsyncFileWatch, FileEntry, FileEvent, Files, FileWatch
from ._pty import AsyncPty, AsyncPtyHandle, Pty, PtyHandle
from ._desktop import AsyncDesktop, Desktop, DesktopInfo
from ._sync import CommandHandle, Commands, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "Commands",
    "CommandHandle",
    "AsyncSandbox",
    "AsyncCommands",
    "AsyncCommandHandle",
    "Egress",
    "AsyncEgress",
    "Client",
    "AsyncClient",
    "Approvals",
    "AsyncApprovals",
    "Approval",
    "Files",
    "FileWatch",
    "FileEvent",
    "FileEntry",
    "AsyncFiles",
    "AsyncFileWatch",
    "Desktop",
    "AsyncDesktop",
    "DesktopInfo",
    "Pty",
    "PtyHandle",
    "AsyncPty",
    "AsyncPtyHandle",
    "SandboxInfo",
    "SnapshotInfo",
    "Forks",
    "CommandInfo",
    "CommandResult",
    "OutputChunk",
    "Change",
    "Changes",
    "ChangeFlag",
    "CommitResult",
    "WardenError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "InvalidRequestError",
    "QuotaExceededError",
    "BusyError",
    "TooManyRequestsError",
    "ServerError",
    "WardenConnectionError",
    "CommandExitError",
    "default_socket",
    "default_state_dir",
    "close",
    "aclose",
]
