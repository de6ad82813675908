"""Volumes the daemon's owner declares (`e2b: volumes:` in its
configuration) and the bound on what a sandbox writes into any volume.

A declared volume is a host directory the owner names, with whether it may
be written and which tokens may mount it (none unless listed). A caller
names it only by its name: it never names a host path, never creates,
deletes or lists a declared volume, never mounts one it is not listed for
(answered as for a volume that does not exist), and never reaches outside
the declared directory (a link in it that points out is read inside the
sandbox's own view, never the host's). The native API refuses a token that
names a host directory as a volume itself.

What a sandbox writes into a writable volume is held in its size-limited
tmpfs (the template's `resources.disk`) while it runs and merged into the
volume when it stops: a sandbox writing without end is stopped with ENOSPC
at its disk limit, and the volume on the host grows by no more than that.

Each test here runs on a daemon of its own whose configuration declares
the volumes and whose `small` template has a disk limit of DISK_MB."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from e2b import Sandbox, SandboxException, Volume

from conftest import Daemon, _binary, point_sdk, serve

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")
DISK_MB = 48
LISTED, UNLISTED = "listed-token", "unlisted-token"


def _tree_bytes(d: Path) -> int:
    total = 0
    for root, dirs, files in os.walk(d):
        for f in files:
            p = Path(root) / f
            if not p.is_symlink():
                total += p.stat().st_blocks * 512
    return total


def _serve(base: Path, config: str) -> Iterator[Daemon]:
    """A daemon of its own, configured with `config`, with a `small`
    template, and the native API on TCP."""
    yield from serve(
        base, config, {"small.yaml": f"resources:\n  disk: {DISK_MB}M\n"}, listen=True
    )


def _token(d: Daemon, name: str) -> str:
    with d.owner() as c:
        r = c.post("/v1/tokens", json={"name": name, "scopes": list(SCOPES)})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["token"])


_as = point_sdk


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The owner's directories: a dataset (read-only for the listed token),
    a scratch directory (writable for it), and a secret beside them that
    no sandbox may read."""
    base = tmp_path_factory.mktemp("warden-declared-host")
    dataset, scratch, secret = base / "dataset", base / "scratch", base / "secret"
    for d in (dataset, scratch, secret):
        d.mkdir()
    (dataset / "rows.csv").write_text("a,b\n1,2\n")
    (secret / "key").write_text("host secret")
    # Links planted in the declared directory that point out of it.
    (dataset / "abs-link").symlink_to(secret / "key")
    (dataset / "rel-link").symlink_to("../secret/key")
    (dataset / "dir-link").symlink_to(secret)
    return {"dataset": dataset, "scratch": scratch, "secret": secret}


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory, host: dict) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-declared")
    config = (
        "e2b:\n"
        "  volumes:\n"
        f"    dataset: {{path: {host['dataset']}, tokens: [{LISTED}]}}\n"
        f"    scratch: {{path: {host['scratch']}, writable: true, tokens: [{LISTED}]}}\n"
        f"    nobodys: {{path: {host['dataset']}}}\n"
    )
    yield from _serve(base, config)


@pytest.fixture(scope="module")
def keys(declared: Daemon) -> dict:
    return {LISTED: _token(declared, LISTED), UNLISTED: _token(declared, UNLISTED)}


def _create(key: str, **kw) -> Sandbox:
    return Sandbox.create(api_key=key, template="small", timeout=120, **kw)


def test_a_listed_token_reads_a_declared_volume_and_cannot_write_a_read_only_one(
    declared: Daemon, keys: dict, host: dict
) -> None:
    _as(declared, keys[LISTED])
    sbx = _create(keys[LISTED], volume_mounts={"/mnt/dataset": "dataset"})
    try:
        assert sbx.commands.run("cat /mnt/dataset/rows.csv").stdout == "a,b\n1,2\n"
        wrote = sbx.commands.run("echo x > /mnt/dataset/new 2>&1; echo $?")
        assert wrote.stdout.strip().splitlines()[-1] != "0"
    finally:
        sbx.kill()
    assert not (host["dataset"] / "new").exists()


def test_a_link_in_a_declared_volume_that_points_out_never_reaches_the_host(
    declared: Daemon, keys: dict
) -> None:
    _as(declared, keys[LISTED])
    sbx = _create(keys[LISTED], volume_mounts={"/mnt/dataset": "dataset"})
    try:
        for link in ("abs-link", "rel-link", "dir-link/key"):
            out = sbx.commands.run(f"cat /mnt/dataset/{link} 2>&1 || true").stdout
            assert "host secret" not in out, link
    finally:
        sbx.kill()


def test_a_writable_declared_volume_gets_what_the_sandbox_wrote_when_it_stops(
    declared: Daemon, keys: dict, host: dict
) -> None:
    _as(declared, keys[LISTED])
    name = f"note-{uuid.uuid4().hex[:6]}"
    sbx = _create(keys[LISTED], volume_mounts={"/mnt/scratch": "scratch"})
    try:
        sbx.commands.run(f"echo kept > /mnt/scratch/{name}")
    finally:
        sbx.kill()
    assert (host["scratch"] / name).read_text() == "kept\n"


@pytest.mark.parametrize("name", ["dataset", "scratch", "nobodys"])
def test_a_token_the_owner_did_not_list_cannot_mount_a_declared_volume_and_nothing_is_made(
    declared: Daemon, keys: dict, name: str
) -> None:
    _as(declared, keys[UNLISTED])
    before = sorted(s["id"] for s in declared.sandboxes())
    with pytest.raises(SandboxException, match="no volume"):
        _create(keys[UNLISTED], volume_mounts={"/mnt/data": name})
    assert sorted(s["id"] for s in declared.sandboxes()) == before


@pytest.mark.parametrize(
    "named", ["/", "../dataset", "dataset/..", "dataset/rows.csv", "DATASET", ""]
)
def test_a_declared_volume_is_named_never_reached_by_a_path(
    declared: Daemon, keys: dict, host: dict, named: str
) -> None:
    _as(declared, keys[LISTED])
    before = sorted(s["id"] for s in declared.sandboxes())
    for n in (named, str(host["dataset"]), str(host["secret"])):
        with pytest.raises(SandboxException, match="no volume"):
            _create(keys[LISTED], volume_mounts={"/mnt/data": n})
    assert sorted(s["id"] for s in declared.sandboxes()) == before


@pytest.mark.parametrize("inside", ["/mnt/../etc", "/mnt/data/..", "/home/user/../..", "/etc"])
def test_a_declared_volume_is_never_mounted_over_what_warden_assembles(
    declared: Daemon, keys: dict, inside: str
) -> None:
    _as(declared, keys[LISTED])
    with pytest.raises(SandboxException, match="volumeMounts"):
        _create(keys[LISTED], volume_mounts={inside: "dataset"})


def test_a_caller_neither_lists_destroys_nor_takes_the_name_of_a_declared_volume(
    declared: Daemon, keys: dict, host: dict
) -> None:
    _as(declared, keys[LISTED])
    assert "dataset" not in {v.name for v in Volume.list()}
    assert Volume.destroy("dataset") is False
    with pytest.raises(Exception, match="declared"):
        Volume.create("dataset")
    assert (host["dataset"] / "rows.csv").read_text() == "a,b\n1,2\n"
    # Over plain HTTP, as the SDK would not: the same answers.
    with httpx.Client(base_url=declared.url, headers={"X-API-Key": keys[LISTED]}) as c:
        assert c.delete("/volumes/dataset").status_code == 404
        assert c.get("/volumes/dataset").status_code == 404
        assert c.post("/volumes", json={"name": "../dataset"}).status_code == 400
        assert c.post("/volumes", json={"name": "a/b"}).status_code == 400
    assert host["dataset"].is_dir()


def test_the_native_api_refuses_a_token_that_names_a_host_directory_as_a_volume(
    declared: Daemon, keys: dict, host: dict
) -> None:
    before = sorted(s["id"] for s in declared.sandboxes())
    with httpx.Client(
        base_url=declared.native,  # type: ignore[attr-defined]
        headers={"Authorization": f"Bearer {keys[LISTED]}"},
    ) as c:
        for entry in (f"{host['secret']}:/mnt/data", f"{host['dataset']}:/mnt/data:ro"):
            r = c.post(
                "/v1/sandboxes",
                json={"spec": {"filesystem": {"volumes": [entry]}}},
            )
            assert r.status_code in (400, 403), r.text
            assert "volumes" in r.text
    assert sorted(s["id"] for s in declared.sandboxes()) == before


def test_a_sandbox_writing_without_end_into_its_volume_is_stopped_within_its_disk_limit(
    declared: Daemon, keys: dict
) -> None:
    _as(declared, keys[LISTED])
    vol = Volume.create(f"fill-{uuid.uuid4().hex[:6]}")
    data = declared.state / "e2b" / "volumes" / vol.volume_id / "data"
    sbx = _create(keys[LISTED], volume_mounts={"/mnt/data": vol})
    try:
        out = sbx.commands.run(
            # A small file first: the endless one fills the whole limit,
            # and with its inode and name it costs the host more than that,
            # so it is left out; the small one shows the merge happened.
            "echo first > /mnt/data/a-first; "
            "(cat /dev/zero > /mnt/data/endless) 2>&1; echo status=$?; "
            "truncate -s 100G /mnt/data/sparse; echo more >> /mnt/data/sparse 2>&1 || true",
            timeout=60,
        ).stdout
        assert "No space left" in out and "status=0" not in out, out
        # Nothing reached the host's disk while it ran.
        assert _tree_bytes(data) == 0
    finally:
        sbx.kill()
    # Merged when it stopped: at most the disk limit, never the sparse
    # file's 100 GiB.
    grown = _tree_bytes(data)
    assert 0 < grown <= (DISK_MB + 1) << 20, grown
    assert not (data / "sparse").exists() or (data / "sparse").stat().st_size < (DISK_MB << 20)
    assert Volume.destroy(vol.volume_id) is True


@pytest.mark.parametrize(
    "volume, why",
    [
        ("{path: /}", "root"),
        ("{path: /etc, writable: true}", "never writable"),
        ("{path: relative/dir}", "absolute"),
        ("{path: /no/such/dir}", "No such file"),
        ("{path: /srv, mode: rw}", "unknown field"),
    ],
)
def test_the_daemon_refuses_to_start_with_a_declared_volume_that_does_not_hold(
    tmp_path: Path, volume: str, why: str
) -> None:
    conf = tmp_path / "daemon.yaml"
    conf.write_text(f"e2b:\n  volumes:\n    v: {volume}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARDEN_", "E2B_"))}
    env["WARDEN_STATE_DIR"] = str(tmp_path / "state")
    r = subprocess.run(
        [str(_binary()), "serve", "--e2b", "127.0.0.1:0", "--config", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode != 0
    assert why in r.stderr, r.stderr


def test_the_daemon_refuses_a_declared_volume_that_holds_its_own_state(tmp_path: Path) -> None:
    conf = tmp_path / "daemon.yaml"
    conf.write_text(f"e2b:\n  volumes:\n    v: {{path: {tmp_path}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARDEN_", "E2B_"))}
    env["WARDEN_STATE_DIR"] = str(tmp_path / "state")
    (tmp_path / "state").mkdir()
    r = subprocess.run(
        [str(_binary()), "serve", "--e2b", "127.0.0.1:0", "--config", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode != 0
    assert "state" in r.stderr, r.stderr
