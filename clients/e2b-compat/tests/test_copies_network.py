"""A sandbox made from another (a fork, a sandbox made from a snapshot)
runs under its source's network as it is, never as the source was made:
what the client denied (`allow_internet_access=False`, `update_network`)
or the owner took away live stays denied in every copy. A fork keeps the
door's record of what it took away, so an update that no longer denies
all traffic gives the template's names back to the fork as to its
source. A real listener on the host's loopback, to which the template
pins its name, records whether anything arrived."""

from __future__ import annotations

from e2b import Sandbox

from conftest import Daemon
from test_network import Listener
from test_network_deny import pinned_template, reaches


def test_a_fork_and_a_snapshot_of_a_sandbox_without_internet_access_reach_nothing_it_could_not(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    sbx = Sandbox.create(template=name, timeout=120, allow_internet_access=False)
    made = []
    try:
        assert not reaches(sbx, listener)
        forks = sbx.fork(count=1, timeout=120)
        made.extend(forks)
        snap = sbx.create_snapshot(name=f"nonet-{listener.port}")
        child = Sandbox.create(template=snap.snapshot_id, timeout=120)
        made.append(child)
        for copy in made:
            assert not reaches(copy, listener), copy.sandbox_id
        # The fork carries the door's record: an update that no longer
        # denies all traffic gives it the template's name back, as it
        # would its source.
        forks[0].update_network({"allow_internet_access": True})
        assert reaches(forks[0], listener)
        assert not reaches(sbx, listener)
        # A name given back stays the template's: denied again, it goes.
        forks[0].update_network({"allow_internet_access": False})
        assert not reaches(forks[0], listener)
        Sandbox.delete_snapshot(snap.snapshot_id)
    finally:
        for s in made:
            s.kill()
        sbx.kill()


def test_a_name_the_owner_took_away_live_stays_away_from_every_copy(daemon: Daemon) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    entry = f"allowed.test:{listener.port}"
    sbx = Sandbox.create(template=name, timeout=120)
    made = []
    try:
        assert reaches(sbx, listener)
        with daemon.owner() as c:
            r = c.patch(f"/v1/sandboxes/{sbx.sandbox_id}/egress", json={"remove": [entry]})
            assert r.status_code == 200, r.text
        forks = sbx.fork(count=1, timeout=120)
        made.extend(forks)
        snap = sbx.create_snapshot(name=f"owner-took-{listener.port}")
        made.append(Sandbox.create(template=snap.snapshot_id, timeout=120))
        for copy in made:
            assert not reaches(copy, listener), copy.sandbox_id
            # An update through the door never gives back what the owner
            # took away.
            copy.update_network({})
            assert not reaches(copy, listener), copy.sandbox_id
        Sandbox.delete_snapshot(snap.snapshot_id)
    finally:
        for s in made:
            s.kill()
        sbx.kill()


def test_a_sandbox_made_from_a_snapshot_gets_the_template_names_back_as_its_source_would(
    daemon: Daemon,
) -> None:
    listener = Listener()
    name = pinned_template(daemon, listener)
    sbx = Sandbox.create(template=name, timeout=120, allow_internet_access=False)
    made = []
    try:
        snap = sbx.create_snapshot(name=f"nonet-back-{listener.port}")
        child = Sandbox.create(template=snap.snapshot_id, timeout=120)
        made.append(child)
        assert not reaches(child, listener)
        # The snapshot keeps the door's record of what it took away: an
        # update that no longer denies all traffic gives the template's
        # name back to the new sandbox, as it does to the source.
        child.update_network({"allow_internet_access": True})
        assert reaches(child, listener)
        sbx.update_network({"allow_internet_access": True})
        assert reaches(sbx, listener)
        # Denied again, it reaches nothing, and a second update gives it back.
        child.update_network({"allow_internet_access": False})
        assert not reaches(child, listener)
        child.update_network({})
        assert reaches(child, listener)
        Sandbox.delete_snapshot(snap.snapshot_id)
    finally:
        for s in made:
            s.kill()
        sbx.kill()
