"""The envd access token the E2B door answers (the SDK's
``_envd_access_token``, sent as ``X-Access-Token`` and signing file URLs)
is a key of the sandbox's own, ``wde_...``, whatever made the sandbox: a
create from a snapshot of a natively made sandbox, a fork of one, a
connect to one. It is never the caller's API key, which creates and lists
sandboxes; the sandbox's key does neither (review 16, finding 4: such
sandboxes were answered the caller's ``wdn_...`` token)."""

from __future__ import annotations

from typing import Iterator, List

import httpx
import pytest
from e2b import Sandbox

from conftest import Daemon


def native(daemon: Daemon, api_key: str) -> str:
    """A sandbox made by the API key's token through the native API."""
    with daemon.owner() as c:
        r = c.post(
            "/v1/sandboxes",
            json={"ttl_seconds": 300},
            headers={"authorization": f"Bearer {api_key}"},
        )
        assert r.status_code in (200, 201), r.text
        return str(r.json()["id"])


def remove(daemon: Daemon, ids: List[str]) -> None:
    with daemon.owner() as c:
        for sid in ids:
            c.delete(f"/v1/sandboxes/{sid}", params={"force": "true"})


def assert_own_key(daemon: Daemon, api_key: str, s: Sandbox) -> None:
    key = s._envd_access_token
    assert key and key != api_key, f"sandbox {s.sandbox_id} was answered the API key"
    assert key.startswith("wde_"), key
    # The sandbox's key is no API key: it makes and lists nothing.
    r = httpx.post(
        f"{daemon.url}/sandboxes",
        headers={"X-API-Key": key},
        json={"templateID": "base", "timeout": 30},
        timeout=30,
    )
    assert r.status_code == 401, r.text
    r = httpx.get(f"{daemon.url}/v2/sandboxes", headers={"X-API-Key": key}, timeout=30)
    assert r.status_code == 401, r.text
    # It is the sandbox's: its files go through it, and a URL it signs
    # is honoured.
    s.files.write("own-key.txt", "own key\n")
    assert s.files.read("own-key.txt") == "own key\n"
    r = httpx.get(s.download_url("own-key.txt"), timeout=30)
    assert r.status_code == 200 and r.text == "own key\n", r.text


@pytest.fixture
def made(daemon: Daemon) -> Iterator[List[str]]:
    ids: List[str] = []
    yield ids
    remove(daemon, ids)


def test_a_connect_to_a_natively_made_sandbox_answers_a_key_of_its_own(
    daemon: Daemon, api_key: str, made: List[str]
) -> None:
    sid = native(daemon, api_key)
    made.append(sid)
    s = Sandbox.connect(sid)
    assert_own_key(daemon, api_key, s)
    # Connected again: the same key, and the info answers it too.
    assert Sandbox.connect(sid)._envd_access_token == s._envd_access_token


def test_a_sandbox_made_from_a_native_snapshot_answers_a_key_of_its_own(
    daemon: Daemon, api_key: str, made: List[str], label: str
) -> None:
    sid = native(daemon, api_key)
    made.append(sid)
    snap = f"nsnap-{label}"
    with daemon.owner() as c:
        r = c.post(
            f"/v1/sandboxes/{sid}/snapshots",
            json={"name": snap},
            headers={"authorization": f"Bearer {api_key}"},
        )
        assert r.status_code in (200, 201), r.text
    try:
        s = Sandbox.create(template=snap, timeout=120)
        made.append(s.sandbox_id)
        assert_own_key(daemon, api_key, s)
    finally:
        with daemon.owner() as c:
            c.delete(f"/v1/snapshots/{snap}", headers={"authorization": f"Bearer {api_key}"})


def test_a_fork_of_a_natively_made_sandbox_answers_keys_of_their_own(
    daemon: Daemon, api_key: str, made: List[str]
) -> None:
    sid = native(daemon, api_key)
    made.append(sid)
    source = Sandbox.connect(sid)
    forks = source.fork(count=1, timeout=120)
    for f in forks:
        assert isinstance(f, Sandbox), f
        made.append(f.sandbox_id)
        assert_own_key(daemon, api_key, f)
        assert f._envd_access_token != source._envd_access_token
