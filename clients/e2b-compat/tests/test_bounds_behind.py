"""The places one token holds through the tokens acting for it: the
per-sandbox token the door mints for a sandbox made with `mcp={}` acts
for the token that made the sandbox, so the commands its MCP sessions
start count against that token's bound of long-lived answers, not
against a bound of their own per sandbox. Otherwise one token's bound is
multiplied by its sandbox quota, and a few tokens take all the daemon's
places from everyone else.

The daemon here is its own, with a small bound per token
(`sessions: {per_token}`), so the bound is reached in a few commands."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from e2b import Sandbox

from conftest import Daemon, point_sdk, serve
from test_mcp import mcp_python, session

PER_TOKEN = 3


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base: Path = tmp_path_factory.mktemp("warden-e2b-behind")
    yield from serve(base, f"sessions:\n  per_token: {PER_TOKEN}\n  per_daemon: 64\n")


def start(cmd: str) -> str:
    import json

    return "start_command=" + json.dumps({"shell": cmd})


def test_commands_started_through_each_sandboxs_mcp_count_against_the_token_that_made_the_sandboxes(
    bounded: Daemon,
) -> None:
    mcp_python()
    key = bounded.token("sandboxes:read", "sandboxes:write", "exec", "files", "mcp")
    point_sdk(bounded, key)
    made = [Sandbox.create(mcp={}, timeout=300, api_key=key) for _ in range(2)]
    try:
        # Two commands through the first sandbox's MCP, two through the
        # second's: four places asked of a token that may hold three.
        first = session(bounded, made[0].get_mcp_url(), made[0].get_mcp_token(), start("sleep 900"), start("sleep 900"))
        assert "refused" not in first, first
        assert [c["error"] for c in first["calls"]] == [False, False], first
        second = session(bounded, made[1].get_mcp_url(), made[1].get_mcp_token(), start("sleep 900"), start("sleep 900"))
        assert "refused" not in second, second
        calls = second["calls"]
        assert calls[0]["error"] is False, second
        # Before: each sandbox's MCP token was a holder of its own, with a
        # bound of its own, and the fourth command started.
        assert calls[1]["error"] is True, f"a fourth command started past a bound of {PER_TOKEN}: {second}"
        assert f"{PER_TOKEN} per token" in calls[1]["text"], second
        # Another token has its own share all the same.
        other = bounded.token("sandboxes:read", "sandboxes:write", "exec", "files", "mcp")
        theirs = Sandbox.create(mcp={}, timeout=300, api_key=other)
        made.append(theirs)
        out = session(bounded, theirs.get_mcp_url(), theirs.get_mcp_token(), start("sleep 900"))
        assert [c["error"] for c in out["calls"]] == [False], out
    finally:
        for s in made:
            s.kill()
