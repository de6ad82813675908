"""E2B's templates as warden has them: the daemon owner's profiles. The
SDK's `Template.exists` answers for the profiles a caller may create
from (and `base`), `GET /templates` lists them (never a profile's
contents or where it is read from), and `Template.build` is refused with
the SDK's own `BuildException` saying what to do instead."""

from __future__ import annotations

import httpx
import pytest
from e2b import AsyncTemplate, BuildException, Template

from conftest import Daemon


def test_exists_is_true_for_the_owners_profiles_and_base_only() -> None:
    assert Template.exists("base")
    assert Template.exists("python")
    assert Template.exists("e2bnet")
    assert not Template.exists("no-such-template")
    # A profile the daemon keeps for itself is no caller's template.
    assert not Template.exists("code-interpreter-v1-setup")


def test_the_template_list_names_the_profiles_and_shows_nothing_of_the_host(
    daemon: Daemon, api_key: str
) -> None:
    r = httpx.get(f"{daemon.url}/templates", headers={"X-API-Key": api_key})
    assert r.status_code == 200, r.text
    names = {t["templateID"] for t in r.json()}
    assert {"base", "python", "e2bnet", "code-interpreter-v1"} <= names
    assert "code-interpreter-v1-setup" not in names
    assert str(daemon.state) not in r.text and "/home/" not in r.text and ".yaml" not in r.text
    one = httpx.get(f"{daemon.url}/templates/python", headers={"X-API-Key": api_key})
    assert one.status_code == 200 and one.json()["templateID"] == "python"
    assert httpx.get(f"{daemon.url}/templates/nope", headers={"X-API-Key": api_key}).status_code == 404


def test_the_template_list_needs_a_token(daemon: Daemon) -> None:
    assert httpx.get(f"{daemon.url}/templates").status_code == 401


def test_a_template_build_is_refused_saying_what_to_do_instead() -> None:
    t = Template().from_python_image("3").run_cmd("echo hi")
    with pytest.raises(BuildException, match="profile"):
        Template.build(t, "my-template")


@pytest.mark.asyncio
async def test_the_async_template_client_is_answered_alike() -> None:
    assert await AsyncTemplate.exists("python")
    assert not await AsyncTemplate.exists("no-such-template")
    t = AsyncTemplate().from_python_image("3")
    with pytest.raises(BuildException, match="profile"):
        await AsyncTemplate.build(t, "my-template")
