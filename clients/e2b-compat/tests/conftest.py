"""A real daemon for the E2B SDK's tests: `warden serve` (the binary from
``WARDEN_BIN``, by default the repository's ``target/debug/warden``) with a
state directory of its own and its E2B-compatible listener on a port the
system picks. The unmodified ``e2b`` SDK is pointed at it the way the
README says: ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` at the listener,
``E2B_API_KEY`` a warden token. Every sandbox the tests made is removed
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
E2B = re.compile(r"E2B-compatible API on (http://\S+)")
SOCKET = re.compile(r"serving on (\S+)")

# A profile (an E2B template) whose names are pinned to the host's
# loopback, where the network tests' listeners are: only the owner may pin
# names, in a profile; the SDK's allowlist then decides which are reached.
NET_PROFILE = """\
egress:
  hosts:
    allowed.test: 127.0.0.1
    denied.test: 127.0.0.1
"""


#: The bytes of a path a Unix socket's address holds (108 with its NUL).
SUN_PATH_MAX = 107


def socket_address(path: str) -> tuple[str, Optional[int]]:
    """The address to connect to for the daemon's socket at `path`, and
    the descriptor it goes through (the caller closes it): `path` itself
    when it fits; else `/proc/self/fd/N/NAME` through its directory,
    opened here, as the daemon binds it under a long state directory (a
    deep pytest base directory). Past even that, an error that says so."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path, None
    directory, name = os.path.split(path)
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    short = f"/proc/self/fd/{fd}/{name}"
    if len(os.fsencode(short)) > SUN_PATH_MAX:
        os.close(fd)
        raise RuntimeError(
            f"the daemon's socket {path} is longer than a Unix socket's address holds "
            f"({SUN_PATH_MAX} bytes), even through its directory: give the tests a shorter "
            "base directory (pytest --basetemp)"
        )
    return short, fd


class _Owner(httpx.Client):
    """A client on the owner's socket that closes the directory it goes
    through with itself."""

    def __init__(self, socket: str) -> None:
        address, self._dir = socket_address(socket)
        super().__init__(transport=httpx.HTTPTransport(uds=address), base_url="http://warden", timeout=60)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._dir is not None:
                os.close(self._dir)
                self._dir = None


@dataclass
class Daemon:
    url: str
    socket: str
    state: Path
    process: "subprocess.Popen[bytes]"
    #: How [`serve`] started it (its arguments without the E2B address,
    #: its environment, its log), for [`restart`].
    launch: Optional[tuple] = None

    def owner(self) -> httpx.Client:
        return _Owner(self.socket)

    def token(self, *scopes: str) -> str:
        body = {"name": f"e2b-{uuid.uuid4().hex[:8]}", "scopes": list(scopes)}
        with self.owner() as c:
            r = c.post("/v1/tokens", json=body)
            assert r.status_code in (200, 201), r.text
            return str(r.json()["token"])

    def sandboxes(self) -> List[dict]:
        with self.owner() as c:
            r = c.get("/v1/sandboxes")
            r.raise_for_status()
            return list(r.json()["sandboxes"])


def _binary() -> Path:
    b = Path(os.environ.get("WARDEN_BIN") or REPO / "target/debug/warden")
    if not b.is_absolute():
        b = REPO / b
    if not b.is_file():
        raise pytest.UsageError(f"{b} does not exist: build it with `cargo build -p warden-cli`")
    return b


def point_sdk(d: Daemon, key: str) -> None:
    """Point the SDK at daemon `d` with `key`."""
    os.environ["E2B_API_URL"] = d.url
    os.environ["E2B_SANDBOX_URL"] = d.url
    os.environ["E2B_API_KEY"] = key


def serve(
    base: Path, config: str, profiles: Optional[Dict[str, str]] = None, listen: bool = False
) -> Iterator[Daemon]:
    """A daemon of its own under `base`, for tests that need one configured
    otherwise than the session's: its configuration file holds `config`,
    its profile directory `profiles` (file name to text), and with `listen`
    it serves the native API on TCP too (its address in `d.native`). The
    SDK's variables are put back and its sandboxes removed when it ends."""
    state, conf_home = base / "state", base / "config"
    (conf_home / "warden" / "profiles").mkdir(parents=True)
    for name, text in (profiles or {}).items():
        (conf_home / "warden" / "profiles" / name).write_text(text)
    conf = base / "daemon.yaml"
    conf.write_text(config)
    log_path = base / "daemon.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARDEN_", "E2B_"))}
    env["WARDEN_STATE_DIR"] = str(state)
    env["XDG_CONFIG_HOME"] = str(conf_home)
    # The binary, and where VM guests' kernel is (the VM tests' only).
    for var in ("WARDEN_BIN", "WARDEN_VM_DIR"):
        if os.environ.get(var):
            env[var] = os.environ[var]
    args = [str(_binary()), "serve", "--e2b", "127.0.0.1:0"]
    if listen:
        args += ["--listen", "127.0.0.1:0"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            args + ["--config", str(conf)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        text = log_path.read_text(errors="replace")
        found, sock = E2B.search(text), SOCKET.search(text)
        native = re.search(r"and (http://\S+) \(tokens required\)", text)
        if found and sock and (native or not listen):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"warden serve did not start:\n{text}")
        time.sleep(0.05)
    d = Daemon(url=found.group(1), socket=sock.group(1), state=state, process=proc)
    d.launch = (args[:2] + args[4:] + ["--config", str(conf)], env, log_path)
    if native:
        d.native = native.group(1)  # type: ignore[attr-defined]
    saved = {k: v for k, v in os.environ.items() if k.startswith("E2B_")}
    try:
        yield d
    finally:
        for k in [k for k in os.environ if k.startswith("E2B_")]:
            del os.environ[k]
        os.environ.update(saved)
        try:
            with d.owner() as c:
                for s in d.sandboxes():
                    c.delete(f"/v1/sandboxes/{s['id']}", params={"force": "true"})
        finally:
            # The daemon running now ([`restart`] may have replaced it).
            d.process.send_signal(signal.SIGTERM)
            try:
                d.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                d.process.kill()
                d.process.wait()


def restart(d: Daemon, kill: bool = False) -> None:
    """Stop daemon `d` (SIGTERM; SIGKILL with `kill`, as a crash) and start
    it again on the same state directory, configuration and E2B address,
    as its owner would after an upgrade: its sandboxes run on meanwhile
    (their supervisors are detached) and the new daemon adopts them. For
    a daemon of [`serve`]'s; its native address (if any) may change."""
    assert d.launch is not None, "restart needs a daemon started by serve()"
    args, env, log_path = d.launch
    d.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    d.process.wait(timeout=20)
    door = d.url.removeprefix("http://")
    start = log_path.stat().st_size
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            args[:2] + ["--e2b", door] + args[2:],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    d.process = proc
    listen = "--listen" in args
    deadline = time.monotonic() + 30
    while True:
        with open(log_path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        found = E2B.search(text)
        native = re.search(r"and (http://\S+) \(tokens required\)", text)
        if found and SOCKET.search(text) and (native or not listen):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"warden serve did not start again:\n{text}")
        time.sleep(0.05)
    assert found.group(1) == d.url, (found.group(1), d.url)
    if native:
        d.native = native.group(1)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-e2b")
    state = base / "state"
    config = base / "config"
    (config / "warden" / "profiles").mkdir(parents=True)
    (config / "warden" / "profiles" / "e2bnet.yaml").write_text(NET_PROFILE)
    log_path = base / "daemon.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARDEN_", "E2B_"))}
    env["WARDEN_STATE_DIR"] = str(state)
    env["XDG_CONFIG_HOME"] = str(config)
    if os.environ.get("WARDEN_BIN"):
        env["WARDEN_BIN"] = os.environ["WARDEN_BIN"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(_binary()), "serve", "--e2b", "127.0.0.1:0"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    found = sock = None
    while found is None:
        text = log_path.read_text(errors="replace")
        found, sock = E2B.search(text), SOCKET.search(text)
        if found is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"warden serve --e2b did not start:\n{text}")
            time.sleep(0.05)
    assert sock is not None
    d = Daemon(url=found.group(1), socket=sock.group(1), state=state, process=proc)
    try:
        yield d
    finally:
        left = []
        try:
            left = [s["id"] for s in d.sandboxes()]
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
        sandboxes = state / "sandboxes"
        if sandboxes.is_dir():
            for e in sandboxes.iterdir():
                subprocess.run([str(_binary()), "rm", "--force", e.name], env=env, capture_output=True)
    running = [s for s in left]
    if running:
        # Sandboxes that expired are kept stopped natively; a running one
        # left behind is a test that did not kill what it made.
        still = [s for s in running if s not in EXPIRED]
        if still:
            pytest.fail(f"the tests left sandboxes behind (each test kills its own): {still}")


# Sandboxes a test let expire on purpose (kept stopped by warden).
EXPIRED: List[str] = []


@pytest.fixture(scope="session")
def api_key(daemon: Daemon) -> str:
    return daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")


@pytest.fixture(scope="session", autouse=True)
def _e2b_env(daemon: Daemon, api_key: str) -> Iterator[None]:
    """The SDK finds warden through its own settings, nothing else (for
    the whole session: module fixtures create sandboxes too)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("E2B_")}
    for k in saved:
        del os.environ[k]
    os.environ["E2B_API_URL"] = daemon.url
    os.environ["E2B_SANDBOX_URL"] = daemon.url
    os.environ["E2B_API_KEY"] = api_key
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("E2B_")]:
            del os.environ[k]
        os.environ.update(saved)


@pytest.fixture
def label() -> str:
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


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Under pytest-xdist's `--dist loadgroup` (CI runs the suite in two
    workers, each with a daemon of its own), a file's tests stay in one
    worker, so that its module fixtures are made once; the code
    interpreter's two files share one, so that one daemon fetches the
    interpreter's pinned packages, not both."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        group = "code_interpreter" if "code_interpreter" in module else module
        item.add_marker(pytest.mark.xdist_group(group))
