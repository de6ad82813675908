"""An invalid create option is said at its place in the E2B body the
client sent (`timeout`, `metadata.job`, `envVars.NAME`,
`network.allowOut[0]`), never by warden's own field name or the native
API's JSON pointer, and makes no sandbox."""

from __future__ import annotations

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon

NATIVE_WORDS = ("/labels", "/spec", "ttl_seconds", "env.set", "egress.domains", "--allow-domain", "--env", "line 1 column")


def ids(daemon: Daemon) -> list:
    return sorted(s["id"] for s in daemon.sandboxes())


def raw(daemon: Daemon, api_key: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{daemon.url}/sandboxes",
        json={"templateID": "base", **body},
        headers={"X-API-Key": api_key},
        timeout=60,
    )


@pytest.mark.parametrize(
    "body, place",
    [
        ({"timeout": "soon"}, "timeout: "),
        ({"timeout": -5}, "timeout: "),
        ({"metadata": {"job": 42}}, "metadata.job: "),
        ({"metadata": {"job": "x" * 2000}}, "metadata.job: "),
        # Another door's own record (MCP's), refused at the client's key.
        ({"metadata": {"mcp-lease": "1.1"}}, "metadata.mcp-lease: "),
        ({"envVars": {"MODE": None}}, "envVars.MODE: "),
        ({"envVars": {"A=B": "c"}}, "envVars.A=B: "),
        ({"network": {"allowOut": [7]}}, "network.allowOut[0]: "),
        ({"network": {"allowOut": ["bad domain!"]}}, "network.allowOut[0]: "),
    ],
)
def test_an_invalid_option_is_said_at_its_e2b_place_and_makes_nothing(
    daemon: Daemon, api_key: str, body: dict, place: str
) -> None:
    before = ids(daemon)
    r = raw(daemon, api_key, body)
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert message.startswith(place), message
    assert not any(w in message for w in NATIVE_WORDS), message
    assert ids(daemon) == before


def test_the_sdk_raises_its_own_exception_naming_the_metadata_key(daemon: Daemon) -> None:
    before = ids(daemon)
    with pytest.raises(SandboxException, match=r"metadata\.job: "):
        Sandbox.create(metadata={"job": "x" * 2000}, timeout=60)
    assert ids(daemon) == before
