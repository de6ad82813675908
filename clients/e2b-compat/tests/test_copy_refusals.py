"""A fork or snapshot warden refuses reaches the unmodified SDK with what
happened: the native status class (a copy refused for what the sandbox's
tree holds is bad input, 400; a token past its quota 429, the SDK's
`RateLimitException`), and the native reason code in E2B's own
`error_code` and in the message, which is the text of the SDK's
exception. Nothing is made by a refused copy.

The tree refused here is one a sandbox can make in a moment: one sparse
file of 40 MiB with two names below a path longer than PATH_MAX. A copy
cannot keep such a name as a link to the file's first copy (no path that
long is opened again), so each name is copied whole and counted, and the
two pass the 64 MiB a copy may write of such files: `too_many_links`, as
a sandbox with more hard-linked files than a copy remembers is refused
(docs/snapshots.md). The file takes no disk: its size is what is counted.
"""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest
from e2b import RateLimitException, Sandbox, SandboxException, SandboxQuery

from conftest import Daemon, _binary

# 20 directories of 250 characters (about 5,000 bytes of path), and at
# the bottom a sparse file of 40 MiB with a second name.
LINKED_DEEP = (
    "set -e; cd ~; d=$(printf 'a%.0s' $(seq 250)); "
    "for i in $(seq 20); do mkdir \"$d\"; cd \"$d\"; done; "
    "truncate -s 40M f; ln f g; stat -c %h g"
)


def mine(label: str) -> list:
    return sorted(s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items())


def test_a_fork_refused_for_the_sandboxs_hard_links_names_too_many_links_and_makes_nothing(
    daemon: Daemon, label: str
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        assert sbx.commands.run(LINKED_DEEP).stdout.strip() == "2"
        before = sorted(s["id"] for s in daemon.sandboxes())
        with pytest.raises(SandboxException, match="too_many_links") as refused:
            sbx.fork(count=1, timeout=60)
        # Bad input, as E2B says it, not a fault of the daemon.
        assert refused.value.status_code == 400, refused.value
        assert "hard-linked" in str(refused.value), refused.value
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
        assert mine(label) == [sbx.sandbox_id]
        # The same refusal of a snapshot keeps no snapshot.
        with pytest.raises(SandboxException, match="too_many_links"):
            sbx.create_snapshot(name=f"links-{label}")
        assert all(s.snapshot_id != f"links-{label}" for s in sbx.list_snapshots().next_items())
        # E2B's own machine-readable field carries the code.
        r = httpx.post(
            f"{daemon.url}/sandboxes/{sbx.sandbox_id}/fork",
            json={"count": 1},
            headers={"X-API-Key": os.environ["E2B_API_KEY"]},
            timeout=120,
        )
        assert r.status_code == 400, r.text
        assert r.json()["code"] == 400, r.text
        assert r.json()["error_code"] == "too_many_links", r.text
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
        assert sbx.is_running() is True
    finally:
        sbx.kill()


def test_a_fork_past_the_tokens_quota_is_the_sdks_rate_limit_error_naming_quota(
    daemon: Daemon, label: str
) -> None:
    made = subprocess.run(
        [str(_binary()), "token", "create", f"fork-quota-{label}", "--scope", "sandboxes:write",
         "--scope", "sandboxes:read", "--scope", "exec", "--max-sandboxes", "1"],
        env={**os.environ, "WARDEN_STATE_DIR": str(daemon.state)},
        capture_output=True, text=True, check=True,
    )
    key = made.stdout.strip()
    sbx = Sandbox.create(api_key=key, metadata={"test": label}, timeout=120)
    try:
        before = sorted(s["id"] for s in daemon.sandboxes())
        with pytest.raises(RateLimitException, match="quota") as refused:
            sbx.fork(count=1, timeout=60)
        assert refused.value.status_code == 429, refused.value
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
        r = httpx.post(
            f"{daemon.url}/sandboxes/{sbx.sandbox_id}/fork",
            json={"count": 1},
            headers={"X-API-Key": key},
            timeout=120,
        )
        assert r.status_code == 429, r.text
        assert r.json()["error_code"] == "quota", r.text
    finally:
        sbx.kill()


def _fork(daemon: Daemon, sandbox_id: str, content: bytes) -> httpx.Response:
    return httpx.post(
        f"{daemon.url}/sandboxes/{sandbox_id}/fork",
        content=content,
        headers={"X-API-Key": os.environ["E2B_API_KEY"], "content-type": "application/json"},
        timeout=120,
    )


def _refused(r: httpx.Response, status: int, code: str) -> None:
    """E2B's error with the status and its machine-readable code, which
    the message (the SDK's exception's text) names too."""
    assert r.status_code == status, r.text
    body = r.json()
    assert (body["code"], body.get("error_code")) == (status, code), r.text


def test_each_refusal_of_a_fork_carries_its_own_code_and_makes_nothing(
    daemon: Daemon, label: str, wait_until
) -> None:
    # Before, each of these was E2B's bare {code, message}: a program
    # could not tell a paused source from any other 409, nor a count out
    # of range from any other 400.
    before = sorted(s["id"] for s in daemon.sandboxes())
    _refused(_fork(daemon, f"none-{label}", b'{"count": 1}'), 404, "no_such_sandbox")
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        made = sorted(before + [sbx.sandbox_id])
        _refused(_fork(daemon, sbx.sandbox_id, b"{not json"), 400, "invalid_body")
        for count in (0, 17):
            r = _fork(daemon, sbx.sandbox_id, f'{{"count": {count}}}'.encode())
            _refused(r, 400, "count_out_of_range")
            assert "count_out_of_range" in r.json()["message"], r.text
        with pytest.raises(SandboxException, match="count_out_of_range") as refused:
            sbx.fork(count=17, timeout=60)
        assert refused.value.status_code == 400, refused.value
        # A paused source: the native code of what needs its processes.
        sbx.pause()
        r = _fork(daemon, sbx.sandbox_id, b'{"count": 1}')
        _refused(r, 409, "paused")
        assert "paused" in r.json()["message"], r.text
        assert sorted(s["id"] for s in daemon.sandboxes()) == made
        # Its timeout ended: kept stopped for review, and not forked.
        Sandbox.connect(sbx.sandbox_id, timeout=1)
        assert wait_until(
            lambda: any(
                s["id"] == sbx.sandbox_id and s["state"] == "stopped" for s in daemon.sandboxes()
            ),
            timeout=30,
        )
        r = _fork(daemon, sbx.sandbox_id, b'{"count": 1}')
        _refused(r, 404, "not_running")
        assert "not_running" in r.json()["message"], r.text
        assert sorted(s["id"] for s in daemon.sandboxes()) == made
    finally:
        sbx.kill()
