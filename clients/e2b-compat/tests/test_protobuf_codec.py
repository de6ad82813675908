"""Connect's protobuf codec, which the SDK does not use but other Connect
clients do: the SDK's own generated envd stubs, given connectrpc's default
(binary protobuf) codec instead of the SDK's JSON one, start a process,
read its output and end, list processes and look at a file."""

from __future__ import annotations

import os

from e2b import Sandbox
from e2b.envd.filesystem import filesystem_connect, filesystem_pb
from e2b.envd.process import process_connect, process_pb


def test_the_protobuf_codec_reaches_the_same_processes_and_files() -> None:
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write("p.txt", "abc")
        url = os.environ["E2B_SANDBOX_URL"]
        headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": os.environ["E2B_API_KEY"]}
        opts = {"send_compression": None, "accept_compression": ()}
        proc = process_connect.ProcessClientSync(url, **opts)
        events = proc.start(
            process_pb.StartRequest(
                process=process_pb.ProcessConfig(cmd="/bin/sh", args=["-c", "echo proto; exit 3"])
            ),
            headers=headers,
        )
        out, code = b"", None
        for ev in events:
            one = ev.event.event  # the ProcessEvent's oneof
            if one is not None and one.field == "data" and one.value.output.field == "stdout":
                out += one.value.output.value
            if one is not None and one.field == "end":
                code = one.value.exit_code
        assert out == b"proto\n"
        assert code == 3
        assert proc.list(process_pb.ListRequest(), headers=headers).processes == []
        fs = filesystem_connect.FilesystemClientSync(url, **opts)
        st = fs.stat(filesystem_pb.StatRequest(path="p.txt"), headers=headers)
        assert st.entry.size == 3
        assert st.entry.path == "/home/user/p.txt"
    finally:
        sbx.kill()
