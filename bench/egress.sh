#!/usr/bin/env bash
# Egress proxy cost, side by side in one run on loopback, with TLS end to
# end between a server and a client on this machine: a download's
# throughput, and new connections per second (connect, TLS handshake,
# close), straight to the server ("direct"), through warden's proxy from
# inside a sandbox ("warden": transparent, decided on the ClientHello's SNI,
# as a program in a sandbox connects; "warden CONNECT": an explicit tunnel
# to its HTTPS_PROXY) and through Squid configured as the equivalent
# CONNECT allowlist proxy. Each figure is the median of ROUNDS rounds, the
# ways interleaved within each round so that the machine's load is shared
# alike.
#
#   bench/egress.sh [MEGABYTES] [CONNECTIONS] [ROUNDS] [CONCURRENCY]
#                   (default 500 MB, 1000 connections, 5 rounds, 8 at once)
#
# Request rules: HTTPS/1.1 requests per second on one kept-alive
# connection and one download's throughput, direct, through warden with
# the name passed through (decided by name, spliced), and through warden
# with a request rule for the name (TLS terminated, each request decided,
# its body scanned):
#
#   bench/egress.sh requests [MEGABYTES] [REQUESTS] [ROUNDS]
#                   (default 200 MB, 2000 requests, 5 rounds)
#
# WARDEN=/path/to/warden measures that binary instead of building one;
# WARDEN_BASE=/path/to/another/warden adds a column for that binary (a
# release before a change, measured in the same rounds).
#
# Needs squid, python3 and openssl (installed from the distribution's
# packages when missing and running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = requests ]; then
    shift
    exec bench/egress_requests.sh "$@"
fi
MB="${1:-500}"
CONNS="${2:-1000}"
ROUNDS="${3:-5}"
CONC="${4:-8}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need squid squid
need python3 python3
need openssl openssl

if [ -z "${WARDEN:-}" ]; then build_warden; fi
# The same interpreter outside as inside a sandbox (which sees /usr).
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

WORK="$(mktemp -d)"
chmod 755 "$WORK"
cleanup() { kill $(jobs -p) 2>/dev/null || true; [ -f "$WORK/squid.pid" ] && kill "$(cat "$WORK/squid.pid")" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

SRV_PORT=18765; SQUID_PORT=18766
egress_server "$SRV_PORT"

echo "127.0.0.1 bench.test" > "$WORK/hosts"
cat > "$WORK/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID_PORT
acl allowed dstdomain bench.test
acl allowed_port port $SRV_PORT
acl CONNECT method CONNECT
http_access allow CONNECT allowed allowed_port
http_access deny all
hosts_file $WORK/hosts
cache deny all
access_log none
cache_log $WORK/cache.log
pid_filename $WORK/squid.pid
coredump_dir $WORK
shutdown_lifetime 0 seconds
CONF
squid -f "$WORK/squid.conf" -N >"$WORK/squid.out" 2>&1 &
sleep 2

CLIENT="$WORK/egress_client.py"
CA="$WORK/cert.pem"
BYTES=$((MB * 1000000))
# in_warden BINARY WAY ARGS...: the client inside a sandbox allowed to
# reach bench.test on the server's port (and nothing else).
in_warden() {
    local bin="$1" way="$2"; shift 2
    "$bin" run --no-tty --allow-domain "bench.test:$SRV_PORT" --add-host bench.test=127.0.0.1 \
        --ro "$WORK" -- sh -c 'way=$1; shift; p=${HTTPS_PROXY##*/};
            if [ "$way" = tunnel ]; then exec python3 '"$CLIENT"' tunnel "${p%:*}" "${p#*:}" "$@";
            else exec python3 '"$CLIENT"' transparent "$@"; fi' sh "$way" "$SRV_PORT" "$CA" "$@"
}
# measure WHAT ARGS...: one figure for each way, appended to $WORK/WAY.WHAT
measure() {
    local what="$1"; shift
    "$PY" "$CLIENT" direct 127.0.0.1 "$SRV_PORT" "$CA" "$@" >>"$WORK/direct.$what"
    "$PY" "$CLIENT" tunnel 127.0.0.1 "$SQUID_PORT" "$SRV_PORT" "$CA" "$@" >>"$WORK/squid.$what"
    in_warden "$WARDEN" transparent "$@" >>"$WORK/warden.$what"
    in_warden "$WARDEN" tunnel "$@" >>"$WORK/warden-connect.$what"
    if [ -n "${WARDEN_BASE:-}" ]; then
        in_warden "$WARDEN_BASE" transparent "$@" >>"$WORK/base.$what"
    fi
}
for r in $(seq "$ROUNDS"); do
    echo "bench: round $r of $ROUNDS" >&2
    measure mbs bytes "$BYTES"
    measure seq conns "$CONNS" 1
    measure conc conns "$CONNS" "$CONC"
done

python3 - "$WORK" "$MB" "$CONC" "${WARDEN_BASE:+base}" <<'PY'
import statistics, sys
work, mb, conc, base = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ways = ["direct", "squid", "warden", "warden-connect"] + (["base"] if base else [])
names = {"warden-connect": "w. CONNECT", "base": "WARDEN_BASE"}
rows = [("mbs", f"TLS MB/s ({mb} MB)"), ("seq", "TLS conns/s, 1 at once"), ("conc", f"TLS conns/s, {conc} at once")]
med = {}
for w in ways:
    for k, _ in rows:
        vals = [float(x) for x in open(f"{work}/{w}.{k}").read().split()]
        med[w, k] = (statistics.median(vals), min(vals), max(vals))
print(f"{'median of rounds':28}" + "".join(f"{names.get(w, w):>13}" for w in ways))
for k, label in rows:
    print(f"{label:28}" + "".join(f"{med[w, k][0]:>13.0f}" for w in ways))
print()
print(f"{'ratio to direct':28}" + "".join(f"{names.get(w, w):>13}" for w in ways[1:]))
for k, label in rows:
    d = med["direct", k][0]
    print(f"{label:28}" + "".join(f"{med[w, k][0] / d:>13.2f}" for w in ways[1:]))
print()
print("spread (min-max):")
for k, label in rows:
    print(f"  {label:26}" + "  ".join(f"{names.get(w, w)} {med[w, k][1]:.0f}-{med[w, k][2]:.0f}" for w in ways))
PY
