"""Snapshot names through the E2B door are per token (docs/snapshots.md):
the same name taken by two tokens is two snapshots, each made of its own
sandbox and seen only by its token. Before, names were one namespace for
every caller: the second token's create_snapshot of a name the first had
taken was refused as "exists", which told it the name, and let names be
squatted."""

from e2b import Sandbox

from conftest import Daemon


def test_two_tokens_each_keep_their_own_snapshot_of_one_name(daemon: Daemon, label: str) -> None:
    other = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    name = f"shared-{label}"
    made = []
    a = Sandbox.create(metadata={"test": label}, timeout=60)
    made.append(a)
    b = Sandbox.create(metadata={"test": label}, timeout=60, api_key=other)
    made.append(b)
    try:
        a.files.write("who.txt", "a\n")
        b.files.write("who.txt", "b\n")
        assert a.create_snapshot(name=name).snapshot_id == name
        assert b.create_snapshot(name=name).snapshot_id == name
        mine = [s.snapshot_id for s in Sandbox.list_snapshots(api_key=other).next_items()]
        assert mine == [name]
        ca = Sandbox.create(template=name, metadata={"test": label}, timeout=60)
        made.append(ca)
        cb = Sandbox.create(template=name, metadata={"test": label}, timeout=60, api_key=other)
        made.append(cb)
        assert ca.files.read("who.txt") == "a\n"
        assert cb.files.read("who.txt") == "b\n"
    finally:
        for s in made:
            s.kill()
        Sandbox.delete_snapshot(name)
        Sandbox.delete_snapshot(name, api_key=other)
