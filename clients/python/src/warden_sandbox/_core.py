"""What the synchronous and the asynchronous clients share: where the
daemon is, the requests' bodies, and reading answers and streams. Nothing
here does I/O; ``_sync`` and ``_async`` only send and receive."""

from __future__ import annotations

import base64
import codecs
import json
import math
import os
import pwd
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar, Union
from urllib.parse import quote, urlsplit

import httpx

from ._errors import WardenConnectionError, WardenError, error_from_response
from ._models import CommandResult, Forks, OutputChunk, SandboxInfo

T = TypeVar("T")

#: The socket's name in warden's state directory.
SOCKET_FILE = "daemon.sock"
#: How long an ordinary call may take (creating a sandbox starts it).
DEFAULT_TIMEOUT = 60.0
#: A command's own output stream may stay quiet for a long time: the
#: daemon says it is alive every 15 s, so this much silence means it is
#: gone.
STREAM_READ_TIMEOUT = 90.0
#: How often a stream that broke is taken up again from where it stopped.
STREAM_RETRIES = 5

Command = Union[str, Sequence[str]]
Labels = Union[str, Mapping[str, str], None]


def _absolute(var: str) -> str | None:
    v = os.environ.get(var)
    return v if v and os.path.isabs(v) else None


def _host_root() -> bool:
    """UID 0 of the initial user namespace (which maps every ID to
    itself), as warden itself decides where its state lives."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            lines = [ln.split() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return False
    return lines == [["0", "0", "4294967295"]]


def default_state_dir() -> str | None:
    """warden's state directory, found the way warden finds it:
    ``$WARDEN_STATE_DIR``; ``/var/lib/warden`` for the host's root; else
    ``$XDG_STATE_HOME/warden``; else ``~/.local/state/warden`` (relative
    values are ignored)."""
    if d := _absolute("WARDEN_STATE_DIR"):
        return d
    if _host_root():
        return "/var/lib/warden"
    if d := _absolute("XDG_STATE_HOME"):
        return os.path.join(d, "warden")
    home = _absolute("HOME")
    if home is None:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = None
        if home is not None and not os.path.isabs(home):
            home = None
    return os.path.join(home, ".local/state/warden") if home else None


def default_socket() -> str:
    d = default_state_dir()
    if d is None:
        raise WardenConnectionError(
            "warden has no state directory here: set WARDEN_HOST, or "
            "WARDEN_STATE_DIR, XDG_STATE_HOME or HOME to an absolute path",
            code="no_host",
        )
    return os.path.join(d, SOCKET_FILE)


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon listens and how to present oneself."""

    #: The base URL requests are made against.
    base_url: str
    #: The Unix socket, when it is one.
    socket: str | None
    token: str | None
    #: For messages: ``unix:///...`` or the URL.
    where: str

    def headers(self) -> dict[str, str]:
        h = {"user-agent": "warden-sandbox-python/0.1"}
        if self.token:
            h["authorization"] = f"Bearer {self.token}"
        return h


def resolve_endpoint(host: str | None = None, token: str | None = None) -> Endpoint:
    """The daemon to talk to: ``host`` or ``$WARDEN_HOST``
    (``unix:///path/to/daemon.sock``, a socket's absolute path, or
    ``http://ADDR:PORT``), else the socket in warden's state directory;
    ``token`` or ``$WARDEN_TOKEN``."""
    host = host or os.environ.get("WARDEN_HOST") or None
    token = token or os.environ.get("WARDEN_TOKEN") or None
    if host is None:
        sock = default_socket()
        return Endpoint("http://warden", sock, token, f"unix://{sock}")
    if host.startswith("unix://"):
        sock = host[len("unix://") :]
        if not os.path.isabs(sock):
            raise WardenConnectionError(
                f"host {host!r}: a socket is given by its absolute path, "
                "e.g. unix:///home/me/.local/state/warden/daemon.sock",
                code="bad_host",
            )
        return Endpoint("http://warden", sock, token, host)
    if host.startswith("/"):
        return Endpoint("http://warden", host, token, f"unix://{host}")
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise WardenConnectionError(
            f"host {host!r} is neither unix:///PATH nor http://ADDR:PORT",
            code="bad_host",
        )
    return Endpoint(host.rstrip("/"), None, token, host)


def connection_error(ep: Endpoint, e: Exception) -> WardenConnectionError:
    hint = (
        " (is `warden serve` running? set WARDEN_HOST to reach another daemon)"
        if isinstance(e, httpx.ConnectError)
        else ""
    )
    return WardenConnectionError(
        f"cannot reach warden's daemon at {ep.where}: {e}{hint}",
        code="unreachable",
    )


def check(response: httpx.Response) -> None:
    """Raise the API's error for an error answer (its body already read)."""
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.content, response.headers)


def json_of(response: httpx.Response) -> Any:
    check(response)
    try:
        return response.json()
    except ValueError as e:
        raise WardenError(
            f"the daemon's answer is not JSON: {e}", status=response.status_code, code="bad_answer"
        ) from e


def forks_of(d: Mapping[str, Any], make: Callable[[str], T]) -> Forks[T]:
    """A fork's answer: its sandboxes, made by ``make`` from their ids,
    with whether they carry the source's memory and why not (an older
    daemon that does not say: files only, reason unknown)."""
    why = d.get("memory_why")
    return Forks(
        (make(str(s["id"])) for s in d.get("sandboxes", [])),
        memory=bool(d.get("memory", False)),
        memory_why=str(why) if why is not None else None,
    )


def sandbox_path(sandbox: str, *rest: str) -> str:
    tail = "".join("/" + quote(p, safe="") for p in rest)
    return f"/v1/sandboxes/{quote(sandbox, safe='')}{tail}"


def snapshot_path(snapshot: str, *rest: str) -> str:
    tail = "".join("/" + quote(p, safe="") for p in rest)
    return f"/v1/snapshots/{quote(snapshot, safe='')}{tail}"


def new_name() -> str:
    """A new sandbox's name, as the daemon would give one."""
    import secrets

    return "sb-" + secrets.token_hex(6)


# ---- requests ---------------------------------------------------------------


def create_body(
    *,
    profile: str | None,
    spec: Mapping[str, Any] | None,
    workspace: str | os.PathLike[str] | None,
    timeout: float | None,
    labels: Mapping[str, str] | None,
    name: str | None,
    start: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if profile is not None:
        body["profile"] = profile
    if spec is not None:
        body["spec"] = dict(spec)
    if workspace is not None:
        body["workspace"] = os.path.abspath(os.fspath(workspace))
    if timeout is not None:
        body["ttl_seconds"] = ttl_seconds(timeout)
    if labels:
        body["labels"] = {str(k): str(v) for k, v in labels.items()}
    if not start:
        body["start"] = False
    return body


def ttl_seconds(timeout: float) -> int:
    if timeout < 0 or math.isnan(timeout):
        raise ValueError(f"timeout {timeout!r}: a number of seconds, 0 or more")
    return math.ceil(timeout)


def list_params(state: str | None, label: Labels) -> tuple[dict[str, str], dict[str, str]]:
    """The query of ``GET /v1/sandboxes`` and the labels left to filter on
    here (the API takes one label; the others are matched by the client)."""
    params: dict[str, str] = {}
    if state is not None:
        params["state"] = state
    wanted: dict[str, str] = {}
    if isinstance(label, str):
        k, sep, v = label.partition("=")
        if not sep:
            raise ValueError(f"label {label!r} is not KEY=VALUE")
        wanted[k] = v
    elif label:
        wanted = {str(k): str(v) for k, v in label.items()}
    rest = dict(wanted)
    if rest:
        k = next(iter(rest))
        params["label"] = f"{k}={rest.pop(k)}"
    return params, rest


def matching(infos: list[SandboxInfo], rest: Mapping[str, str]) -> list[SandboxInfo]:
    return [i for i in infos if all(i.labels.get(k) == v for k, v in rest.items())]


@dataclass(frozen=True)
class ExecPlan:
    """An exec request's body, and standard input that could not go in it
    (bytes that are not UTF-8: written through ``.../stdin`` after the
    start)."""

    body: dict[str, Any]
    pending_stdin: bytes | None


def exec_plan(
    cmd: Command,
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    stdin: str | bytes | None,
    stdin_open: bool,
    timeout: float | None,
) -> ExecPlan:
    body: dict[str, Any] = {}
    if isinstance(cmd, str):
        body["shell"] = cmd
    else:
        argv = [str(a) for a in cmd]
        if not argv:
            raise ValueError("the command is empty: give a program and its arguments")
        body["argv"] = argv
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd is not None:
        body["cwd"] = cwd
    if timeout is not None:
        if not (timeout > 0):
            raise ValueError(f"timeout {timeout!r}: a number of seconds above 0")
        body["timeout_seconds"] = float(timeout)
    pending: bytes | None = None
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        raw = bytes(stdin)
        try:
            body["stdin"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            pending = raw
    elif stdin is not None:
        body["stdin"] = str(stdin)
    if stdin_open or pending is not None:
        body["stdin_open"] = True
    return ExecPlan(body, pending)


def stdin_body(data: str | bytes, close: bool) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if isinstance(data, str):
        if data:
            body["data"] = data
    elif data:
        body["data_base64"] = base64.b64encode(bytes(data)).decode("ascii")
    if close:
        body["close"] = True
    return body


# ---- streams ----------------------------------------------------------------


@dataclass
class ExecStream:
    """A command's output as it comes, from the ``ExecEvent`` lines of
    ``exec`` (stream) and ``.../output``: output kept, offsets for taking
    a broken stream up again, the end."""

    id: str | None = None
    pid: int | None = None
    stdout_offset: int = 0
    stderr_offset: int = 0
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    exit: dict[str, Any] | None = None

    def feed(self, event: Mapping[str, Any]) -> OutputChunk | None:
        """Take one event; the new output it holds, if any (a chunk seen
        before, after a reconnection, is not given twice)."""
        kind = event.get("type")
        if kind == "started":
            self.id = str(event.get("id", self.id))
            pid = event.get("pid")
            self.pid = int(pid) if pid is not None else None
            return None
        if kind == "exited":
            self.exit = dict(event)
            return None
        if kind not in ("stdout", "stderr"):
            return None  # keepalive, or something newer than this client
        b64 = event.get("data_base64")
        data = base64.b64decode(b64) if isinstance(b64, str) else str(event.get("data") or "").encode()
        offset = int(event.get("offset", 0))
        current = self.stdout_offset if kind == "stdout" else self.stderr_offset
        if offset + len(data) <= current and data:
            return None
        if offset < current:
            data = data[current - offset :]
            offset = current
        if not data:
            return None
        if kind == "stdout":
            self.stdout += data
            self.stdout_offset = offset + len(data)
        else:
            self.stderr += data
            self.stderr_offset = offset + len(data)
        return OutputChunk(kind, data, offset)

    @property
    def ended(self) -> bool:
        return self.exit is not None

    def result(self) -> CommandResult:
        end = self.exit or {}
        return CommandResult(
            id=self.id or "",
            exit_code=int(end.get("exit_status", -1)),
            stdout=self.stdout.decode("utf-8", errors="replace"),
            stderr=self.stderr.decode("utf-8", errors="replace"),
            stdout_bytes=bytes(self.stdout),
            stderr_bytes=bytes(self.stderr),
            signal=end.get("signal"),
            timed_out=bool(end.get("timed_out", False)),
            stdout_dropped=int(end.get("stdout_dropped") or 0),
            stderr_dropped=int(end.get("stderr_dropped") or 0),
        )

    def output_params(self) -> dict[str, int]:
        return {"stdout_offset": self.stdout_offset, "stderr_offset": self.stderr_offset}


class TextDecoders:
    """UTF-8 text for callbacks, one decoder per stream, so that a
    character split between two chunks arrives whole."""

    def __init__(self) -> None:
        self._d = {
            "stdout": codecs.getincrementaldecoder("utf-8")(errors="replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }

    def text(self, chunk: OutputChunk) -> str:
        return self._d[chunk.stream].decode(chunk.data)

    def flush(self) -> list[tuple[str, str]]:
        out = []
        for name, d in self._d.items():
            rest = d.decode(b"", final=True)
            if rest:
                out.append((name, rest))
        return out


def ndjson_event(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        v = json.loads(line)
    except ValueError as e:
        raise WardenError(f"the daemon sent a line that is not JSON: {line[:200]!r}", code="bad_answer") from e
    return v if isinstance(v, dict) else None


class SseParser:
    """Server-sent events, line by line: ``feed`` gives an event (its
    ``id`` and ``data``) when a blank line ends one."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._id: str | None = None
        self.last_id: str | None = None

    def feed(self, line: str) -> tuple[str | None, str] | None:
        if line == "":
            if not self._data:
                self._id = None
                return None
            data = "\n".join(self._data)
            ev_id = self._id
            self._data, self._id = [], None
            if ev_id is not None:
                self.last_id = ev_id
            return ev_id, data
        if line.startswith(":"):
            return None  # a comment: the keep-alive
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None


def events_params(from_: int, follow: bool) -> dict[str, str]:
    return {"from": str(int(from_)), "follow": "true" if follow else "false"}


def stream_timeout() -> httpx.Timeout:
    return httpx.Timeout(DEFAULT_TIMEOUT, read=STREAM_READ_TIMEOUT)


def exec_timeout(timeout: float | None) -> httpx.Timeout:
    """An exec answered whole waits for the command: as long as its own
    timeout and a margin, or without a limit."""
    read = None if timeout is None else timeout + DEFAULT_TIMEOUT
    return httpx.Timeout(DEFAULT_TIMEOUT, read=read)


# ---- egress and approvals -----------------------------------------------------

#: The answers a question takes.
DECISIONS = ("allow_once", "allow_always", "deny")


def entries(names: Any, what: str) -> list[str]:
    """A list of allowlist entries (a single string is refused: it would
    be read as its characters)."""
    if isinstance(names, (str, bytes)):
        raise TypeError(f"{what} takes a list of entries, e.g. [{names!r}]")
    return [str(n) for n in names]


def decision(d: str) -> str:
    if d not in DECISIONS:
        raise ValueError(f"decision {d!r}: use one of {', '.join(DECISIONS)}")
    return d


def approval_path(question: str) -> str:
    return f"/v1/approvals/{quote(question, safe='')}"
def changes_params(path: str | None, content: bool) -> dict[str, str]:
    params = {"content": "true" if content else "false"}
    if path is not None:
        params["path"] = path
    return params


def commit_body(
    paths: "list[str] | None", accept_flagged: bool, force: bool, include_ignored: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "accept_flagged": accept_flagged,
        "force": force,
        "include_ignored": include_ignored,
    }
    if paths is not None:
        if isinstance(paths, str):
            raise TypeError("paths is a list of paths, e.g. [\"src/main.py\"]")
        body["paths"] = list(paths)
    return body
