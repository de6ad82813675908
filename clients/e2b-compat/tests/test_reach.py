"""Another token's sandbox is, through every call of the E2B door, exactly
a sandbox that does not exist: the same status and the same body (but for
the id it names), so that a token learns nothing of the others'
sandboxes, not even that one of that id is there; and nothing it asks is
done to it."""

from __future__ import annotations

from typing import List, Tuple

import httpx
import pytest
from e2b import NotFoundException, Sandbox

from conftest import Daemon

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")

# Every control route that names a sandbox, with a body it takes.
CALLS: List[Tuple[str, str, object]] = [
    ("GET", "/sandboxes/{id}", None),
    ("POST", "/sandboxes/{id}/timeout", {"timeout": 5}),
    ("POST", "/sandboxes/{id}/refreshes", {"duration": 5}),
    ("POST", "/sandboxes/{id}/connect", {"timeout": 5}),
    ("POST", "/v2/sandboxes/{id}/connect", {"timeout": 5}),
    ("POST", "/sandboxes/{id}/pause", {}),
    ("POST", "/sandboxes/{id}/resume", {}),
    ("POST", "/sandboxes/{id}/snapshots", {"name": "stolen"}),
    ("POST", "/sandboxes/{id}/fork", {"count": 1}),
    ("PUT", "/sandboxes/{id}/network", {"allowOut": ["evil.example.com"]}),
    ("GET", "/sandboxes/{id}/metrics", None),
    ("GET", "/sandboxes/{id}/logs", None),
    ("GET", "/v2/sandboxes/{id}/logs", None),
    ("DELETE", "/sandboxes/{id}", None),
]


def answer(c: httpx.Client, method: str, path: str, body: object, sid: str) -> Tuple[int, str]:
    r = c.request(method, path.format(id=sid), json=body)
    return r.status_code, r.text.replace(sid, "ID")


def test_another_tokens_sandbox_is_answered_as_one_that_does_not_exist(daemon: Daemon) -> None:
    owner_key, other_key = daemon.token(*SCOPES), daemon.token(*SCOPES)
    sbx = Sandbox.create(timeout=120, api_key=owner_key)
    try:
        sbx.files.write("secret.txt", "the owner's\n")
        with httpx.Client(base_url=daemon.url, headers={"X-API-Key": other_key}, timeout=30) as c:
            for method, path, body in CALLS:
                theirs = answer(c, method, path, body, sbx.sandbox_id)
                nobodys = answer(c, method, path, body, "sb-000000000000")
                assert theirs == nobodys, (method, path, theirs, nobodys)
                assert theirs[0] == 404, (method, path, theirs)
        # The SDK's own answers for a missing sandbox.
        with pytest.raises(NotFoundException):
            Sandbox.get_info(sbx.sandbox_id, api_key=other_key)
        with pytest.raises(NotFoundException):
            Sandbox.connect(sbx.sandbox_id, api_key=other_key)
        assert Sandbox.kill(sbx.sandbox_id, api_key=other_key) is False
        # Nothing was done to it: it runs, unpaused, with its file, its
        # timeout and no snapshot or fork made of it.
        assert sbx.is_running() is True
        assert sbx.files.read("secret.txt") == "the owner's\n"
        assert sbx.get_info().end_at.timestamp() > __import__("time").time() + 60
        assert Sandbox.list_snapshots(api_key=other_key).next_items() == []
        assert Sandbox.list_snapshots(api_key=owner_key).next_items() == []
        ids = [s["id"] for s in daemon.sandboxes()]
        assert ids.count(sbx.sandbox_id) == 1
    finally:
        sbx.kill()


def test_the_sandbox_api_answers_another_tokens_sandbox_as_a_missing_one(daemon: Daemon) -> None:
    owner_key, other_key = daemon.token(*SCOPES), daemon.token(*SCOPES)
    sbx = Sandbox.create(timeout=120, api_key=owner_key)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as c:

            def health(sid: str) -> Tuple[int, str]:
                r = c.get("/health", headers={"E2b-Sandbox-Id": sid, "X-Access-Token": other_key})
                return r.status_code, r.text.replace(sid, "ID")

            assert health(sbx.sandbox_id) == health("sb-000000000000")
            assert health(sbx.sandbox_id)[0] == 502
    finally:
        sbx.kill()


def test_another_tokens_snapshot_is_neither_listed_used_nor_deleted(daemon: Daemon) -> None:
    owner_key, other_key = daemon.token(*SCOPES), daemon.token(*SCOPES)
    sbx = Sandbox.create(timeout=120, api_key=owner_key)
    try:
        snap = sbx.create_snapshot(name="owners-snap")
        assert Sandbox.list_snapshots(api_key=other_key).next_items() == []
        with pytest.raises(Exception):
            Sandbox.create(template=snap.snapshot_id, api_key=other_key, timeout=30)
        assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=other_key) is False
        assert [s.snapshot_id for s in Sandbox.list_snapshots(api_key=owner_key).next_items()] == [
            snap.snapshot_id
        ]
        assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=owner_key) is True
    finally:
        sbx.kill()
