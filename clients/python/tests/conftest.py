"""A real daemon for the tests: `warden serve` (the binary from
``WARDEN_BIN``, by default the repository's ``target/debug/warden``) with a
state directory of its own, its owner-only socket and a TCP listener on a
port the system picks; every sandbox the tests made is removed through it
at the end, and the tests fail if one is left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
SERVING = re.compile(r"serving on (\S+) and http://(\S+) \(tokens required\)")


@dataclass
class Daemon:
    socket: str
    tcp: str
    state: Path
    process: "subprocess.Popen[bytes]"

    @property
    def unix_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def tcp_host(self) -> str:
        return f"http://{self.tcp}"

    def owner(self) -> httpx.Client:
        """A raw client on the owner's socket (no token), for setting up."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=self.socket), base_url="http://warden", timeout=60
        )

    def token(self, *scopes: str, sandbox: Optional[str] = None) -> str:
        """A new token with these scopes (made by the owner)."""
        body = {"name": f"t-{uuid.uuid4().hex[:8]}", "scopes": list(scopes)}
        if sandbox is not None:
            body["sandbox"] = sandbox
        with self.owner() as c:
            r = c.post("/v1/tokens", json=body)
            assert r.status_code in (200, 201), r.text
            return str(r.json()["token"])

    def sandbox_ids(self) -> List[str]:
        with self.owner() as c:
            r = c.get("/v1/sandboxes")
            r.raise_for_status()
            return [s["id"] for s in r.json()["sandboxes"]]


def _binary() -> Path:
    b = Path(os.environ.get("WARDEN_BIN") or REPO / "target/debug/warden")
    if not b.is_absolute():
        b = REPO / b
    if not b.is_file():
        raise pytest.UsageError(
            f"{b} does not exist: build it with `cargo build -p warden-cli`, or point WARDEN_BIN at a warden binary"
        )
    return b


def serve(
    base: Path,
    args: Optional[List[str]] = None,
    env_more: Optional[Dict[str, str]] = None,
    strict: bool = True,
) -> Iterator[Daemon]:
    """A daemon of its own under `base` (`warden serve --listen` and
    `args`, its environment with `env_more`), until the generator is
    closed: then its sandboxes are removed, it is stopped, and anything
    it could not remove is removed with the CLI, so that no supervisor
    outlives the run. With `strict`, fails the tests if sandboxes were
    left behind (each test removes its own)."""
    state = base / "state"
    log_path = base / "daemon.log"
    env = {k: v for k, v in os.environ.items() if k not in ("WARDEN_HOST", "WARDEN_TOKEN")}
    env["WARDEN_STATE_DIR"] = str(state)
    # Debug builds only: ask-mode questions may be about names pinned to
    # the host's loopback, where the tests' listeners are.
    env["WARDEN_TEST_ASK_LOOPBACK"] = "1"
    env.update(env_more or {})
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(_binary()), "serve", "--listen", "127.0.0.1:0", *(args or [])],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    found = None
    while found is None:
        text = log_path.read_text(errors="replace")
        found = SERVING.search(text)
        if found is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"warden serve did not start:\n{text}")
            time.sleep(0.05)
    d = Daemon(socket=found.group(1), tcp=found.group(2), state=state, process=proc)
    try:
        yield d
    finally:
        left: List[str] = []
        try:
            left = d.sandbox_ids()
            with d.owner() as c:
                for sid in left:
                    c.delete(f"/v1/sandboxes/{sid}", params={"force": "true"})
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # Anything still there (the daemon could not remove it) is stopped
        # and removed with the CLI, so that no supervisor outlives the run.
        sandboxes = state / "sandboxes"
        if sandboxes.is_dir():
            for e in sandboxes.iterdir():
                subprocess.run([str(_binary()), "rm", "--force", e.name], env=env, capture_output=True)
    if left and strict:
        pytest.fail(f"the tests left sandboxes behind (each test removes its own): {left}")


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from serve(tmp_path_factory.mktemp("warden"))


@pytest.fixture(autouse=True)
def _owner_env(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client finds the daemon through WARDEN_HOST, as the owner."""
    monkeypatch.setenv("WARDEN_HOST", daemon.unix_host)
    monkeypatch.delenv("WARDEN_TOKEN", raising=False)


@pytest.fixture
def label() -> str:
    """A label value of this test's own, to find its sandboxes by."""
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., bool]:
    def wait(pred: Callable[[], bool], timeout: float = 15.0, every: float = 0.1) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(every)
        return pred()

    return wait
