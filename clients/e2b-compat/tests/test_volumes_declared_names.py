"""A declared volume's `tokens` names tokens the owner meant, and no
other: a name is free text that any admin token could give a token it
makes, so a listed name is matched only on a token the owner made, and a
token may not make a token with a listed name. A token made by a token
holds a declared volume only when its own ID is listed, or every
token's is: never through its name, and never one its maker does not
hold.

Attack (outside review 26, F2): the owner lists `ci` for a writable
host directory; an admin token the owner did not list makes a child
named `ci`, which mounted the directory and wrote into the host."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon, point_sdk, restart, serve

SCOPES = ["sandboxes:read", "sandboxes:write", "exec", "files"]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("warden-declared-names-host") / "scratch"
    d.mkdir()
    return d


def _config(host: Path, listed: str) -> str:
    return f"e2b:\n  volumes:\n    scratch: {{path: {host}, writable: true, tokens: [{listed}]}}\n"


@pytest.fixture(scope="module")
def daemon_(tmp_path_factory: pytest.TempPathFactory, host: Path) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-declared-names")
    yield from serve(base, _config(host, "ci"), listen=True)


def _owner_token(d: Daemon, name: str, scopes: list) -> str:
    with d.owner() as c:
        r = c.post("/v1/tokens", json={"name": name, "scopes": scopes})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])


def _make(d: Daemon, maker: str, name: str) -> httpx.Response:
    with httpx.Client(base_url=d.native, headers={"Authorization": f"Bearer {maker}"}, timeout=30) as c:  # type: ignore[attr-defined]
        return c.post("/v1/tokens", json={"name": name, "scopes": SCOPES})


def test_a_token_cannot_make_a_token_with_a_name_a_declared_volume_lists(daemon_: Daemon, host: Path) -> None:
    boss = _owner_token(daemon_, "boss", ["admin", *SCOPES])
    r = _make(daemon_, boss, "ci")
    # Before: 201, and the child mounted `scratch` and wrote into it.
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "name_reserved", r.text
    assert r.json()["field"] == "/name", r.text
    # Another name is made as before.
    assert _make(daemon_, boss, "ci-helper").status_code == 201


def test_a_child_named_as_a_listed_token_before_the_listing_mounts_nothing_and_the_owners_token_does(
    daemon_: Daemon, host: Path
) -> None:
    boss = _owner_token(daemon_, "boss2", ["admin", *SCOPES])
    # Named before the owner listed the name: the listing comes later.
    r = _make(daemon_, boss, "deploy")
    assert r.status_code == 201, r.text
    child = str(r.json()["token"])
    conf = Path(daemon_.launch[0][-1])  # type: ignore[index]
    conf.write_text(_config(host, "deploy"))
    restart(daemon_)
    point_sdk(daemon_, child)
    with pytest.raises(SandboxException, match="no volume"):
        Sandbox.create(api_key=child, timeout=60, volume_mounts={"/mnt/scratch": "scratch"})
    assert not any(host.iterdir()), "the child reached the host directory"
    # The token the owner made with that name mounts it.
    mine = _owner_token(daemon_, "deploy", SCOPES)
    point_sdk(daemon_, mine)
    sbx = Sandbox.create(api_key=mine, timeout=60, volume_mounts={"/mnt/scratch": "scratch"})
    try:
        sbx.files.write("/mnt/scratch/by-owners-token", "ok")
    finally:
        sbx.kill()
    assert (host / "by-owners-token").read_text() == "ok"
