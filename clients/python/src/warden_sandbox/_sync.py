"""The synchronous client: :class:`Sandbox`, its :class:`Commands` and
:class:`CommandHandle`, over ``httpx.Client``."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterator, List, Literal, Mapping, overload

import httpx

from . import _core, _pool
from ._core import Command, Endpoint, ExecStream, Labels, TextDecoders
from ._errors import NotFoundError, WardenError, error_from_response
from ._models import Approval, CommandInfo, CommandResult, OutputChunk, SandboxInfo
from ._models import Change, Changes, CommandInfo, CommandResult, CommitResult, Forks, OutputChunk, SandboxInfo, SnapshotInfo
from ._desktop import Desktop
from ._files import Files
from ._pty import Pty

OutputCallback = Callable[[str], Any]


class _Http:
    """One caller of one daemon: its requests, with its token, over the
    process's pool for that daemon (``_pool``), and the API's errors."""

    def __init__(self, ep: Endpoint) -> None:
        self.ep = ep
        #: What each request carries: the pool is every caller's.
        self.headers = ep.headers()

    @property
    def client(self) -> httpx.Client:
        return _pool.sync_client(self.ep)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        try:
            r = self.client.request(
                method,
                path,
                params=params,
                json=json,
                headers=self.headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as e:
            raise _core.connection_error(self.ep, e) from e
        _core.check(r)
        return r

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return _core.json_of(self.request(method, path, **kw))

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> Iterator[httpx.Response]:
        """A streamed answer, its status checked; transport errors while
        reading it are the caller's (to take the stream up again)."""
        try:
            cm = self.client.stream(
                method,
                path,
                params=params,
                json=json,
                headers={**self.headers, **(headers or {})},
                timeout=timeout or _core.stream_timeout(),
            )
            r = cm.__enter__()
        except httpx.TransportError as e:
            raise _core.connection_error(self.ep, e) from e
        try:
            if r.status_code >= 400:
                try:
                    body = r.read()
                except httpx.TransportError as e:
                    raise _core.connection_error(self.ep, e) from e
                raise error_from_response(r.status_code, body, r.headers)
            yield r
        finally:
            cm.__exit__(None, None, None)

    def close(self) -> None:
        """Nothing to release: the pool is the process's (``_pool.close``)."""


class Sandbox:
    """A sandbox on a warden daemon.

    Make one with :meth:`create`, take up an existing one with
    :meth:`connect`. As a context manager it is removed at the end of the
    ``with`` block::

        with Sandbox.create() as sb:
            print(sb.commands.run("echo hi").stdout)
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        host: str | None = None,
        token: str | None = None,
        _http: _Http | None = None,
    ) -> None:
        self.id = sandbox_id
        self._http = _http or _Http(_core.resolve_endpoint(host, token))
        self.commands = Commands(self)
        self.egress = Egress(self)
        #: Processes on terminals: ``sb.pty.create(rows, cols, on_data=...)``.
        self.pty = Pty(self)
        #: The workspace's files: ``sb.files.watch(path, on_event=...)``.
        self.files = Files(self)
        #: A desktop sandbox's screen, input and browser:
        #: ``sb.desktop.screenshot()``, ``sb.desktop.cdp_url()``.
        self.desktop = Desktop(self)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, host={self._http.ep.where!r})"

    # ---- making and finding ----

    @classmethod
    def create(
        cls,
        profile: str | None = None,
        spec: Mapping[str, Any] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
        host: str | None = None,
        token: str | None = None,
        *,
        start: bool = True,
    ) -> Sandbox:
        """Create a sandbox (and start it, unless ``start=False``).

        ``profile``: a profile by name; ``spec``: a profile document given
        whole (the keys of a profile file, e.g. ``{"egress": {"domains":
        ["pypi.org"]}}``), over ``profile`` when both are given;
        ``workspace``: a directory on the daemon's host it works on
        (without one it gets an empty workspace of its own); ``timeout``:
        stop it this many seconds after it starts; ``labels``: to find it
        by; ``name``: its id (a new one when left out).
        """
        body = _core.create_body(
            profile=profile,
            spec=spec,
            workspace=workspace,
            timeout=timeout,
            labels=labels,
            name=name,
            start=start,
        )
        http = _Http(_core.resolve_endpoint(host, token))
        d = http.json("POST", "/v1/sandboxes", json=body)
        return cls(str(d["id"]), _http=http)

    @classmethod
    def connect(cls, sandbox_id: str, host: str | None = None, token: str | None = None) -> Sandbox:
        """An existing sandbox, by id. No request is made: a token good
        only for its commands can use it; :meth:`info` checks it exists."""
        return cls(sandbox_id, host=host, token=token)

    @classmethod
    def list(
        cls,
        state: str | None = None,
        label: Labels = None,
        host: str | None = None,
        token: str | None = None,
    ) -> List[SandboxInfo]:
        """The daemon's sandboxes: ``state`` ``running`` or ``stopped``;
        ``label`` ``"KEY=VALUE"`` or a mapping that all must match."""
        params, rest = _core.list_params(state, label)
        d = _Http(_core.resolve_endpoint(host, token)).json("GET", "/v1/sandboxes", params=params)
        infos = [SandboxInfo.from_json(s) for s in d.get("sandboxes", [])]
        return _core.matching(infos, rest)

    # ---- its life ----

    def info(self) -> SandboxInfo:
        return SandboxInfo.from_json(self._http.json("GET", _core.sandbox_path(self.id)))

    def is_running(self) -> bool:
        return self.info().running

    def start(self) -> SandboxInfo:
        """Start it again after :meth:`stop`."""
        return SandboxInfo.from_json(self._http.json("POST", _core.sandbox_path(self.id, "start")))

    def stop(self, grace: float | None = None) -> SandboxInfo:
        """Stop everything in it (SIGTERM, SIGKILL after ``grace``
        seconds, 10 by default); it stays, with its workspace, until
        :meth:`kill`."""
        body = {} if grace is None else {"grace_seconds": _core.ttl_seconds(grace)}
        return SandboxInfo.from_json(self._http.json("POST", _core.sandbox_path(self.id, "stop"), json=body))

    def pause(self) -> SandboxInfo:
        """Freeze every process in it where it is: its memory is kept, it
        uses no CPU and its timeout stands still; commands and file
        operations are refused (:class:`ConflictError`, code ``paused``)
        until :meth:`resume`. It stays paused if the daemon restarts, not
        if the daemon's host reboots."""
        return SandboxInfo.from_json(self._http.json("POST", _core.sandbox_path(self.id, "pause")))

    def resume(self) -> SandboxInfo:
        """Let a paused sandbox's processes go on where they were."""
        return SandboxInfo.from_json(self._http.json("POST", _core.sandbox_path(self.id, "resume")))

    # ---- snapshots and forks ----

    def create_snapshot(self, name: str) -> SnapshotInfo:
        """Save its files (workspace layer and home) and options as
        snapshot ``name``, which only this token sees; a running sandbox is
        paused for the copy. A VM sandbox that can be paused to disk is
        saved with its memory (:attr:`SnapshotInfo.memory`); the process
        backend's processes are not saved."""
        d = self._http.json("POST", _core.sandbox_path(self.id, "snapshots"), json={"name": name})
        return SnapshotInfo.from_json(d)

    @classmethod
    def list_snapshots(cls, host: str | None = None, token: str | None = None) -> List[SnapshotInfo]:
        """This token's snapshots (the daemon's owner: every one)."""
        d = _Http(_core.resolve_endpoint(host, token)).json("GET", "/v1/snapshots")
        return [SnapshotInfo.from_json(s) for s in d.get("snapshots", [])]

    @classmethod
    def delete_snapshot(cls, name: str, host: str | None = None, token: str | None = None) -> None:
        _Http(_core.resolve_endpoint(host, token)).request("DELETE", _core.snapshot_path(name))

    @classmethod
    def from_snapshot(
        cls,
        snapshot: str,
        name: str | None = None,
        host: str | None = None,
        token: str | None = None,
        *,
        start: bool = True,
    ) -> Sandbox:
        """A new sandbox with snapshot ``snapshot``'s files and options."""
        http = _Http(_core.resolve_endpoint(host, token))
        body = {"name": name or _core.new_name(), "start": start}
        d = http.json("POST", _core.snapshot_path(snapshot, "sandboxes"), json=body)
        return cls(str(d["id"]), _http=http)

    def fork(self, count: int = 1) -> Forks[Sandbox]:
        """``count`` new sandboxes from its current files and options, each
        its own (name, hostname, layer), started when it runs; a running
        sandbox is paused for the copy. A VM sandbox that can be paused to
        disk is forked with its memory (each fork's processes go on from
        its own); otherwise the forks carry its files only. The answer is
        the list of forks, with :attr:`Forks.memory` saying whether the
        memory came too and :attr:`Forks.memory_why` why not."""
        d = self._http.json("POST", _core.sandbox_path(self.id, "fork"), json={"count": count})
        return _core.forks_of(d, lambda sid: Sandbox(sid, _http=self._http))

    def set_timeout(self, seconds: float | None) -> SandboxInfo:
        """Stop it ``seconds`` from now (``None``: never by itself)."""
        ttl = None if seconds is None else _core.ttl_seconds(seconds)
        return SandboxInfo.from_json(
            self._http.json("POST", _core.sandbox_path(self.id, "timeout"), json={"ttl_seconds": ttl})
        )

    def kill(self) -> None:
        """Remove it: stop what runs in it and delete it with its
        workspace layer."""
        self._http.request("DELETE", _core.sandbox_path(self.id), params={"force": "true"})

    def changes(self, path: str | None = None, content: bool = False) -> Changes:
        """What the sandbox changed in its workspace (below ``path``), each
        with the flags a reviewer should see; with ``content`` the content
        difference too. Only a listing with ``content``, by the owner or a
        token that is not a per-sandbox one, is a review: what it shows is
        what :meth:`commit` by the same caller (or the owner) may apply,
        and a change made after it is refused there."""
        params = _core.changes_params(path, content)
        body = self._http.json("GET", _core.sandbox_path(self.id, "changes"), params=params)
        return Changes((Change.from_json(c) for c in body.get("changes", [])), lost=body.get("lost"))

    def commit(
        self,
        paths: List[str] | None = None,
        accept_flagged: bool = False,
        force: bool = False,
        include_ignored: bool = False,
    ) -> CommitResult:
        """Apply the changes :meth:`changes` with ``content`` showed (only
        ``paths`` when given) to the real workspace; the sandbox must be
        stopped. Flagged
        changes need ``accept_flagged``, else a :class:`ConflictError`
        with code ``flagged`` lists them (``details``) and nothing is
        written; paths changed on the host too are refused (``conflicts``)
        unless ``force``. Changes the workspace's ``.gitignore`` ignores
        (``Change.ignored``) are left out unless ``include_ignored``."""
        body = _core.commit_body(paths, accept_flagged, force, include_ignored)
        return CommitResult.from_json(
            self._http.json("POST", _core.sandbox_path(self.id, "commit"), json=body)
        )

    def events(self, from_: int = 0, follow: bool = True) -> Iterator[dict[str, Any]]:
        """Its events (the audit log's, as dicts with an ``event`` key),
        from the ``from_``-th on; with ``follow``, new ones as they happen
        while it runs (the iterator ends when it stops)."""
        params = _core.events_params(from_, follow)
        parser = _core.SseParser()
        failures = 0
        while True:
            try:
                with self._http.stream(
                    "GET",
                    _core.sandbox_path(self.id, "events"),
                    params=params,
                    headers={"accept": "text/event-stream"},
                    timeout=httpx.Timeout(_core.DEFAULT_TIMEOUT, read=None),
                ) as r:
                    for line in r.iter_lines():
                        ev = parser.feed(line)
                        if ev is None:
                            continue
                        failures = 0
                        try:
                            v = json.loads(ev[1])
                        except ValueError:
                            continue
                        if isinstance(v, dict):
                            yield v
                return
            except httpx.TransportError as e:
                failures += 1
                if not follow or failures > _core.STREAM_RETRIES:
                    raise _core.connection_error(self._http.ep, e) from e
                if parser.last_id is not None:
                    params = _core.events_params(int(parser.last_id) + 1, follow)

    # ---- the client itself ----

    def close(self) -> None:
        """Kept for code written against earlier versions: a sandbox holds
        no connection of its own. Its requests go over the process's pool
        for its daemon, shared by every sandbox there and closed at exit
        or by :func:`warden_sandbox.close`; the sandbox itself stays."""
        self._http.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.kill()
        except NotFoundError:
            pass
        finally:
            self.close()


class Commands:
    """Commands in one sandbox (``sb.commands``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    @overload
    def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = ...,
        cwd: str | None = ...,
        stdin: str | bytes | None = ...,
        timeout: float | None = ...,
        on_stdout: OutputCallback | None = ...,
        on_stderr: OutputCallback | None = ...,
        background: Literal[False] = ...,
        *,
        stdin_open: bool | None = ...,
        check: bool = ...,
    ) -> CommandResult: ...

    @overload
    def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = ...,
        cwd: str | None = ...,
        stdin: str | bytes | None = ...,
        timeout: float | None = ...,
        on_stdout: OutputCallback | None = ...,
        on_stderr: OutputCallback | None = ...,
        *,
        background: Literal[True],
        stdin_open: bool | None = ...,
        check: bool = ...,
    ) -> CommandHandle: ...

    def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        background: bool = False,
        *,
        stdin_open: bool | None = None,
        check: bool = False,
    ) -> CommandResult | CommandHandle:
        """Run a command: a ``str`` through ``sh -c``, a list as the
        program and its arguments.

        Returns its :class:`CommandResult` once it ends (a non-zero exit
        is not an exception unless ``check=True``). With ``on_stdout`` /
        ``on_stderr`` its output streams to them, text chunk by chunk, as
        it comes. With ``background=True`` it returns at once a
        :class:`CommandHandle` (its callbacks are called by
        :meth:`CommandHandle.wait`). ``stdin``: text or bytes written to
        its standard input; ``stdin_open``: keep standard input open for
        :meth:`CommandHandle.send_stdin` (the default in the background);
        ``timeout``: kill it after this many seconds (exit code 124).
        """
        if stdin_open is None:
            stdin_open = background
        plan = _core.exec_plan(cmd, env=env, cwd=cwd, stdin=stdin, stdin_open=stdin_open, timeout=timeout)
        path = _core.sandbox_path(self._sb.id, "exec")
        http = self._sb._http
        if background or plan.pending_stdin is not None:
            d = http.json("POST", path, json={**plan.body, "background": True})
            handle = CommandHandle(self._sb, CommandInfo.from_json(d), on_stdout=on_stdout, on_stderr=on_stderr)
            if plan.pending_stdin is not None:
                handle.send_stdin(plan.pending_stdin)
                if not stdin_open:
                    handle.close_stdin()
            if background:
                return handle
            return handle.wait(check=check)
        if on_stdout is None and on_stderr is None:
            d = http.json("POST", path, json=plan.body, timeout=_core.exec_timeout(timeout))
            result = CommandResult.from_json(d)
            return result.check() if check else result
        stream = ExecStream()
        first = http.stream("POST", path, json={**plan.body, "stream": True})
        _follow(self._sb, stream, first, on_stdout, on_stderr)
        result = stream.result()
        return result.check() if check else result

    def connect(
        self,
        command_id: str,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandHandle:
        """Take up a command started before (by this process or another):
        its output is read from the given offsets (0: all of it)."""
        d = self._sb._http.json("GET", _core.sandbox_path(self._sb.id, "execs", command_id))
        h = CommandHandle(self._sb, CommandInfo.from_json(d), on_stdout=on_stdout, on_stderr=on_stderr)
        h._stream.stdout_offset = stdout_offset
        h._stream.stderr_offset = stderr_offset
        return h

    def list(self) -> List[CommandInfo]:
        """The commands the daemon knows in this sandbox."""
        d = self._sb._http.json("GET", _core.sandbox_path(self._sb.id, "execs"))
        return [CommandInfo.from_json(x) for x in d]

    def kill(self, command_id: str) -> None:
        """Kill a command (SIGKILL)."""
        CommandHandle._signal(self._sb, command_id, "SIGKILL")

    def send_stdin(self, command_id: str, data: str | bytes) -> None:
        CommandHandle._stdin(self._sb, command_id, data, close=False)


def _follow(
    sb: Sandbox,
    stream: ExecStream,
    first: Any,
    on_stdout: OutputCallback | None,
    on_stderr: OutputCallback | None,
) -> None:
    """Read a command's events until it ends, calling back with its
    output; a stream that breaks is taken up again from the offsets."""
    dec = TextDecoders()
    for chunk in _chunks(sb, stream, first):
        cb = on_stdout if chunk.stream == "stdout" else on_stderr
        if cb is not None:
            text = dec.text(chunk)
            if text:
                cb(text)
    for name, rest in dec.flush():
        cb = on_stdout if name == "stdout" else on_stderr
        if cb is not None:
            cb(rest)


def _chunks(sb: Sandbox, stream: ExecStream, first: Any = None) -> Iterator[OutputChunk]:
    failures = 0
    while not stream.ended:
        if first is not None:
            cm, first = first, None
        else:
            if stream.id is None:
                raise WardenError("the command's stream broke before it said its id", code="stream_lost")
            cm = sb._http.stream(
                "GET",
                _core.sandbox_path(sb.id, "execs", stream.id, "output"),
                params=stream.output_params(),
            )
        try:
            with cm as r:
                for line in r.iter_lines():
                    ev = _core.ndjson_event(line)
                    if ev is None:
                        continue
                    chunk = stream.feed(ev)
                    if chunk is not None:
                        failures = 0
                        yield chunk
                    if stream.ended:
                        return
        except httpx.TransportError as e:
            failures += 1
            if stream.id is None or failures > _core.STREAM_RETRIES:
                raise _core.connection_error(sb._http.ep, e) from e
        else:
            failures += 1
            if failures > _core.STREAM_RETRIES:
                raise WardenError("the command's stream kept ending before the command did", code="stream_lost")


class CommandHandle:
    """A command running in the background: wait for it, write to it,
    signal it. Its output is kept by the daemon, so a handle made later
    with :meth:`Commands.connect` reads all of it."""

    def __init__(
        self,
        sandbox: Sandbox,
        info: CommandInfo,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.id = info.id
        self.pid = info.pid
        self._stream = ExecStream(id=info.id, pid=info.pid)
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr

    def __repr__(self) -> str:
        return f"CommandHandle(id={self.id!r}, sandbox={self.sandbox.id!r})"

    @property
    def stdout_offset(self) -> int:
        """Bytes of standard output read so far (from where a new
        connection takes up)."""
        return self._stream.stdout_offset

    @property
    def stderr_offset(self) -> int:
        return self._stream.stderr_offset

    @property
    def exit_code(self) -> int | None:
        """Its exit status, once :meth:`wait` saw it end."""
        return int(self._stream.exit["exit_status"]) if self._stream.exit else None

    def __iter__(self) -> Iterator[OutputChunk]:
        """Its output chunk by chunk until it ends."""
        return _chunks(self.sandbox, self._stream)

    def wait(
        self,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        *,
        check: bool = False,
    ) -> CommandResult:
        """Wait for it to end, streaming its output to the callbacks (these
        or the ones ``run`` was given); its result, with the output read
        through this handle."""
        _follow(
            self.sandbox,
            self._stream,
            None,
            on_stdout or self._on_stdout,
            on_stderr or self._on_stderr,
        )
        result = self._stream.result()
        return result.check() if check else result

    def info(self) -> CommandInfo:
        return CommandInfo.from_json(
            self.sandbox._http.json("GET", _core.sandbox_path(self.sandbox.id, "execs", self.id))
        )

    def send_stdin(self, data: str | bytes) -> None:
        """Write to its standard input (it was started with it open)."""
        self._stdin(self.sandbox, self.id, data, close=False)

    def close_stdin(self) -> None:
        self._stdin(self.sandbox, self.id, "", close=True)

    def kill(self) -> None:
        """SIGKILL it."""
        self._signal(self.sandbox, self.id, "SIGKILL")

    def signal(self, signal: int | str) -> None:
        """Send it a signal, by number or name (``"SIGTERM"``, ``"INT"``)."""
        self._signal(self.sandbox, self.id, signal)

    @staticmethod
    def _stdin(sb: Sandbox, command_id: str, data: str | bytes, *, close: bool) -> None:
        sb._http.request(
            "POST",
            _core.sandbox_path(sb.id, "execs", command_id, "stdin"),
            json=_core.stdin_body(data, close),
        )

    @staticmethod
    def _signal(sb: Sandbox, command_id: str, signal: int | str) -> None:
        sb._http.request(
            "POST",
            _core.sandbox_path(sb.id, "execs", command_id, "signal"),
            json={"signal": signal},
        )


class Egress:
    """A running sandbox's allowlist, changed live (``sb.egress``).
    Entries are written as in a profile's ``egress.domains``
    (``example.com``, ``.example.com`` with its subdomains,
    ``example.com:22``); each change is kept for the sandbox's later
    starts. Needs the ``sandboxes:write`` scope."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _patch(self, body: Mapping[str, Any]) -> List[str]:
        d = self._sb._http.json("PATCH", _core.sandbox_path(self._sb.id, "egress"), json=body)
        return [str(x) for x in d.get("allow", [])]

    def list(self) -> List[str]:
        """The entries as they are now."""
        return self._patch({})

    def allow(self, names: List[str]) -> List[str]:
        """Put entries on the list; returns the list as it is now. An
        entry that does not read is a :class:`BadRequestError` naming it
        (``field`` ``/allow/N``), and nothing changes."""
        return self._patch({"allow": _core.entries(names, "allow")})

    def remove(self, names: List[str]) -> List[str]:
        """Take entries off the list (as they were written): open
        connections to them are cut, and they no longer resolve. An entry
        not on the list is a :class:`BadRequestError`, and nothing
        changes."""
        return self._patch({"remove": _core.entries(names, "remove")})


class Approvals:
    """Questions of ask mode across the sandboxes the token may see
    (``client.approvals``). Needs the ``approvals`` scope."""

    def __init__(self, http: _Http) -> None:
        self._http = http

    def list(self, sandbox: str | None = None) -> List[Approval]:
        """The questions waiting now, oldest first; ``sandbox``: only its."""
        params = {"sandbox": sandbox} if sandbox is not None else None
        d = self._http.json("GET", "/v1/approvals", params=params)
        return [Approval.from_json(a) for a in d.get("approvals", [])]

    def answer(self, question: str | Approval, decision: str) -> None:
        """Answer once: ``allow_once`` (this connection), ``allow_always``
        (this one, and the name goes on the sandbox's allowlist) or
        ``deny``. A question answered already, or denied when its time ran
        out, is a :class:`ConflictError`."""
        qid = question.id if isinstance(question, Approval) else question
        self._http.request("POST", _core.approval_path(qid), json={"decision": _core.decision(decision)})


class Client:
    """The daemon itself, for what is not one sandbox's::

        with Client() as client:
            for q in client.approvals.list():
                client.approvals.answer(q.id, "allow_once")
    """

    def __init__(self, host: str | None = None, token: str | None = None) -> None:
        self._http = _Http(_core.resolve_endpoint(host, token))
        self.approvals = Approvals(self._http)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
