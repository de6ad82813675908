"""A real MCP client (the official Python SDK, in its own environment:
``WARDEN_TEST_MCP_PYTHON``, by default /tmp/mcp-venv/bin/python) for the
E2B door's MCP tests: it opens a session at URL with the token in
``Authorization: Bearer``, lists the tools, calls each tool given as
NAME=JSON_ARGUMENTS in turn and prints one JSON line: the tool names and,
for each call, whether it was an error and its text. A refused session
prints ``{"refused": "..."}``.

    python mcp_client.py URL HOST TOKEN [NAME=ARGS ...]

HOST is sent as the Host header (the name get_mcp_url() answers, which the
door routes by; ``-`` sends the URL's own).
"""
import asyncio
import json
import sys

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, host: str, token: str, calls: list) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if host != "-":
        headers["Host"] = host
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                tools = [t.name for t in (await s.list_tools()).tools]
                results = []
                for name, args in calls:
                    r = await s.call_tool(name, args)
                    text = "".join(getattr(c, "text", "") for c in r.content)
                    results.append({"tool": name, "error": bool(r.is_error), "text": text})
                return {"tools": tools, "calls": results}


if __name__ == "__main__":
    url, host, token = sys.argv[1], sys.argv[2], sys.argv[3]
    calls = []
    for a in sys.argv[4:]:
        name, _, args = a.partition("=")
        calls.append((name, json.loads(args or "{}")))
    try:
        out = asyncio.run(main(url, host, token, calls))
    except BaseException as e:  # noqa: BLE001 - a refused session is the answer
        def flat(e: BaseException) -> str:
            subs = getattr(e, "exceptions", None)
            return "; ".join(flat(x) for x in subs) if subs else f"{type(e).__name__}: {e}"
        out = {"refused": flat(e)}
    print(json.dumps(out))
