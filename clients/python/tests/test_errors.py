"""The daemon's refusals arrive as typed exceptions carrying its problem
object (status, code, message, field), and a refused request makes
nothing."""

from __future__ import annotations

import pytest

from conftest import Daemon
from warden_sandbox import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    Sandbox,
    WardenError,
)


def test_a_bad_spec_is_422_naming_its_field_and_makes_nothing(daemon: Daemon) -> None:
    before = daemon.sandbox_ids()
    with pytest.raises(InvalidRequestError) as e:
        Sandbox.create(spec={"resources": {"memory": "lots"}})
    err = e.value
    assert (err.status, err.code, err.field) == (422, "invalid_spec", "/spec/resources/memory")
    assert "memory" in err.message
    assert isinstance(err, WardenError)
    assert daemon.sandbox_ids() == before


def test_a_bad_name_is_400_naming_its_field(daemon: Daemon) -> None:
    with pytest.raises(BadRequestError) as e:
        Sandbox.create(name="Not A Name")
    assert (e.value.status, e.value.field) == (400, "/name")
    assert "Not A Name" not in daemon.sandbox_ids()


def test_an_unknown_sandbox_is_404() -> None:
    ghost = Sandbox.connect("no-such-sandbox")
    with pytest.raises(NotFoundError) as e:
        ghost.info()
    assert (e.value.status, e.value.code) == (404, "not_found")
    with pytest.raises(NotFoundError):
        ghost.commands.run("true")
    with pytest.raises(NotFoundError):
        ghost.kill()


def test_stopping_a_stopped_sandbox_is_409() -> None:
    with Sandbox.create() as sb:
        sb.stop(grace=1)
        with pytest.raises(ConflictError) as e:
            sb.stop()
        assert e.value.status == 409


def test_over_tcp_a_call_without_a_token_or_with_a_wrong_one_is_401(daemon: Daemon) -> None:
    before = daemon.sandbox_ids()
    with pytest.raises(AuthenticationError) as e:
        Sandbox.list(host=daemon.tcp_host)
    assert (e.value.status, e.value.code) == (401, "unauthorized")
    with pytest.raises(AuthenticationError):
        Sandbox.create(host=daemon.tcp_host)
    with pytest.raises(AuthenticationError):
        Sandbox.create(host=daemon.tcp_host, token="wdn_nope_nope")
    assert daemon.sandbox_ids() == before


def test_the_token_is_taken_from_the_environment(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_HOST", daemon.tcp_host)
    monkeypatch.setenv("WARDEN_TOKEN", daemon.token("sandboxes:read"))
    assert isinstance(Sandbox.list(), list)


def test_a_token_lacking_the_scope_is_403_and_makes_nothing(daemon: Daemon) -> None:
    before = daemon.sandbox_ids()
    reader = daemon.token("sandboxes:read")
    with pytest.raises(PermissionDeniedError) as e:
        Sandbox.create(host=daemon.tcp_host, token=reader)
    assert (e.value.status, e.value.code) == (403, "forbidden")
    assert daemon.sandbox_ids() == before
    with Sandbox.create() as sb:
        # The owner's sandbox: reached by a token the owner made for it.
        reader = daemon.token("sandboxes:read", sandbox=sb.id)
        far = Sandbox.connect(sb.id, host=daemon.tcp_host, token=reader)
        assert far.info().id == sb.id
        with pytest.raises(PermissionDeniedError):
            far.commands.run("touch /workspace/should-not-exist")
        with pytest.raises(PermissionDeniedError):
            far.kill()
        assert sb.commands.run("test -e /workspace/should-not-exist").exit_code == 1
        far.close()


def test_a_token_holder_cannot_reach_into_the_host_through_a_spec(daemon: Daemon) -> None:
    writer = daemon.token("sandboxes:write")
    with pytest.raises(PermissionDeniedError) as e:
        Sandbox.create(spec={"filesystem": {"read_only": ["/root"]}}, host=daemon.tcp_host, token=writer)
    assert e.value.field == "/spec/filesystem/read_only"


def test_a_per_sandbox_token_works_on_its_sandbox_only(daemon: Daemon) -> None:
    with Sandbox.create() as mine, Sandbox.create() as other:
        token = daemon.token("exec", sandbox=mine.id)
        far = Sandbox.connect(mine.id, host=daemon.tcp_host, token=token)
        assert far.commands.run("echo mine").stdout == "mine\n"
        far.close()
        far_other = Sandbox.connect(other.id, host=daemon.tcp_host, token=token)
        with pytest.raises(PermissionDeniedError) as e:
            far_other.commands.run("touch /workspace/pwned")
        assert e.value.status == 403
        assert other.commands.run("test -e /workspace/pwned").exit_code == 1
        # Nor may it list, make or remove sandboxes.
        with pytest.raises(PermissionDeniedError):
            Sandbox.list(host=daemon.tcp_host, token=token)
        with pytest.raises(PermissionDeniedError):
            far_other.kill()
        far_other.close()
