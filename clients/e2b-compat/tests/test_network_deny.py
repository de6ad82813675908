"""E2B's `denyOut` and `allowInternetAccess: false` are honoured, never
taken and ignored: in E2B everything is allowed unless denied, and
`allow_out` wins over `deny_out`; in warden the template (the owner's
profile) plays the part of "everything". Denying all traffic (or
`allow_internet_access=False`) takes the template's names away, at
create and by `update_network`, and an update that no longer denies it
gives them back. Denying one address or range, which warden (deciding by
name) cannot do to the names a template allows, is refused with a clear
error and makes nothing; a name in `deny_out` is refused as E2B refuses
it. A real listener on the host's loopback, to which the template pins
its name, records whether anything arrived."""

from __future__ import annotations

import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon
from test_network import CONNECT, Listener


def template(daemon: Daemon, name: str, body: str) -> str:
    (daemon.state.parent / "config" / "warden" / "profiles" / f"{name}.yaml").write_text(body)
    return name


def pinned_template(daemon: Daemon, listener: Listener) -> str:
    """A template that allows one name, pinned to `listener`."""
    return template(
        daemon,
        f"e2bdeny-{listener.port}",
        "egress:\n"
        f"  domains: [\"allowed.test:{listener.port}\"]\n"
        "  hosts: {allowed.test: 127.0.0.1}\n",
    )


def reaches(sbx: Sandbox, listener: Listener) -> bool:
    before = listener.arrivals
    sbx.files.write("c.py", CONNECT)
    sbx.commands.run(f"python3 c.py allowed.test {listener.port}", timeout=60)
    return listener.arrivals > before


def ids(daemon: Daemon) -> list:
    return [s["id"] for s in daemon.sandboxes()]


@pytest.mark.parametrize(
    "deny",
    [
        {"allow_internet_access": False},
        {"network": {"deny_out": ["0.0.0.0/0"]}},
    ],
    ids=["allow_internet_access_false", "deny_out_all_traffic"],
)
def test_denying_all_traffic_at_create_takes_the_templates_names_away(
    daemon: Daemon, deny: dict
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    # The set-up reaches the listener when nothing is denied...
    open_one = Sandbox.create(template=name, timeout=120)
    try:
        assert reaches(open_one, listener)
    finally:
        open_one.kill()
    # ...and nothing arrives from a sandbox that denies all traffic.
    sbx = Sandbox.create(template=name, timeout=120, **deny)
    try:
        assert not reaches(sbx, listener)
        assert not reaches(sbx, listener)
    finally:
        sbx.kill()


def test_update_network_denies_all_traffic_and_gives_the_templates_names_back(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    sbx = Sandbox.create(template=name, timeout=120)
    try:
        assert reaches(sbx, listener)
        sbx.update_network({"allow_internet_access": False})
        assert not reaches(sbx, listener)
        sbx.update_network({"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]})
        assert not reaches(sbx, listener)
        # An update replaces the whole configuration: no denial, the
        # template's name is the owner's again (its pin included).
        sbx.update_network({})
        assert reaches(sbx, listener)
    finally:
        sbx.kill()


def test_a_sandbox_created_without_internet_access_is_given_it_back_by_an_update(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    sbx = Sandbox.create(template=name, timeout=120, allow_internet_access=False)
    try:
        assert not reaches(sbx, listener)
        sbx.update_network({"allow_internet_access": True})
        assert reaches(sbx, listener)
    finally:
        sbx.kill()


def test_denying_one_address_to_a_template_that_allows_names_is_refused_and_makes_nothing(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    before = ids(daemon)
    with pytest.raises(SandboxException, match="cannot deny an address"):
        Sandbox.create(template=name, timeout=60, network={"deny_out": ["127.0.0.1"]})
    assert ids(daemon) == before
    sbx = Sandbox.create(template=name, timeout=120)
    try:
        with pytest.raises(SandboxException, match="cannot deny an address"):
            sbx.update_network({"deny_out": ["127.0.0.0/8"]})
        # Nothing changed: the template's name is reached still.
        assert reaches(sbx, listener)
    finally:
        sbx.kill()


def test_a_name_in_deny_out_is_refused_as_e2b_refuses_it(daemon: Daemon) -> None:
    before = ids(daemon)
    with pytest.raises(SandboxException, match="not an address or a range"):
        Sandbox.create(timeout=60, network={"deny_out": ["example.com"]})
    assert ids(daemon) == before


def test_denying_an_address_to_a_template_that_reaches_nothing_is_already_so(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = template(daemon, f"e2bquiet-{listener.port}", "resources:\n  memory: 512M\n")
    sbx = Sandbox.create(
        template=name, timeout=120, network={"deny_out": ["127.0.0.1", "10.0.0.0/8"]}
    )
    try:
        assert not reaches(sbx, listener)
        sbx.update_network({"deny_out": ["127.0.0.1"]})
    finally:
        sbx.kill()


def test_the_default_template_without_internet_access_allows_nothing(daemon: Daemon) -> None:
    # The default template (`base`) allows an LLM API's name; without
    # internet access the sandbox's allowlist is empty, and with it the
    # name is there.
    def allowlist(sid: str) -> list:
        with daemon.owner() as c:
            r = c.patch(f"/v1/sandboxes/{sid}/egress", json={})
            assert r.status_code == 200, r.text
            return list(r.json()["allow"])

    sbx = Sandbox.create(timeout=120, allow_internet_access=False)
    try:
        assert allowlist(sbx.sandbox_id) == []
        sbx.update_network({})
        assert allowlist(sbx.sandbox_id) != []
    finally:
        sbx.kill()


def test_an_update_gives_back_only_the_names_the_door_took_never_one_the_owner_removed(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    entry = f"allowed.test:{listener.port}"
    sbx = Sandbox.create(template=name, timeout=120)
    try:
        # The owner takes the template's name away, live.
        with daemon.owner() as c:
            r = c.patch(f"/v1/sandboxes/{sbx.sandbox_id}/egress", json={"remove": [entry]})
            assert r.status_code == 200, r.text
        sbx.update_network({"allow_internet_access": False})
        sbx.update_network({})
        assert not reaches(sbx, listener)
    finally:
        sbx.kill()
