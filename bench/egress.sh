#!/usr/bin/env bash
# Egress proxy cost, side by side on loopback: a 1 GB download through
# warden's proxy, through Squid (configured as an equivalent CONNECT
# allowlist proxy) and straight to the server; and CONNECT+close
# connections per second through each (sequential and concurrent).
#
#   bench/egress.sh [MEGABYTES] [CONNECTIONS]     (default 1000 MB, 2000)
#
# Both proxies are used the same way: an explicit CONNECT tunnel to an
# allowed name. Needs squid and python3 (installed from the distribution's
# packages when missing and running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
MB="${1:-1000}"
CONNS="${2:-2000}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need squid squid
need python3 python3

build_warden

WORK="$(mktemp -d)"
chmod 755 "$WORK"
cleanup() { kill $(jobs -p) 2>/dev/null || true; [ -f "$WORK/squid.pid" ] && kill "$(cat "$WORK/squid.pid")" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

SRV_PORT=18765; SQUID_PORT=18766
cp bench/egress_client.py bench/egress_server.py "$WORK/"
python3 "$WORK/egress_server.py" "$SRV_PORT" $((MB * 1000000)) &

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

in_warden() {
    "$WARDEN" run --no-tty --allow-domain "bench.test:$SRV_PORT" --add-host bench.test=127.0.0.1 \
        --ro "$WORK" -- sh -c 'mode=$1; shift; p=${HTTPS_PROXY##*/};
            exec python3 '"$WORK"'/egress_client.py "$mode" "${p%:*}" "${p#*:}" bench.test '"$SRV_PORT"' "$@"' sh "$@"
}

direct=$(python3 "$WORK/egress_client.py" direct 127.0.0.1 "$SRV_PORT")
squid_mb=$(python3 "$WORK/egress_client.py" tunnel 127.0.0.1 "$SQUID_PORT" bench.test "$SRV_PORT")
warden_mb=$(in_warden tunnel)
squid_seq=$(python3 "$WORK/egress_client.py" cps 127.0.0.1 "$SQUID_PORT" bench.test "$SRV_PORT" "$CONNS" 1)
warden_seq=$(in_warden cps "$CONNS" 1 | tail -1)
squid_conc=$(python3 "$WORK/egress_client.py" cps 127.0.0.1 "$SQUID_PORT" bench.test "$SRV_PORT" 2000 200)
warden_conc=$(in_warden cps 2000 200 | tail -1)

python3 - "$direct" "$squid_mb" "$warden_mb" "$squid_seq" "$warden_seq" "$squid_conc" "$warden_conc" <<'PY'
import sys
d, sm, wm, ss, ws, sc, wc = map(float, sys.argv[1:])
print(f"{'':24} {'direct':>10} {'squid':>10} {'warden':>10}")
print(f"{'throughput (MB/s)':24} {d:>10.0f} {sm:>10.0f} {wm:>10.0f}")
print(f"{'connections/s, 1 at once':24} {'':>10} {ss:>10.0f} {ws:>10.0f}")
print(f"{'connections/s, 200 at once':24} {'':>10} {sc:>10.0f} {wc:>10.0f}")
print(f"warden/direct throughput: {wm/d:.2f}   warden/squid throughput: {wm/sm:.2f}")
print(f"warden/squid connections/s: {ws/ss:.2f} sequential, {wc/sc:.2f} concurrent")
PY
