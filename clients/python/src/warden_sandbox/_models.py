"""What the API gives back, as typed objects. Unknown keys from a newer
daemon are ignored, so an older client keeps working."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, TypeVar


def _opt_int(v: Any) -> int | None:
    return int(v) if v is not None else None


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the daemon shows it."""

    id: str
    #: ``running``, ``paused`` (its processes frozen in place) or ``stopped``.
    state: str
    profile: str | None
    labels: dict[str, str]
    #: Its workspace directory on the daemon's host, shown to the daemon's
    #: owner only: empty for a token holder (host paths are the owner's).
    workspace: str
    created_ms: int
    age_seconds: int
    #: When its TTL stops it (ms since the epoch), while it runs.
    ttl_deadline_ms: int | None
    memory_bytes: int | None
    egress_bytes: int
    processes: int
    #: Commands still running.
    execs: int
    #: Bytes of changes in its workspace layer.
    changes_bytes: int

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SandboxInfo:
        return cls(
            id=str(d["id"]),
            state=str(d["state"]),
            profile=d.get("profile"),
            labels=dict(d.get("labels") or {}),
            workspace=str(d.get("workspace", "")),
            created_ms=int(d.get("created_ms", 0)),
            age_seconds=int(d.get("age_seconds", 0)),
            ttl_deadline_ms=_opt_int(d.get("ttl_deadline_ms")),
            memory_bytes=_opt_int(d.get("memory_bytes")),
            egress_bytes=int(d.get("egress_bytes", 0)),
            processes=int(d.get("processes", 0)),
            execs=int(d.get("execs", 0)),
            changes_bytes=int(d.get("changes_bytes", 0)),
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot of a sandbox's files (its workspace layer and home) and
    options, to make sandboxes from; for a VM sandbox that could be paused
    to disk, its memory too (see :attr:`memory`)."""

    name: str
    #: The sandbox it was taken from.
    source: str
    created_ms: int
    #: Bytes it holds (a VM's saved memory included).
    bytes: int
    #: Whether it holds its source's memory: a sandbox made from it goes
    #: on from the source's processes (each copy reseeded, with its own
    #: hostname). False: its files only; a sandbox made from it starts
    #: with them and runs nothing until asked (always so for the process
    #: backend, whose processes no copy carries).
    memory: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SnapshotInfo:
        return cls(
            name=str(d["name"]),
            source=str(d.get("source", "")),
            created_ms=int(d.get("created_ms", 0)),
            bytes=int(d.get("bytes", 0)),
            memory=bool(d.get("memory", False)),
        )


S = TypeVar("S")


class Forks(List[S]):
    """The sandboxes a fork made (a list, in the order the daemon made
    them), with what they carry of their source: :attr:`memory` says
    whether its memory came with its files, :attr:`memory_why` why not."""

    #: Whether each fork goes on from the source's processes (a VM sandbox
    #: that could be paused to disk: its memory copied, each fork
    #: reseeded, with its own hostname). False: its files only.
    memory: bool
    #: Why the memory was not carried (``None`` when it was): the process
    #: backend's processes are never carried (that needs CRIU); a VM's
    #: when it could not be paused to disk (no ``--rootfs``, a process
    #: holding a share).
    memory_why: str | None

    def __init__(self, sandboxes: Iterable[S] = (), memory: bool = False, memory_why: str | None = None) -> None:
        super().__init__(sandboxes)
        self.memory = memory
        self.memory_why = memory_why

    def __repr__(self) -> str:
        return f"Forks({list.__repr__(self)}, memory={self.memory!r}, memory_why={self.memory_why!r})"


@dataclass(frozen=True)
class CommandInfo:
    """A command, running or ended."""

    id: str
    sandbox: str
    argv: list[str]
    #: Its PID inside the sandbox.
    pid: int | None
    started_ms: int
    #: Its exit status once it ended (128+N for signal N, 124 on timeout).
    exit_code: int | None
    signal: int | None
    finished_ms: int | None
    #: A terminal session (``sb.pty.create``): recorded, with no output to
    #: replay.
    tty: bool = False
    #: Bytes of standard output (and error) the command wrote past the
    #: sandbox's output budget: dropped, not kept (see :attr:`output_cut`).
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def running(self) -> bool:
        return self.exit_code is None

    @property
    def output_cut(self) -> bool:
        """Whether some of its output was dropped, past the sandbox's
        output budget (a quarter of its ``disk``)."""
        return self.stdout_dropped > 0 or self.stderr_dropped > 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CommandInfo:
        return cls(
            id=str(d["id"]),
            sandbox=str(d.get("sandbox", "")),
            argv=[str(a) for a in d.get("argv") or []],
            pid=_opt_int(d.get("pid")),
            started_ms=int(d.get("started_ms", 0)),
            exit_code=_opt_int(d.get("exit_status")),
            signal=_opt_int(d.get("signal")),
            finished_ms=_opt_int(d.get("finished_ms")),
            tty=bool(d.get("tty", False)),
            stdout_dropped=int(d.get("stdout_dropped") or 0),
            stderr_dropped=int(d.get("stderr_dropped") or 0),
        )


@dataclass(frozen=True)
class CommandResult:
    """A command that ended: its status and what it wrote.

    A non-zero ``exit_code`` is not an exception; call :meth:`check` (or
    pass ``check=True`` to ``run``) to make it one.
    """

    id: str
    exit_code: int
    #: Standard output as text (bytes that are not UTF-8 replaced); the
    #: exact bytes are in :attr:`stdout_bytes`.
    stdout: str
    stderr: str
    stdout_bytes: bytes = field(repr=False)
    stderr_bytes: bytes = field(repr=False)
    #: The signal that ended it, if one did.
    signal: int | None = None
    #: Whether its ``timeout`` ended it (``exit_code`` is then 124).
    timed_out: bool = False
    #: Bytes of standard output (and error) it wrote past the sandbox's
    #: output budget: dropped, so ``stdout`` ends before what it wrote.
    stdout_dropped: int = 0
    stderr_dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def output_cut(self) -> bool:
        """Whether some of its output was dropped, past the sandbox's
        output budget (a quarter of its ``disk``)."""
        return self.stdout_dropped > 0 or self.stderr_dropped > 0

    def check(self) -> CommandResult:
        """This result, or :class:`CommandExitError` when it failed."""
        from ._errors import CommandExitError

        if self.exit_code != 0:
            raise CommandExitError(self)
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CommandResult:
        def exact(text_key: str, b64_key: str) -> bytes:
            b64 = d.get(b64_key)
            if isinstance(b64, str):
                return base64.b64decode(b64)
            return str(d.get(text_key) or "").encode("utf-8")

        out = exact("stdout", "stdout_base64")
        err = exact("stderr", "stderr_base64")
        return cls(
            id=str(d.get("id", "")),
            exit_code=int(d["exit_status"]),
            stdout=str(d.get("stdout") or ""),
            stderr=str(d.get("stderr") or ""),
            stdout_bytes=out,
            stderr_bytes=err,
            signal=_opt_int(d.get("signal")),
            timed_out=bool(d.get("timed_out", False)),
            stdout_dropped=int(d.get("stdout_dropped") or 0),
            stderr_dropped=int(d.get("stderr_dropped") or 0),
        )


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a command's output as it streams: ``stream`` is
    ``stdout`` or ``stderr``, ``offset`` where it starts in that stream."""

    stream: str
    data: bytes
    offset: int

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Approval:
    """A question of ask mode waiting for an answer: may the sandbox
    connect to ``name`` on ``port``? Answer it with
    :meth:`Approvals.answer` before ``deadline_ms``, or it is denied."""

    id: str
    sandbox: str
    #: ``tls``, ``http``, ``connect`` or ``tcp``.
    protocol: str
    name: str
    port: int
    #: When it was asked (ms since the epoch).
    asked_ms: int
    #: When it is denied unanswered.
    deadline_ms: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Approval:
        return cls(
            id=str(d["id"]),
            sandbox=str(d.get("sandbox", "")),
            protocol=str(d.get("protocol", "")),
            name=str(d.get("name", "")),
            port=int(d.get("port", 0)),
            asked_ms=int(d.get("asked_ms", 0)),
            deadline_ms=int(d.get("deadline_ms", 0)),
        )


@dataclass(frozen=True)
class ChangeFlag:
    """A reason to look twice at a change."""

    #: Stable: ``git-hook``, ``git-config``, ``host-exec``, ``ci``,
    #: ``executable``, ``symlink-escape``, ...
    rule: str
    reason: str


@dataclass(frozen=True)
class Change:
    """One change of the sandbox to its workspace (``sb.changes()``)."""

    #: Relative to the workspace.
    path: str
    #: ``added``, ``modified``, ``deleted``, ``mode``, ``type_changed``,
    #: ``renamed`` (then ``from_`` is where it came from).
    kind: str
    flags: list[ChangeFlag]
    from_: str | None = None
    #: The workspace's ``.gitignore`` (or ``.git/info/exclude``) ignores
    #: it: a commit leaves it out unless asked (``include_ignored``).
    ignored: bool = False
    #: The whole change as the daemon gave it (entries, digest, content).
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Change:
        return Change(
            path=str(d["path"]),
            kind=str(d["kind"]),
            flags=[ChangeFlag(str(f["rule"]), str(f["reason"])) for f in d.get("flags") or []],
            from_=d.get("from"),
            ignored=bool(d.get("ignored", False)),
            raw=dict(d),
        )


class Changes(List[Change]):
    """What :meth:`Sandbox.changes` found (a list of :class:`Change`),
    and :attr:`lost`: set when the sandbox's last run ended before its
    supervisor saved the layer (killed, or the host went down), whose
    changes are lost; the list is then what earlier runs saved, never
    the sandbox's whole state. A snapshot or fork of such a sandbox is
    refused (:class:`ConflictError` with code ``changes_lost``)."""

    #: Why the list is not the sandbox's whole state, or ``None``.
    lost: str | None

    def __init__(self, changes: Iterable[Change] = (), lost: str | None = None) -> None:
        super().__init__(changes)
        self.lost = lost

    def __repr__(self) -> str:
        return f"Changes({list.__repr__(self)}, lost={self.lost!r})"


@dataclass(frozen=True)
class CommitResult:
    """What ``sb.commit()`` applied to the real workspace."""

    applied: list[str]
    #: Paths changed on the host too, overwritten with ``force``.
    forced: list[str]

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> CommitResult:
        return CommitResult(
            applied=[str(p) for p in d.get("applied") or []],
            forced=[str(p) for p in d.get("forced") or []],
        )
