#!/usr/bin/env bash
# The E2B SDK against `warden serve --e2b`, next to warden's native API on
# the same daemon and the same transport (HTTP over TCP on loopback, a
# token on every call): create-to-first-`commands.run`, and a
# `commands.run("true")` round trip, p50 and p99; the native API bare and
# through warden's own Python client (clients/python). All run the command
# the SDK runs (`/bin/bash -l -c CMD`), so the difference is the door.
# Then a sandbox's state through the door (bench/e2b_state.py): pause()
# and connect() (with memory, and to its files) beside the native pause
# and resume, and fork(count=4); and the code interpreter
# (bench/e2b_interpreter.py): run_code("1+1") with its interpreter up,
# and create to a first run_code (skipped, said, without PyPI: its
# packages are fetched once). Last, the published figures of hosted
# services that docs/performance.md cites, for scale.
#
#   bench/e2b.sh [RUNS]            (default 200 round trips, 30 creates,
#                                   RUNS/10 pause rounds, at least 4)
#   WARDEN=target/debug/warden bench/e2b.sh     (a binary already built)
#   E2B_VENV=/path/to/venv bench/e2b.sh          (a virtual environment of its own)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-200}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ -z "${WARDEN:-}" ]; then build_warden; fi
WARDEN="$(realpath "$WARDEN")"

OUT="$(mktemp -d)"
export WARDEN_STATE_DIR="$OUT/state"
mkdir -p "$WARDEN_STATE_DIR"
# A configuration of its own: the code interpreter's setup profile is
# given PyPI's addresses as the tests give them (pinned by name, the
# addresses resolved now), and nothing of the user's is read.
export XDG_CONFIG_HOME="$OUT/config"
mkdir -p "$XDG_CONFIG_HOME/warden/profiles"
PYPI_CIDRS="$(python3 -c 'import socket
a = sorted({i[4][0] for n in ("pypi.org", "files.pythonhosted.org") for i in socket.getaddrinfo(n, 443, type=socket.SOCK_STREAM)})
print(", ".join(x + ("/128" if ":" in x else "/32") for x in a))' 2>/dev/null || true)"
if [ -n "$PYPI_CIDRS" ]; then
  printf 'extends: [code-interpreter-v1]\negress:\n  presets: [pypi]\n  allow_cidrs: [%s]\n' "$PYPI_CIDRS" \
    > "$XDG_CONFIG_HOME/warden/profiles/code-interpreter-v1-setup.yaml"
fi
# The pinned SDK and warden's Python client, in a virtual environment kept
# under the target directory.
VENV="${E2B_VENV:-${CARGO_TARGET_DIR:-$PWD/target}/e2b-venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -r clients/e2b-compat/requirements.txt -e clients/python

"$WARDEN" serve --listen 127.0.0.1:0 --e2b 127.0.0.1:0 2>"$OUT/serve.log" &
DAEMON=$!
cleanup() { kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
for _ in $(seq 200); do grep -q "E2B-compatible API on" "$OUT/serve.log" && break; sleep 0.05; done
E2B_URL="$(sed -n 's/.*E2B-compatible API on \(http:\/\/[^ ]*\).*/\1/p' "$OUT/serve.log")"
NATIVE_URL="$(sed -n 's/.* and \(http:\/\/[^ ]*\) (tokens required).*/\1/p' "$OUT/serve.log")"

"$VENV/bin/python" bench/e2b_client.py "$WARDEN_STATE_DIR/daemon.sock" "$E2B_URL" "$NATIVE_URL" "$RUNS"
echo
"$VENV/bin/python" bench/e2b_state.py "$WARDEN_STATE_DIR/daemon.sock" "$E2B_URL" "$(( RUNS / 10 > 4 ? RUNS / 10 : 4 ))"
echo
if [ -n "$PYPI_CIDRS" ]; then
  "$VENV/bin/python" bench/e2b_interpreter.py "$WARDEN_STATE_DIR/daemon.sock" "$E2B_URL" "$(( RUNS / 4 > 10 ? RUNS / 4 : 10 ))"
else
  echo "run_code: skipped, PyPI cannot be resolved from this host (the code interpreter's packages are fetched once)"
fi
cat <<'PUBLISHED'

Published figures of hosted services, as docs/performance.md cites them
(over the internet from the client's machine; warden's above are on
loopback): create to first command, E2B 442 ms p50 and 4,135 ms p99 in one
run of 30, 467 / 852 ms in another; Daytona 663 / 7,770 ms; Podflare
153 / 236 ms (docs.podflare.ai/architecture/comparison, April 2026).
Resume of a paused sandbox: E2B about 1 s, Blaxel under 25 ms. No
published figure for fork or run_code is cited there.
PUBLISHED
