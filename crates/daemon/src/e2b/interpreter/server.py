# The code interpreter inside a code-interpreter-v1 sandbox: E2B's
# code-interpreter HTTP API (POST /execute streaming JSON lines, /contexts)
# on 127.0.0.1:49999 of the sandbox's own loopback, backed by IPython
# kernels through jupyter_client. The warden daemon reaches it through the
# sandbox's supervisor; it listens on nothing the host can see.
#
# `setup` fetches the pinned wheels (WARDEN_CI_LOCK) into this sandbox's own
# /tmp (run once, in a sandbox that may reach PyPI) and writes them on its
# standard output, one line each (NAME BASE64), for the daemon to check and
# keep where no sandbox sees them. `serve` reads the same lines on its
# standard input, checks the bytes it received against their hashes,
# unpacks those very bytes into this sandbox's own /tmp, and serves: there
# is no copy of the wheels that another sandbox could write. Exit status 3:
# the wheels did not come, or are not the pinned ones.
#
# The daemon runs this as `python3 -I -c`: isolated, so the working
# directory (the workspace, which the sandbox writes) is not on sys.path,
# and every Python this starts is isolated the same way, the kernels
# included, with the packages' directory named explicitly.

import base64
import hashlib
import io
import json
import os
import sys
import threading
import time
import uuid
import zipfile

DOWNLOADS = "/tmp/.warden-code-interpreter-downloads"
SITE = "/tmp/.warden-code-interpreter"
KERNELSPECS = SITE + "-kernelspecs"
PORT = 49999
MISSING = 3


def lock():
    out = []
    for line in os.environ.get("WARDEN_CI_LOCK", "").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, digest = line.split()
            out.append((name, digest))
    return out


def setup():
    import subprocess

    os.makedirs(DOWNLOADS, exist_ok=True)
    reqs = os.path.join("/tmp", "warden-ci-requirements.txt")
    with open(reqs, "w") as f:
        for name, digest in lock():
            dist, version = name.split("-")[:2]
            f.write(f"{dist}=={version} --hash=sha256:{digest}\n")
    # pip's own messages go to standard error: standard output is the
    # wheels' alone.
    rc = subprocess.call(
        [sys.executable, "-I", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--require-hashes", "-r", reqs, "-d", DOWNLOADS],
        stdout=sys.stderr,
    )
    if rc != 0:
        sys.exit(rc)
    out = sys.stdout.buffer
    for name, _ in lock():
        with open(os.path.join(DOWNLOADS, name), "rb") as f:
            out.write(name.encode() + b" " + base64.b64encode(f.read()) + b"\n")
    out.flush()


def quiet_stdin():
    """Standard input closed (the daemon's writer ends), /dev/null in its
    place for the kernels this server starts."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def unpack():
    """The wheels from standard input, each checked against its hash and
    those same bytes unpacked into SITE."""
    done = os.path.join(SITE, ".unpacked")
    if os.path.exists(done):
        quiet_stdin()
        return
    pins = dict(lock())
    seen = set()
    os.makedirs(SITE, exist_ok=True)
    for line in sys.stdin.buffer:
        name, _, data = line.strip().partition(b" ")
        name = name.decode(errors="replace")
        if name not in pins or name in seen:
            continue
        data = base64.b64decode(data)
        if hashlib.sha256(data).hexdigest() != pins[name]:
            print(f"code interpreter: {name} is not the pinned file", file=sys.stderr)
            sys.exit(MISSING)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(SITE)
        seen.add(name)
    quiet_stdin()
    lacking = sorted(set(pins) - seen)
    if lacking:
        print(f"code interpreter: {lacking[0]} did not come", file=sys.stderr)
        sys.exit(MISSING)
    open(done, "w").close()


MIME = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}


def result(data, main):
    out = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, value in data.items():
        if mime in MIME:
            out[MIME[mime]] = value
        else:
            extra[mime] = value
    if extra:
        out["extra"] = extra
    return out


def kernel_specs():
    """The kernels' spec: ipykernel's own command line, but isolated
    (`-I`), as this server is. Started with `-m` from the workspace a
    kernel would import a module planted there before the standard
    library's and its packages'. Its working directory goes last on its
    path instead: the code a kernel runs still imports its own modules
    from the workspace, as under `-m`, and none of them replaces one the
    kernel imports itself."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = os.path.join(KERNELSPECS, "python3")
    os.makedirs(spec, exist_ok=True)
    boot = ("import os, sys; sys.path.insert(0, %r); sys.path.append(os.getcwd()); "
            "from ipykernel import kernelapp; kernelapp.launch_new_instance()" % SITE)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-I", "-c", boot, "-f", "{connection_file}"],
                   "display_name": "Python 3", "language": "python"}, f)
    return KernelSpecManager(kernel_dirs=[KERNELSPECS], ensure_native_kernel=False)


class Context:
    specs = None

    def __init__(self, cwd):
        from jupyter_client import KernelManager

        if Context.specs is None:
            Context.specs = kernel_specs()

        self.id = uuid.uuid4().hex
        self.cwd = cwd
        self.lock = threading.Lock()
        # IPC sockets in the sandbox's own files: no port of the kernel is
        # open even on the sandbox's loopback.
        # The sockets' path is a prefix of the sandbox's own /tmp, never
        # the working directory (the workspace, or a read-only root).
        sockets = os.path.join(SITE + "-kernels", self.id)
        os.makedirs(sockets, mode=0o700, exist_ok=True)
        self.km = KernelManager(
            kernel_name="python3", kernel_spec_manager=Context.specs, transport="ipc",
            ip=os.path.join(sockets, "kernel"),
        )
        self.km.start_kernel(cwd=cwd)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def info(self):
        return {"id": self.id, "language": "python", "cwd": self.cwd}

    def run(self, code, envs, emit):
        with self.lock:
            if envs:
                # Set for this execution's process, silently (no count,
                # no output), before the code runs.
                self.wait(self.kc.execute(
                    "import os as _o\n_o.environ.update(" + json.dumps(envs) + ")\ndel _o",
                    silent=True))
            msg_id = self.kc.execute(code, allow_stdin=False)
            while True:
                msg = self.kc.get_iopub_msg(timeout=None)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, c = msg["msg_type"], msg["content"]
                if kind == "stream":
                    emit({"type": "stdout" if c["name"] == "stdout" else "stderr",
                          "text": c["text"], "timestamp": time.time_ns()})
                elif kind == "execute_result":
                    emit(result(c["data"], True))
                elif kind == "display_data":
                    emit(result(c["data"], False))
                elif kind == "error":
                    emit({"type": "error", "name": c["ename"], "value": c["evalue"],
                          "traceback": "\n".join(c["traceback"])})
                elif kind == "execute_input":
                    emit({"type": "number_of_executions",
                          "execution_count": c.get("execution_count", 0)})
                elif kind == "status" and c["execution_state"] == "idle":
                    return

    def wait(self, msg_id):
        while True:
            msg = self.kc.get_iopub_msg(timeout=None)
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"):
                return

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def serve():
    unpack()
    sys.path.insert(0, SITE)
    # The kernels are isolated and name the packages themselves
    # (kernel_specs); other Pythons the code runs find them this way.
    os.environ["PYTHONPATH"] = SITE + os.pathsep + os.environ.get("PYTHONPATH", "")
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cwd = os.environ.get("WARDEN_CI_CWD") or os.getcwd()
    contexts = {}
    default = Context(cwd)
    contexts[default.id] = default
    table = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b"{}"
            return json.loads(raw or b"{}")

        def context(self, cid):
            with table:
                return contexts.get(cid) if cid else default

        def do_GET(self):
            if self.path == "/health":
                return self.answer(200, "OK")
            if self.path == "/contexts":
                with table:
                    return self.answer(200, [c.info() for c in contexts.values()])
            self.answer(404, {"error": f"no route {self.path}"})

        def do_POST(self):
            try:
                req = self.body()
            except ValueError as e:
                return self.answer(400, {"error": f"the body is not JSON: {e}"})
            if self.path == "/execute":
                return self.execute(req)
            if self.path == "/contexts":
                lang = req.get("language") or "python"
                if lang != "python":
                    return self.answer(400, {"error": f"language {lang!r}: this interpreter runs python"})
                c = Context(req.get("cwd") or cwd)
                with table:
                    contexts[c.id] = c
                return self.answer(200, c.info())
            if self.path.startswith("/contexts/") and self.path.endswith("/restart"):
                c = self.context(self.path.split("/")[2])
                if c is None:
                    return self.answer(404, {"error": "no such context"})
                with c.lock:
                    c.km.restart_kernel(now=True)
                    c.kc.wait_for_ready(timeout=60)
                return self.answer(200, {})
            self.answer(404, {"error": f"no route {self.path}"})

        def do_DELETE(self):
            cid = self.path.rsplit("/", 1)[-1]
            with table:
                c = contexts.pop(cid, None) if cid != default.id else None
            if c is None:
                return self.answer(404, {"error": "no such context"})
            c.stop()
            self.answer(200, {})

        def execute(self, req):
            c = self.context(req.get("context_id"))
            if c is None:
                return self.answer(404, {"error": "no such context"})
            lang = req.get("language")
            if lang not in (None, "python"):
                return self.answer(400, {"error": f"language {lang!r}: this interpreter runs python"})
            code = req.get("code") or ""
            envs = req.get("env_vars") or {}
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()

            def emit(obj):
                self.wfile.write((json.dumps(obj) + "\n").encode())
                self.wfile.flush()

            c.run(code, envs, emit)

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()


if __name__ == "__main__":
    {"setup": setup, "serve": serve}[sys.argv[1]]()
