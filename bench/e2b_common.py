"""What the E2B benchmarks share: the owner's calls to the daemon's Unix
socket, a token for the SDK (set in the environment before the SDK is
imported, which reads it), and the percentiles they print."""
import http.client, json, os, socket, time


def owner_call(sock, method, path, body=None):
    """One call of the daemon's owner over its Unix socket."""

    class Unix(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(sock)

    c = Unix("warden")
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    assert r.status < 300, (method, path, r.status, data)
    return json.loads(data) if data else None


def sdk_environment(sock, e2b_url, name):
    """A token of the daemon's for the SDK, and the door's address, in the
    environment the SDK reads when it is imported; the token is returned."""
    token = owner_call(sock, "POST", "/v1/tokens", {"name": name, "scopes": ["admin"]})["token"]
    os.environ.update(E2B_API_URL=e2b_url, E2B_SANDBOX_URL=e2b_url, E2B_API_KEY=token)
    return token


def pct(xs, p):
    """The p-quantile of seconds, in milliseconds."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t
