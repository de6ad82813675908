"""Signed file URLs: ``sandbox.download_url(path)`` and ``upload_url(path)``
from the unmodified SDK, used the way a browser would (plain ``urllib`` and
``httpx``, no SDK headers: no token, no sandbox id), and the attacks on
them. A URL does only what it was signed for: that file, that operation,
that user, until its expiry, while its sandbox lives and its token is not
revoked. Each attack is checked by its effect too: the planted file's
bytes never come back, a file the upload would have written is never
there."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, Iterator, Tuple

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox

from conftest import Daemon

EVERY_BYTE = bytes(range(256)) * 257
SECRET = b"the planted secret, never to be served\n"


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()


def get(url: str) -> Tuple[int, bytes]:
    """A plain GET, as a browser sends it."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def with_query(url: str, **changes: str) -> str:
    """`url` with query parameters replaced (None removes one)."""
    parts = urllib.parse.urlsplit(url)
    q: Dict[str, str] = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    for k, v in changes.items():
        if v is None:
            q.pop(k, None)
        else:
            q[k] = v
    query = urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=query))


def test_a_download_url_serves_every_byte_to_plain_http(sbx: Sandbox) -> None:
    sbx.files.write("dl/every-byte.bin", EVERY_BYTE)
    url = sbx.download_url("dl/every-byte.bin")
    assert "signature=v1_" in url
    status, body = get(url)
    assert status == 200, body
    assert body == EVERY_BYTE
    # With an expiry, and as the SDK's "root" (the sandbox's one identity).
    url = sbx.download_url("/home/user/dl/every-byte.bin", user="root", use_signature_expiration=120)
    assert "signature_expiration=" in url
    assert httpx.get(url, timeout=30).content == EVERY_BYTE


def test_an_upload_url_takes_a_browser_form_and_a_raw_body(sbx: Sandbox) -> None:
    url = sbx.upload_url("ul/form.bin")
    # A form's part is named as the user's file was, not as the sandbox
    # path: the signed path is where it goes.
    r = httpx.post(url, files={"file": ("holiday.jpg", EVERY_BYTE)}, timeout=30)
    assert r.status_code == 200, r.text
    assert bytes(sbx.files.read("ul/form.bin", format="bytes")) == EVERY_BYTE
    assert not sbx.files.exists("holiday.jpg")
    url = sbx.upload_url("ul/raw.bin", use_signature_expiration=120)
    req = urllib.request.Request(
        url, data=EVERY_BYTE[::-1], method="POST", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    assert bytes(sbx.files.read("ul/raw.bin", format="bytes")) == EVERY_BYTE[::-1]


def test_a_url_for_one_path_reads_and_writes_no_other(sbx: Sandbox) -> None:
    sbx.files.write("secret.txt", SECRET)
    sbx.files.write("public.txt", "public\n")
    url = sbx.download_url("public.txt")
    status, body = get(with_query(url, path="secret.txt"))
    assert status == 401, body
    assert SECRET not in body
    status, body = get(with_query(url, path="/home/user/secret.txt"))
    assert status == 401 and SECRET not in body
    # A second `path` (which one would win?) is refused outright.
    status, body = get(url + "&path=secret.txt")
    assert status in (400, 401) and SECRET not in body
    up = sbx.upload_url("drop/here.txt")
    r = httpx.post(with_query(up, path="secret.txt"), content=b"overwritten", timeout=30)
    assert r.status_code == 401, r.text
    # A multipart part naming another file writes the signed one only.
    r = httpx.post(up, files={"file": ("/home/user/secret.txt", b"overwritten")}, timeout=30)
    assert r.status_code == 200, r.text
    assert sbx.files.read("secret.txt", format="bytes") == SECRET
    assert sbx.files.read("drop/here.txt") == "overwritten"


def test_a_download_url_uploads_nothing_and_an_upload_url_downloads_nothing(sbx: Sandbox) -> None:
    sbx.files.write("ops.txt", SECRET)
    r = httpx.post(sbx.download_url("ops.txt"), content=b"overwritten", timeout=30)
    assert r.status_code == 401, r.text
    assert sbx.files.read("ops.txt", format="bytes") == SECRET
    status, body = get(sbx.upload_url("ops.txt"))
    assert status == 401 and SECRET not in body


def test_an_expired_or_altered_url_is_refused(sbx: Sandbox) -> None:
    sbx.files.write("exp.txt", SECRET)
    short = sbx.download_url("exp.txt", use_signature_expiration=1)
    exp = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(short).query))["signature_expiration"]
    # Its expiry pushed later: the signature no longer matches.
    status, body = get(with_query(short, signature_expiration=str(int(exp) + 3600)))
    assert status == 401 and SECRET not in body
    # Its expiry dropped: the same.
    status, body = get(with_query(short, signature_expiration=None))
    assert status == 401 and SECRET not in body
    time.sleep(2.2)
    status, body = get(short)
    assert status == 401, body
    assert b"expired" in body and SECRET not in body
    url = sbx.download_url("exp.txt")
    sig = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["signature"]
    flipped = sig[:-1] + ("A" if sig[-1] != "A" else "B")
    status, body = get(with_query(url, signature=flipped))
    assert status == 401 and SECRET not in body
    # Signed for another user.
    status, body = get(with_query(url, username="root"))
    assert status == 401 and SECRET not in body
    # No signature at all, and no token.
    status, body = get(with_query(url, signature=None))
    assert status == 401 and SECRET not in body
    status, body = get(with_query(url, signature=None, signature_expiration="9999999999"))
    assert status == 401 and SECRET not in body


def test_a_url_of_one_sandbox_is_nothing_against_another_or_once_it_is_killed(daemon: Daemon) -> None:
    a, b = Sandbox.create(timeout=120), Sandbox.create(timeout=120)
    try:
        a.files.write("same.txt", b"a's\n")
        b.files.write("same.txt", SECRET)
        url = a.download_url("same.txt")
        assert get(url) == (200, b"a's\n")
        # Sent to B, by B's sandbox id.
        r = httpx.get(url, headers={"E2b-Sandbox-Id": b.sandbox_id}, timeout=30)
        assert r.status_code == 401 and SECRET not in r.content
        up = a.upload_url("same.txt")
        r = httpx.post(up, content=b"overwritten", headers={"E2b-Sandbox-Id": b.sandbox_id}, timeout=30)
        assert r.status_code == 401
        assert b.files.read("same.txt", format="bytes") == SECRET
        # A's access token is not B's either.
        r = httpx.get(
            f"{daemon.url}/files",
            params={"path": "same.txt"},
            headers={"E2b-Sandbox-Id": b.sandbox_id, "X-Access-Token": a._envd_access_token or ""},
            timeout=30,
        )
        assert r.status_code == 401 and SECRET not in r.content
        a.kill()
        status, body = get(url)
        assert status == 401, body
        r = httpx.post(up, content=b"x", timeout=30)
        assert r.status_code == 401
    finally:
        a.kill()
        b.kill()


def test_a_url_does_no_more_than_its_token_and_ends_with_it(daemon: Daemon) -> None:
    # A token that may run commands but not touch files: its URLs move no file.
    no_files = daemon.token("sandboxes:read", "sandboxes:write", "exec")
    s = Sandbox.create(timeout=120, api_key=no_files)
    try:
        s.commands.run("printf planted > /home/user/planted.txt")
        status, body = get(s.download_url("planted.txt"))
        assert status == 403 and b"planted" not in body, body
        r = httpx.post(s.upload_url("new.txt"), content=b"x", timeout=30)
        assert r.status_code == 403
        assert s.commands.run("ls /home/user").stdout.split() == ["planted.txt"]
    finally:
        s.kill()
    # A revoked token's URLs and access token end with it.
    tok = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    s = Sandbox.create(timeout=120, api_key=tok)
    try:
        s.files.write("r.txt", SECRET)
        url = s.download_url("r.txt")
        assert get(url) == (200, SECRET)
        with daemon.owner() as c:
            token_id = tok.split("_")[1]
            assert c.delete(f"/v1/tokens/{token_id}").status_code in (200, 204)
        status, body = get(url)
        assert status == 401 and SECRET not in body, body
        r = httpx.get(
            f"{daemon.url}/files",
            params={"path": "r.txt"},
            headers={"E2b-Sandbox-Id": s.sandbox_id, "X-Access-Token": s._envd_access_token or ""},
            timeout=30,
        )
        assert r.status_code == 401 and SECRET not in r.content
    finally:
        with daemon.owner() as c:
            c.delete(f"/v1/sandboxes/{s.sandbox_id}", params={"force": "true"})


def test_a_url_of_a_sandbox_removed_natively_is_refused(daemon: Daemon) -> None:
    s = Sandbox.create(timeout=120)
    s.files.write("n.txt", SECRET)
    url = s.download_url("n.txt")
    assert get(url) == (200, SECRET)
    with daemon.owner() as c:
        assert c.delete(f"/v1/sandboxes/{s.sandbox_id}", params={"force": "true"}).status_code in (200, 204)
    status, body = get(url)
    assert status == 401 and SECRET not in body


def test_the_access_token_is_the_sandboxs_own_not_the_api_key(sbx: Sandbox, api_key: str) -> None:
    token = sbx._envd_access_token
    assert token and token != api_key
    # Connecting again answers the same one to the same token.
    again = Sandbox.connect(sbx.sandbox_id)
    assert again._envd_access_token == token
    assert again.commands.run("echo hi").stdout == "hi\n"


@pytest.mark.asyncio
async def test_the_async_client_signs_urls_too() -> None:
    s = await AsyncSandbox.create(timeout=120)
    try:
        await s.files.write("async.bin", EVERY_BYTE)
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.get(s.download_url("async.bin", use_signature_expiration=60))
            assert r.status_code == 200 and r.content == EVERY_BYTE
            r = await c.post(s.upload_url("async-up.bin"), files={"file": ("x", EVERY_BYTE[:1000])})
            assert r.status_code == 200, r.text
            r = await c.post(s.download_url("async.bin"), content=b"x")
            assert r.status_code == 401
        assert bytes(await s.files.read("async-up.bin", format="bytes")) == EVERY_BYTE[:1000]
    finally:
        await s.kill()


def test_a_sandbox_the_e2b_door_did_not_make_signs_with_a_key_of_its_own(
    daemon: Daemon, api_key: str
) -> None:
    # Made natively, connected to through E2B: the door answers a key of
    # the sandbox's own (never the caller's warden token, which would
    # create and list sandboxes), so a URL signed with it does what it was
    # signed for and nothing else (test_envd_keys.py).
    # Made natively by the same token (a token reaches only the sandboxes
    # it made).
    with daemon.owner() as c:
        r = c.post("/v1/sandboxes", json={"ttl_seconds": 120}, headers={"authorization": f"Bearer {api_key}"})
        assert r.status_code in (200, 201), r.text
        sid = r.json()["id"]
    try:
        s = Sandbox.connect(sid)
        assert s._envd_access_token != api_key
        assert s._envd_access_token.startswith("wde_")
        s.files.write("native.txt", b"native\n")
        s.files.write("planted.txt", SECRET)
        status, body = get(s.download_url("native.txt"))
        assert status == 200 and body == b"native\n", body
        status, body = get(with_query(s.download_url("native.txt"), path="planted.txt"))
        assert status == 401 and SECRET not in body, body
    finally:
        with daemon.owner() as c:
            c.delete(f"/v1/sandboxes/{sid}", params={"force": "true"})
