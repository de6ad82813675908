"""A writable volume's merge at stop never writes a file the daemon
owner's configuration is read from.

A token's sandbox gets no writable volume over a directory that holds the
owner's configuration (a profile, a file a profile `extends`, a secret's
program) when it is created. But what it writes into the volume lands in
the volume's directory only when it stops, and the owner may change a
profile meanwhile: a profile that comes to `extends` a file in that
directory during the run would read, from the next create on, whatever
the sandbox wrote there, with the owner's trust. So the merge computes
the owner's files again at the stop and holds back every entry that is
one of them (by path, by identity, or on the way to one): the owner's
file stays as it was, the rest of the volume merges as before, and what
was held back is kept for the owner in the state's `held-back/`.

Each test runs on a daemon of its own whose configuration declares a
writable volume over a directory of the owner's."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from e2b import Sandbox, Volume

from conftest import Daemon, point_sdk, serve

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")
LISTED = "listed-token"
# What the sandbox writes where the owner's profile reads: a secret whose
# program the daemon would run on the host, as root, at the next create
# naming the profile.
MALICIOUS = (
    "secrets:\n"
    "  PWNED:\n"
    "    from_command: [/bin/sh, -c, 'touch /tmp/warden-pwned']\n"
    "    hosts: [example.com]\n"
)
BENIGN = "resources:\n  memory: 256M\n"


def _token(d: Daemon, name: str) -> str:
    with d.owner() as c:
        r = c.post("/v1/tokens", json={"name": name, "scopes": list(SCOPES)})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["token"])


@pytest.fixture()
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("warden-volume-owner-config")
    shared = base / "shared"
    shared.mkdir()
    (shared / "base.yaml").write_text(BENIGN)
    config = (
        "e2b:\n"
        "  volumes:\n"
        f"    shared: {{path: {shared}, writable: true, tokens: [{LISTED}]}}\n"
    )
    started = serve(base, config, {"small.yaml": "resources:\n  disk: 48M\n"}, listen=True)
    d = next(started)
    try:
        key = _token(d, LISTED)
        point_sdk(d, key)
        yield {
            "daemon": d,
            "key": key,
            "shared": shared,
            "profiles": base / "config" / "warden" / "profiles",
            "state": base / "state",
        }
    finally:
        started.close()


def _held_back(state: Path, name: str) -> list[Path]:
    root = state / "held-back"
    return sorted(root.glob(f"*/{name}")) if root.is_dir() else []


def test_a_file_the_owners_profile_comes_to_extend_during_the_run_is_held_back_at_stop(
    setup: dict,
) -> None:
    shared, profiles = setup["shared"], setup["profiles"]
    # Kept once killed, so that its log can be read.
    sbx = Sandbox.create(
        api_key=setup["key"],
        template="small",
        timeout=120,
        volume_mounts={"/mnt/shared": "shared"},
        metadata={"warden.keep": "true"},
    )
    try:
        # The owner, during the run: a profile now extends two files of
        # the volume's directory, one there already and one to come.
        (profiles / "later.yaml").write_text(
            f"extends: [{shared / 'base.yaml'}, {shared / 'new.yaml'}]\n"
        )
        for name in ("base.yaml", "new.yaml"):
            sbx.files.write(f"/mnt/shared/{name}", MALICIOUS)
        sbx.commands.run("echo merged > /mnt/shared/note.txt")
    finally:
        sbx.kill()
    # Before, the merge wrote both: the owner's `later` profile then ran
    # the sandbox's program on the host.
    assert (shared / "base.yaml").read_text() == BENIGN
    assert not (shared / "new.yaml").exists()
    # Everything else merges as before.
    assert (shared / "note.txt").read_text() == "merged\n"
    # What was held back is the owner's to read.
    for name in ("base.yaml", "new.yaml"):
        kept = _held_back(setup["state"], name)
        assert [k.read_text() for k in kept] == [MALICIOUS], name
    # And told in the sandbox's log, with the reason and where it is kept.
    said = [
        json.loads(line)
        for log in setup["state"].glob("sandboxes/*/*.jsonl")
        for line in log.read_text().splitlines()
        if '"volume_held_back"' in line
    ]
    assert len(said) == 1, said
    assert said[0]["reason"] == "holds_configuration"
    assert sorted(said[0]["paths"]) == ["base.yaml", "new.yaml"]
    assert Path(said[0]["kept"]) == kept[0].parent


def test_a_link_or_directory_made_on_the_way_to_the_owners_file_is_held_back(
    setup: dict,
) -> None:
    shared, profiles = setup["shared"], setup["profiles"]
    sbx = Sandbox.create(
        api_key=setup["key"], template="small", timeout=120, volume_mounts={"/mnt/shared": "shared"}
    )
    try:
        (profiles / "deep.yaml").write_text(
            f"extends: [{shared / 'conf' / 'base.yaml'}, {shared / 'linked.yaml'}]\n"
        )
        sbx.commands.run(
            "mkdir -p /mnt/shared/conf && cp /dev/null /mnt/shared/conf/base.yaml"
            " && printf 'x' > /mnt/shared/conf/other"
            " && ln -s /etc/hostname /mnt/shared/linked.yaml"
        )
        sbx.files.write("/mnt/shared/conf/base.yaml", MALICIOUS)
    finally:
        sbx.kill()
    # A new directory on the way to the owner's file: held back whole,
    # and so is a link at the file's own path.
    assert not (shared / "conf").exists()
    assert not (shared / "linked.yaml").is_symlink() and not (shared / "linked.yaml").exists()
    kept = _held_back(setup["state"], "conf/base.yaml")
    assert [k.read_text() for k in kept] == [MALICIOUS]
    assert [k.is_symlink() for k in _held_back(setup["state"], "linked.yaml")] == [True]


def test_a_tokens_own_volume_merges_as_before_but_a_file_the_owner_names_in_it_is_held_back(
    setup: dict,
) -> None:
    vol = Volume.create(f"own-{uuid.uuid4().hex[:6]}")
    data = next(setup["state"].glob(f"e2b/volumes/*/data"))
    sbx = Sandbox.create(
        api_key=setup["key"], template="small", timeout=120, volume_mounts={"/mnt/own": vol}
    )
    try:
        (setup["profiles"] / "own.yaml").write_text(f"extends: [{data / 'named.yaml'}]\n")
        sbx.files.write("/mnt/own/named.yaml", MALICIOUS)
        sbx.commands.run("mkdir -p /mnt/own/sub && echo mine > /mnt/own/sub/file")
    finally:
        sbx.kill()
    assert not (data / "named.yaml").exists()
    assert (data / "sub" / "file").read_text() == "mine\n"
    assert [k.read_text() for k in _held_back(setup["state"], "named.yaml")] == [MALICIOUS]
