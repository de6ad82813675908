"""Write envd's protobuf descriptors (process.proto, filesystem.proto) as a
FileDescriptorSet, taken from the generated modules of the installed e2b
SDK: the file warden's E2B door reads its protobuf codec's messages from
(crates/daemon/src/e2b/envd.desc).

    python envd_descriptors.py OUT
"""
import sys

from e2b.envd.filesystem import filesystem_pb
from e2b.envd.process import process_pb


def varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


files = [m.desc().proto.to_binary() for m in (process_pb, filesystem_pb)]
with open(sys.argv[1], "wb") as f:
    for fd in files:
        f.write(b"\x0a" + varint(len(fd)) + fd)
