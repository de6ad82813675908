"""A sandbox's events through the client: its log, resumed from an
offset, and new events followed live as they happen."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

from warden_sandbox import Sandbox


def test_the_log_holds_the_life_and_the_commands_in_order() -> None:
    with Sandbox.create() as sb:
        sb.commands.run(["echo", "logged"])
        # The supervisor's audit writer appends the end a moment after the
        # command's answer: look again for a while, not forever.
        for _ in range(100):
            events = list(sb.events(follow=False))
            if any(e["event"] == "exec_exited" for e in events):
                break
            time.sleep(0.05)
        kinds = [e["event"] for e in events]
        assert kinds[:3] == ["workspace", "created", "started"]
        started = [e for e in events if e["event"] == "exec_started"]
        assert started[-1]["argv"] == ["echo", "logged"]
        assert kinds.index("exec_started") < kinds.index("exec_exited")
        # From an offset: the same events, without the first ones.
        assert list(sb.events(from_=2, follow=False)) == events[2:]


def test_following_delivers_an_event_while_the_sandbox_runs() -> None:
    with Sandbox.create() as sb:
        got: List[Dict[str, Any]] = []
        done = threading.Event()

        def follow() -> None:
            for e in sb.events(follow=True):
                got.append(e)
                if e["event"] == "exec_exited":
                    done.set()
                    return

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        time.sleep(0.5)
        assert not done.is_set()
        sb.commands.run(["true"])
        assert done.wait(15), f"no exec_exited followed; got {[e['event'] for e in got]}"


def test_following_a_stopped_sandbox_gives_its_log_and_ends() -> None:
    with Sandbox.create() as sb:
        sb.stop(grace=1)
        kinds = [e["event"] for e in sb.events(follow=True)]
        assert "stopped" in kinds or "exited" in kinds, kinds
