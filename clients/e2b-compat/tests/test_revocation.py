"""An open stream ends with the API key it was opened with: a command's
output followed through the unmodified SDK stops arriving within a second
or two of the key's revocation, instead of running on for as long as the
client reads."""

from __future__ import annotations

import threading
import time
from typing import List, Optional

from e2b import Sandbox

from conftest import Daemon

# The daemon asks every second; the last bytes take a moment.
GRACE = 2.5


def test_a_followed_command_stops_delivering_once_its_key_is_revoked(daemon: Daemon) -> None:
    tok = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    s = Sandbox.create(timeout=120, api_key=tok)
    try:
        h = s.commands.run("while :; do echo tick; sleep 0.1; done", background=True)
        arrived: List[float] = []
        ended: List[Optional[BaseException]] = []

        def follow() -> None:
            try:
                for out, _err, _pty in h:
                    if out:
                        arrived.append(time.monotonic())
                ended.append(None)
            except BaseException as e:  # the SDK raises the stream's error
                ended.append(e)

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while len(arrived) < 5:
            assert time.monotonic() < deadline, "no output before the revocation"
            time.sleep(0.05)
        with daemon.owner() as c:
            token_id = tok.split("_")[1]
            assert c.delete(f"/v1/tokens/{token_id}").status_code in (200, 204)
        revoked = time.monotonic()
        t.join(GRACE + 3)
        late = [a for a in arrived if a > revoked + GRACE]
        assert ended, f"still following {time.monotonic() - revoked:.1f}s after the revocation ({len(late)} late pieces)"
        assert not late, f"{len(late)} pieces arrived more than {GRACE}s after the revocation"
    finally:
        with daemon.owner() as c:
            c.delete(f"/v1/sandboxes/{s.sandbox_id}", params={"force": "true"})
