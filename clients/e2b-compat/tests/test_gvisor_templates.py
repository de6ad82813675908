"""A template (a profile of the daemon's owner) that asks `isolation
gvisor` for what gVisor cannot give (a package cache, a desktop) is
refused when the sandbox is created, with a code, and makes nothing.
Before, the create was taken, its supervisor's start of runsc refused it,
and the unmodified SDK got a bare 400 `refused`.

A token's create is told only that the owner's profile does not compose
(`owners_profile_invalid`: a caller is not told what the owner's profile
holds); the owner, on the daemon's socket, is told the reason itself
(`caches_with_gvisor`, `desktop_with_gvisor`) at the field's pointer."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon, point_sdk, serve

PROFILES = {
    "gv-cache.yaml": "isolation: gvisor\nfilesystem:\n  caches: [pip]\n",
    "gv-desktop.yaml": "isolation: gvisor\ndesktop: true\n",
}


@pytest.fixture(scope="module")
def owned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base: Path = tmp_path_factory.mktemp("warden-e2b-gvisor")
    yield from serve(base, "", PROFILES)


@pytest.mark.parametrize(
    "template, reason, pointer",
    [
        ("gv-cache", "caches_with_gvisor", "/spec/filesystem/caches"),
        ("gv-desktop", "desktop_with_gvisor", "/spec/desktop"),
    ],
)
def test_a_gvisor_template_asking_what_gvisor_cannot_give_is_refused_with_a_code_and_makes_nothing(
    owned: Daemon, template: str, reason: str, pointer: str
) -> None:
    key = owned.token("sandboxes:read", "sandboxes:write", "exec", "files")
    point_sdk(owned, key)
    with pytest.raises(SandboxException, match="owners_profile_invalid") as refused:
        Sandbox.create(template=template, timeout=60)
    assert refused.value.status_code == 400, refused.value
    r = httpx.post(
        f"{owned.url}/sandboxes",
        json={"templateID": template},
        headers={"X-API-Key": key},
        timeout=60,
    )
    assert (r.status_code, r.json().get("error_code")) == (400, "owners_profile_invalid"), r.text
    assert owned.sandboxes() == []
    # The owner is told why, at the field.
    with owned.owner() as c:
        r = c.post("/v1/sandboxes", json={"profile": template, "start": True})
    assert r.status_code == 422, r.text
    p = r.json()
    assert (p["code"], p["reason"], p["field"]) == ("invalid_spec", reason, pointer), r.text
    assert owned.sandboxes() == []
