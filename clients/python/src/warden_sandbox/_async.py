"""The asynchronous twin: :class:`AsyncSandbox`, :class:`AsyncCommands`
and :class:`AsyncCommandHandle`, over ``httpx.AsyncClient``, with the
same methods as coroutines (callbacks may be plain functions or
coroutine functions)."""

from __future__ import annotations

import inspect
import json
import os
from contextlib import asynccontextmanager
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    List,
    Literal,
    Mapping,
    Union,
    overload,
)

import httpx

from . import _core, _pool
from ._core import Command, Endpoint, ExecStream, Labels, TextDecoders
from ._errors import NotFoundError, WardenError, error_from_response
from ._models import Approval, CommandInfo, CommandResult, OutputChunk, SandboxInfo
from ._models import Change, Changes, CommandInfo, CommandResult, CommitResult, Forks, OutputChunk, SandboxInfo, SnapshotInfo
from ._desktop import AsyncDesktop
from ._files import AsyncFiles
from ._pty import AsyncPty

AsyncOutputCallback = Callable[[str], Union[Any, Awaitable[Any]]]


async def _call(cb: AsyncOutputCallback | None, text: str) -> None:
    if cb is None:
        return
    r = cb(text)
    if inspect.isawaitable(r):
        await r


class _AsyncHttp:
    """As ``_sync._Http``, over the running event loop's pool."""

    def __init__(self, ep: Endpoint) -> None:
        self.ep = ep
        self.headers = ep.headers()

    @property
    def client(self) -> httpx.AsyncClient:
        return _pool.async_client(self.ep)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        try:
            r = await self.client.request(
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

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        return _core.json_of(await self.request(method, path, **kw))

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> AsyncIterator[httpx.Response]:
        try:
            cm = self.client.stream(
                method,
                path,
                params=params,
                json=json,
                headers={**self.headers, **(headers or {})},
                timeout=timeout or _core.stream_timeout(),
            )
            r = await cm.__aenter__()
        except httpx.TransportError as e:
            raise _core.connection_error(self.ep, e) from e
        try:
            if r.status_code >= 400:
                try:
                    body = await r.aread()
                except httpx.TransportError as e:
                    raise _core.connection_error(self.ep, e) from e
                raise error_from_response(r.status_code, body, r.headers)
            yield r
        finally:
            await cm.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Nothing to release: the pool is the loop's (``_pool.aclose``)."""


class AsyncSandbox:
    """A sandbox on a warden daemon, for asyncio code::

        async with await AsyncSandbox.create() as sb:
            r = await sb.commands.run("echo hi")
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        host: str | None = None,
        token: str | None = None,
        _http: _AsyncHttp | None = None,
    ) -> None:
        self.id = sandbox_id
        self._http = _http or _AsyncHttp(_core.resolve_endpoint(host, token))
        self.commands = AsyncCommands(self)
        self.egress = AsyncEgress(self)
        self.pty = AsyncPty(self)
        self.files = AsyncFiles(self)
        self.desktop = AsyncDesktop(self)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, host={self._http.ep.where!r})"

    @classmethod
    async def create(
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
    ) -> AsyncSandbox:
        """As :meth:`Sandbox.create`."""
        body = _core.create_body(
            profile=profile,
            spec=spec,
            workspace=workspace,
            timeout=timeout,
            labels=labels,
            name=name,
            start=start,
        )
        http = _AsyncHttp(_core.resolve_endpoint(host, token))
        d = await http.json("POST", "/v1/sandboxes", json=body)
        return cls(str(d["id"]), _http=http)

    @classmethod
    async def connect(cls, sandbox_id: str, host: str | None = None, token: str | None = None) -> AsyncSandbox:
        """As :meth:`Sandbox.connect` (no request is made)."""
        return cls(sandbox_id, host=host, token=token)

    @classmethod
    async def list(
        cls,
        state: str | None = None,
        label: Labels = None,
        host: str | None = None,
        token: str | None = None,
    ) -> List[SandboxInfo]:
        params, rest = _core.list_params(state, label)
        d = await _AsyncHttp(_core.resolve_endpoint(host, token)).json("GET", "/v1/sandboxes", params=params)
        infos = [SandboxInfo.from_json(s) for s in d.get("sandboxes", [])]
        return _core.matching(infos, rest)

    async def info(self) -> SandboxInfo:
        return SandboxInfo.from_json(await self._http.json("GET", _core.sandbox_path(self.id)))

    async def is_running(self) -> bool:
        return (await self.info()).running

    async def start(self) -> SandboxInfo:
        return SandboxInfo.from_json(await self._http.json("POST", _core.sandbox_path(self.id, "start")))

    async def stop(self, grace: float | None = None) -> SandboxInfo:
        body = {} if grace is None else {"grace_seconds": _core.ttl_seconds(grace)}
        return SandboxInfo.from_json(
            await self._http.json("POST", _core.sandbox_path(self.id, "stop"), json=body)
        )

    async def pause(self) -> SandboxInfo:
        """As :meth:`warden_sandbox.Sandbox.pause`."""
        return SandboxInfo.from_json(await self._http.json("POST", _core.sandbox_path(self.id, "pause")))

    async def resume(self) -> SandboxInfo:
        """As :meth:`warden_sandbox.Sandbox.resume`."""
        return SandboxInfo.from_json(await self._http.json("POST", _core.sandbox_path(self.id, "resume")))

    async def create_snapshot(self, name: str) -> SnapshotInfo:
        """As :meth:`warden_sandbox.Sandbox.create_snapshot`."""
        d = await self._http.json("POST", _core.sandbox_path(self.id, "snapshots"), json={"name": name})
        return SnapshotInfo.from_json(d)

    async def fork(self, count: int = 1) -> Forks[AsyncSandbox]:
        """As :meth:`warden_sandbox.Sandbox.fork`: the forks, with whether
        they carry the source's memory (:attr:`Forks.memory`) and why not
        (:attr:`Forks.memory_why`)."""
        d = await self._http.json("POST", _core.sandbox_path(self.id, "fork"), json={"count": count})
        return _core.forks_of(d, lambda sid: AsyncSandbox(sid, _http=self._http))

    async def set_timeout(self, seconds: float | None) -> SandboxInfo:
        ttl = None if seconds is None else _core.ttl_seconds(seconds)
        return SandboxInfo.from_json(
            await self._http.json("POST", _core.sandbox_path(self.id, "timeout"), json={"ttl_seconds": ttl})
        )

    async def kill(self) -> None:
        await self._http.request("DELETE", _core.sandbox_path(self.id), params={"force": "true"})

    async def changes(self, path: str | None = None, content: bool = False) -> Changes:
        """As :meth:`Sandbox.changes`."""
        params = _core.changes_params(path, content)
        body = await self._http.json("GET", _core.sandbox_path(self.id, "changes"), params=params)
        return Changes((Change.from_json(c) for c in body.get("changes", [])), lost=body.get("lost"))

    async def commit(
        self,
        paths: List[str] | None = None,
        accept_flagged: bool = False,
        force: bool = False,
        include_ignored: bool = False,
    ) -> CommitResult:
        """As :meth:`Sandbox.commit`."""
        body = _core.commit_body(paths, accept_flagged, force, include_ignored)
        return CommitResult.from_json(
            await self._http.json("POST", _core.sandbox_path(self.id, "commit"), json=body)
        )

    async def events(self, from_: int = 0, follow: bool = True) -> AsyncIterator[dict[str, Any]]:
        """As :meth:`Sandbox.events`, an async iterator."""
        params = _core.events_params(from_, follow)
        parser = _core.SseParser()
        failures = 0
        while True:
            try:
                async with self._http.stream(
                    "GET",
                    _core.sandbox_path(self.id, "events"),
                    params=params,
                    headers={"accept": "text/event-stream"},
                    timeout=httpx.Timeout(_core.DEFAULT_TIMEOUT, read=None),
                ) as r:
                    async for line in r.aiter_lines():
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

    async def close(self) -> None:
        """As :meth:`Sandbox.close`: the loop's pool stays, for the other
        sandboxes; :func:`warden_sandbox.aclose` closes it."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.kill()
        except NotFoundError:
            pass
        finally:
            await self.close()


class AsyncCommands:
    """Commands in one sandbox (``sb.commands``), as coroutines."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    @overload
    async def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = ...,
        cwd: str | None = ...,
        stdin: str | bytes | None = ...,
        timeout: float | None = ...,
        on_stdout: AsyncOutputCallback | None = ...,
        on_stderr: AsyncOutputCallback | None = ...,
        background: Literal[False] = ...,
        *,
        stdin_open: bool | None = ...,
        check: bool = ...,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = ...,
        cwd: str | None = ...,
        stdin: str | bytes | None = ...,
        timeout: float | None = ...,
        on_stdout: AsyncOutputCallback | None = ...,
        on_stderr: AsyncOutputCallback | None = ...,
        *,
        background: Literal[True],
        stdin_open: bool | None = ...,
        check: bool = ...,
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        cmd: Command,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
        background: bool = False,
        *,
        stdin_open: bool | None = None,
        check: bool = False,
    ) -> CommandResult | AsyncCommandHandle:
        """As :meth:`Commands.run`."""
        if stdin_open is None:
            stdin_open = background
        plan = _core.exec_plan(cmd, env=env, cwd=cwd, stdin=stdin, stdin_open=stdin_open, timeout=timeout)
        path = _core.sandbox_path(self._sb.id, "exec")
        http = self._sb._http
        if background or plan.pending_stdin is not None:
            d = await http.json("POST", path, json={**plan.body, "background": True})
            handle = AsyncCommandHandle(
                self._sb, CommandInfo.from_json(d), on_stdout=on_stdout, on_stderr=on_stderr
            )
            if plan.pending_stdin is not None:
                await handle.send_stdin(plan.pending_stdin)
                if not stdin_open:
                    await handle.close_stdin()
            if background:
                return handle
            return await handle.wait(check=check)
        if on_stdout is None and on_stderr is None:
            d = await http.json("POST", path, json=plan.body, timeout=_core.exec_timeout(timeout))
            result = CommandResult.from_json(d)
            return result.check() if check else result
        stream = ExecStream()
        first = http.stream("POST", path, json={**plan.body, "stream": True})
        await _follow(self._sb, stream, first, on_stdout, on_stderr)
        result = stream.result()
        return result.check() if check else result

    async def connect(
        self,
        command_id: str,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
    ) -> AsyncCommandHandle:
        d = await self._sb._http.json("GET", _core.sandbox_path(self._sb.id, "execs", command_id))
        h = AsyncCommandHandle(self._sb, CommandInfo.from_json(d), on_stdout=on_stdout, on_stderr=on_stderr)
        h._stream.stdout_offset = stdout_offset
        h._stream.stderr_offset = stderr_offset
        return h

    async def list(self) -> List[CommandInfo]:
        d = await self._sb._http.json("GET", _core.sandbox_path(self._sb.id, "execs"))
        return [CommandInfo.from_json(x) for x in d]

    async def kill(self, command_id: str) -> None:
        await AsyncCommandHandle._signal(self._sb, command_id, "SIGKILL")

    async def send_stdin(self, command_id: str, data: str | bytes) -> None:
        await AsyncCommandHandle._stdin(self._sb, command_id, data, close=False)


async def _follow(
    sb: AsyncSandbox,
    stream: ExecStream,
    first: Any,
    on_stdout: AsyncOutputCallback | None,
    on_stderr: AsyncOutputCallback | None,
) -> None:
    dec = TextDecoders()
    async for chunk in _chunks(sb, stream, first):
        cb = on_stdout if chunk.stream == "stdout" else on_stderr
        if cb is not None:
            text = dec.text(chunk)
            if text:
                await _call(cb, text)
    for name, rest in dec.flush():
        await _call(on_stdout if name == "stdout" else on_stderr, rest)


async def _chunks(sb: AsyncSandbox, stream: ExecStream, first: Any = None) -> AsyncIterator[OutputChunk]:
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
            async with cm as r:
                async for line in r.aiter_lines():
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


class AsyncCommandHandle:
    """As :class:`CommandHandle`, with coroutines."""

    def __init__(
        self,
        sandbox: AsyncSandbox,
        info: CommandInfo,
        *,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.id = info.id
        self.pid = info.pid
        self._stream = ExecStream(id=info.id, pid=info.pid)
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr

    def __repr__(self) -> str:
        return f"AsyncCommandHandle(id={self.id!r}, sandbox={self.sandbox.id!r})"

    @property
    def stdout_offset(self) -> int:
        return self._stream.stdout_offset

    @property
    def stderr_offset(self) -> int:
        return self._stream.stderr_offset

    @property
    def exit_code(self) -> int | None:
        return int(self._stream.exit["exit_status"]) if self._stream.exit else None

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return _chunks(self.sandbox, self._stream)

    async def wait(
        self,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
        *,
        check: bool = False,
    ) -> CommandResult:
        await _follow(
            self.sandbox,
            self._stream,
            None,
            on_stdout or self._on_stdout,
            on_stderr or self._on_stderr,
        )
        result = self._stream.result()
        return result.check() if check else result

    async def info(self) -> CommandInfo:
        return CommandInfo.from_json(
            await self.sandbox._http.json("GET", _core.sandbox_path(self.sandbox.id, "execs", self.id))
        )

    async def send_stdin(self, data: str | bytes) -> None:
        await self._stdin(self.sandbox, self.id, data, close=False)

    async def close_stdin(self) -> None:
        await self._stdin(self.sandbox, self.id, "", close=True)

    async def kill(self) -> None:
        await self._signal(self.sandbox, self.id, "SIGKILL")

    async def signal(self, signal: int | str) -> None:
        await self._signal(self.sandbox, self.id, signal)

    @staticmethod
    async def _stdin(sb: AsyncSandbox, command_id: str, data: str | bytes, *, close: bool) -> None:
        await sb._http.request(
            "POST",
            _core.sandbox_path(sb.id, "execs", command_id, "stdin"),
            json=_core.stdin_body(data, close),
        )

    @staticmethod
    async def _signal(sb: AsyncSandbox, command_id: str, signal: int | str) -> None:
        await sb._http.request(
            "POST",
            _core.sandbox_path(sb.id, "execs", command_id, "signal"),
            json={"signal": signal},
        )


class AsyncEgress:
    """As :class:`Egress`, with coroutines (``sb.egress``)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def _patch(self, body: Mapping[str, Any]) -> List[str]:
        d = await self._sb._http.json("PATCH", _core.sandbox_path(self._sb.id, "egress"), json=body)
        return [str(x) for x in d.get("allow", [])]

    async def list(self) -> List[str]:
        return await self._patch({})

    async def allow(self, names: List[str]) -> List[str]:
        return await self._patch({"allow": _core.entries(names, "allow")})

    async def remove(self, names: List[str]) -> List[str]:
        return await self._patch({"remove": _core.entries(names, "remove")})


class AsyncApprovals:
    """As :class:`Approvals`, with coroutines (``client.approvals``)."""

    def __init__(self, http: _AsyncHttp) -> None:
        self._http = http

    async def list(self, sandbox: str | None = None) -> List[Approval]:
        params = {"sandbox": sandbox} if sandbox is not None else None
        d = await self._http.json("GET", "/v1/approvals", params=params)
        return [Approval.from_json(a) for a in d.get("approvals", [])]

    async def answer(self, question: str | Approval, decision: str) -> None:
        qid = question.id if isinstance(question, Approval) else question
        await self._http.request("POST", _core.approval_path(qid), json={"decision": _core.decision(decision)})


class AsyncClient:
    """As :class:`Client`, for asyncio code::

        async with AsyncClient() as client:
            for q in await client.approvals.list():
                await client.approvals.answer(q.id, "deny")
    """

    def __init__(self, host: str | None = None, token: str | None = None) -> None:
        self._http = _AsyncHttp(_core.resolve_endpoint(host, token))
        self.approvals = AsyncApprovals(self._http)

    async def close(self) -> None:
        """As :meth:`Sandbox.close`: the loop's pool stays, for the other
        sandboxes; :func:`warden_sandbox.aclose` closes it."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
