#!/usr/bin/env bash
# The E2B SDK against `warden serve --e2b`, next to warden's native API on
# the same daemon and the same transport (HTTP over TCP on loopback, a
# token on every call): create-to-first-`commands.run`, and a
# `commands.run("true")` round trip, p50 and p99; the native API bare and
# through warden's own Python client (clients/python). All run the command
# the SDK runs (`/bin/bash -l -c CMD`), so the difference is the door.
# Then a sandbox's state through the door (bench/e2b_state.py): pause()
# and connect() (with memory, and to its files) beside the native pause
# and resume, and fork(count=4).
#
#   bench/e2b.sh [RUNS]            (default 200 round trips, 30 creates,
#                                   RUNS/10 pause rounds, at least 4)
#   WARDEN=target/debug/warden bench/e2b.sh     (a binary already built)
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
# The pinned SDK and warden's Python client, in a virtual environment kept
# under the target directory.
VENV="${CARGO_TARGET_DIR:-$PWD/target}/e2b-venv"
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
