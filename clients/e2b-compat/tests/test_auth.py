"""Attacks on the sandbox API's checks, with raw HTTP (the SDK never sends
these): a token made for one sandbox, or without the exec scope, names
another sandbox in E2b-Sandbox-Id, or runs a command; each is refused, and
a file the command would have made is never there."""

from __future__ import annotations

import json
import struct

import httpx
from e2b import Sandbox

from conftest import Daemon


def start_body(cmd: str) -> bytes:
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", cmd]}}).encode()
    return struct.pack(">BI", 0, len(msg)) + msg


def start(daemon: Daemon, sandbox: str, token: str, cmd: str) -> httpx.Response:
    return httpx.post(
        f"{daemon.url}/process.Process/Start",
        content=start_body(cmd),
        headers={
            "Content-Type": "application/connect+json",
            "Connect-Protocol-Version": "1",
            "E2b-Sandbox-Id": sandbox,
            "X-Access-Token": token,
        },
        timeout=30,
    )


def test_a_token_of_one_sandbox_runs_nothing_in_another(daemon: Daemon) -> None:
    a, b = Sandbox.create(timeout=120), Sandbox.create(timeout=120)
    try:
        with daemon.owner() as c:
            r = c.post(
                "/v1/tokens",
                json={"name": "only-b", "scopes": ["exec", "files"], "sandbox": b.sandbox_id},
            )
            assert r.status_code in (200, 201), r.text
            only_b = r.json()["token"]
        r = start(daemon, a.sandbox_id, only_b, "echo pwned > /home/user/pwned")
        # Refused: as not permitted, or (a sandbox out of the token's
        # reach) as one that is not there; either way nothing runs.
        assert b'"permission_denied"' in r.content or b"was not found" in r.content, r.content
        # Its own sandbox it may use.
        r = start(daemon, b.sandbox_id, only_b, "echo ok > /home/user/ok")
        assert b'"start"' in r.content, r.content
        assert not a.files.exists("pwned")
        assert b.files.read("ok") == "ok\n"
    finally:
        a.kill()
        b.kill()


def test_a_token_without_the_exec_scope_runs_nothing_and_no_token_is_refused(daemon: Daemon) -> None:
    sbx = Sandbox.create(timeout=120)
    try:
        reader = daemon.token("sandboxes:read", "files")
        r = start(daemon, sbx.sandbox_id, reader, "echo pwned > /home/user/pwned")
        # Refused: as not permitted, or (a sandbox out of the token's
        # reach) as one that is not there; either way nothing runs.
        assert b'"permission_denied"' in r.content or b"was not found" in r.content, r.content
        r = start(daemon, sbx.sandbox_id, "", "echo pwned > /home/user/pwned")
        assert r.status_code == 401
        r = start(daemon, sbx.sandbox_id, "wdn_forged_secret", "echo pwned > /home/user/pwned")
        assert r.status_code == 401
        assert not sbx.files.exists("pwned")
    finally:
        sbx.kill()
