"""Exec round trips over a sandbox's control socket, from one long-lived
process (as a daemon or an SDK would drive it): connect, hello, exec
`true` with /dev/null as stdio, wait for its exit. Prints p50/p90 in ms.

    python3 bench/exec_client.py CONTROL_SOCKET [RUNS]
"""
import array, json, os, socket, sys, time

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
null = os.open("/dev/null", os.O_RDWR)


def ask(s, msg, fds=()):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    s.sendmsg([json.dumps(msg).encode()], anc)


def answer(s):
    data = s.recv(196608)
    return json.loads(data)


def once():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    ask(s, {"op": "hello", "version": 1})
    assert answer(s)["op"] == "hello"
    ask(s, {"op": "exec", "argv": ["true"], "env": [], "cwd": None, "tty": False}, [null, null, null])
    assert answer(s)["op"] == "spawned"
    r = answer(s)
    assert r["op"] == "exited" and r["status"] == 0, r
    s.close()


for _ in range(20):
    once()
times = []
for _ in range(runs):
    t = time.perf_counter()
    once()
    times.append(time.perf_counter() - t)
times.sort()
print(f"{times[len(times) // 2] * 1000:.2f} {times[int(len(times) * 0.9)] * 1000:.2f}")
