"""Every option of the SDK's create body (2.63.0) is honoured or refused
with a 400 saying what warden does instead; none is taken and ignored.
`network.allowPublicTraffic: true`, `maskRequestHost` and `httpsPorts` ask
for port relaying warden does not do; `secure: false` for envd without its
access token; a non-empty `iam.tokens` for workload identity. What warden
does give (`allowPublicTraffic: false`, `secure: true`, an empty `iam`) is
taken. Each refusal makes no sandbox."""

from __future__ import annotations

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon


def ids(daemon: Daemon) -> list:
    return [s["id"] for s in daemon.sandboxes()]


@pytest.mark.parametrize(
    "network, words",
    [
        ({"allow_public_traffic": True}, "allowPublicTraffic"),
        ({"mask_request_host": "localhost:${PORT}"}, "maskRequestHost"),
        ({"https_ports": [8443]}, "httpsPorts"),
    ],
)
def test_a_port_option_warden_cannot_give_is_refused_and_makes_nothing(
    daemon: Daemon, label: str, network: dict, words: str
) -> None:
    before = ids(daemon)
    with pytest.raises(SandboxException, match=words):
        Sandbox.create(metadata={"test": label}, timeout=60, network=network)
    assert ids(daemon) == before


def test_what_warden_gives_of_the_port_options_is_taken(label: str) -> None:
    sbx = Sandbox.create(
        metadata={"test": label},
        timeout=60,
        network={"allow_public_traffic": False, "https_ports": []},
    )
    try:
        assert sbx.commands.run("echo ok").stdout.strip() == "ok"
    finally:
        sbx.kill()


def raw_create(daemon: Daemon, api_key: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{daemon.url}/sandboxes",
        json={"templateID": "base", "timeout": 60, **body},
        headers={"X-API-Key": api_key},
        timeout=60,
    )


@pytest.mark.parametrize(
    "body, words",
    [
        ({"secure": False}, "secure"),
        ({"iam": {"tokens": {"aws": {"audience": "sts.amazonaws.com"}}}}, "iam"),
        ({"iam": {"roles": ["x"]}}, "iam"),
        # An option of a later SDK: refused by name, not ignored.
        ({"gpu": True}, "gpu"),
        ({"network": {"allowOut": ["example.com"], "bandwidth": 1}}, "bandwidth"),
    ],
)
def test_a_create_option_warden_cannot_give_is_refused_by_name_and_makes_nothing(
    daemon: Daemon, api_key: str, body: dict, words: str
) -> None:
    before = ids(daemon)
    r = raw_create(daemon, api_key, body)
    assert r.status_code == 400, r.text
    assert words in r.json()["message"], r.text
    assert ids(daemon) == before


def test_secure_true_and_an_empty_iam_are_taken(
    daemon: Daemon, api_key: str
) -> None:
    r = raw_create(daemon, api_key, {"secure": True, "iam": {"tokens": {}}})
    assert r.status_code == 201, r.text
    Sandbox.kill(r.json()["sandboxID"])
