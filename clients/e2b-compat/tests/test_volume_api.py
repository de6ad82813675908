"""E2B's volumes (`e2b.Volume`) are directories the daemon makes and keeps
in its own state, owned by the token that made it: another token neither
lists, reads nor deletes one, and is answered as for a volume that does
not exist. A volume's name is never a path: a name with `/`, `..`, NUL or
of unbounded length is refused, and nothing is made."""

from __future__ import annotations

import os
import uuid

import pytest
from e2b import Volume, VolumeException, VolumeNotFoundException

from conftest import Daemon

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")


def _name() -> str:
    return f"vol-{uuid.uuid4().hex[:8]}"


def _volume_dirs(daemon: Daemon) -> set:
    root = daemon.state / "e2b" / "volumes"
    return set(os.listdir(root)) if root.is_dir() else set()


def test_a_volume_is_made_listed_found_and_deleted_by_its_token(daemon: Daemon) -> None:
    name = _name()
    vol = Volume.create(name)
    try:
        assert vol.name == name and vol.volume_id
        assert (vol.volume_id, name) in {(v.volume_id, v.name) for v in Volume.list()}
        info = Volume.get_info(vol.volume_id)
        assert info.name == name
        # Its directory is the daemon's, owner-only.
        d = daemon.state / "e2b" / "volumes" / vol.volume_id
        assert d.is_dir() and (d / "data").is_dir()
        assert oct(d.stat().st_mode & 0o777) == "0o700"
        with pytest.raises(VolumeException):
            Volume.create(name)
    finally:
        assert Volume.destroy(vol.volume_id) is True
    assert vol.volume_id not in {v.volume_id for v in Volume.list()}
    assert Volume.destroy(vol.volume_id) is False
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(vol.volume_id)


def test_another_tokens_volume_is_answered_as_one_that_does_not_exist(daemon: Daemon) -> None:
    vol = Volume.create(_name())
    other = daemon.token(*SCOPES)
    try:
        assert vol.volume_id not in {v.volume_id for v in Volume.list(api_key=other)}
        for asked in (vol.volume_id, vol.name):
            with pytest.raises(VolumeNotFoundException):
                Volume.get_info(asked, api_key=other)
            assert Volume.destroy(asked, api_key=other) is False
        # Nothing was done to it.
        assert Volume.get_info(vol.volume_id).name == vol.name
        # A volume of the same name is the other token's own, apart.
        theirs = Volume.create(vol.name, api_key=other)
        assert theirs.volume_id != vol.volume_id
        assert Volume.destroy(theirs.volume_id, api_key=other) is True
        assert Volume.get_info(vol.volume_id).name == vol.name
    finally:
        Volume.destroy(vol.volume_id)


@pytest.mark.parametrize(
    "name",
    ["", "/", "..", "a/b", "../../etc", "/etc", "a\0b", ".hidden", "x" * 64, "x" * 100_000],
)
def test_a_volume_name_that_is_a_path_or_unbounded_is_refused_and_makes_nothing(
    daemon: Daemon, name: str
) -> None:
    before = _volume_dirs(daemon)
    with pytest.raises(VolumeException):
        Volume.create(name)
    assert _volume_dirs(daemon) == before


def test_a_token_without_the_sandbox_scopes_makes_no_volume(daemon: Daemon) -> None:
    reader = daemon.token("sandboxes:read")
    before = _volume_dirs(daemon)
    with pytest.raises(VolumeException):
        Volume.create(_name(), api_key=reader)
    assert _volume_dirs(daemon) == before
