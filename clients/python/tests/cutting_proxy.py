"""A loopback TCP forwarder that cuts the first connection whose answer
carries a marker, right after forwarding it: a real broken stream, to
prove that the client takes it up again where it stopped."""

from __future__ import annotations

import socket
import threading
from typing import List


class CuttingProxy:
    def __init__(self, upstream: str, marker: bytes) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.marker = marker
        self.cuts = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.address = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._open: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            with self._lock:
                self.connections += 1
                self._open += [client, up]
            threading.Thread(target=self._pipe, args=(client, up, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, answer: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if answer and self.marker in data:
                    with self._lock:
                        cut = self.cuts == 0
                        if cut:
                            self.cuts += 1
                    if cut:
                        break
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for s in self._open:
                try:
                    s.close()
                except OSError:
                    pass
