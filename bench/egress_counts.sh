#!/usr/bin/env bash
# The egress proxy's work counted, not timed: system calls made by the
# proxy's thread per new TLS connection (connect, handshake, close, one at
# a time) and per MB of a TLS download, through warden's transparent proxy
# from inside a sandbox (the same client, server and names as
# bench/egress.sh). Counts do not move with the machine's load the way
# wall times do, so they compare two builds on a busy machine.
#
#   bench/egress_counts.sh [MEGABYTES] [CONNECTIONS]   (default 200, 300)
#
# WARDEN=/path/to/warden counts that binary instead of building one;
# WARDEN_BASE=/path/to/another/warden counts that one too. PERF=1 also
# records a call-graph profile of the proxy's thread during the connection
# test (`perf record -e cpu-clock -g`, software clock) and prints its top.
#
# Needs strace, python3 and openssl; perf with PERF=1.
set -euo pipefail
cd "$(dirname "$0")/.."
MB="${1:-200}"
CONNS="${2:-300}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need strace strace
need python3 python3
need openssl openssl
if [ -z "${WARDEN:-}" ]; then build_warden; fi
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

WORK="$(mktemp -d)"
chmod 755 "$WORK"
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
SRV_PORT=18775
egress_server "$SRV_PORT"
sleep 1

# count BINARY LABEL ARGS...: the client inside a sandbox, after a pause
# in which strace attaches to the proxy's thread; prints the thread's
# system calls, total and by name.
count() {
    local bin="$1" label="$2"; shift 2
    "$bin" run --no-tty --allow-domain "bench.test:$SRV_PORT" --add-host bench.test=127.0.0.1 \
        --ro "$WORK" -- sh -c 'sleep 1.5; exec python3 "$@"' sh \
        "$WORK/egress_client.py" transparent "$SRV_PORT" "$WORK/cert.pem" "$@" \
        >"$WORK/$label.client" &
    local run=$! tid="" i
    for i in $(seq 100); do
        tid="$(grep -lx warden-egress /proc/"$run"/task/*/comm 2>/dev/null | head -1 | cut -d/ -f5)" || true
        [ -n "$tid" ] && break
        sleep 0.02
    done
    [ -n "$tid" ] || { echo "bench: no proxy thread found" >&2; exit 1; }
    strace -c -o "$WORK/$label.strace" -p "$tid" 2>/dev/null &
    local st=$! pf=""
    if [ -n "${PERF:-}" ] && [ "${1:-}" = conns ]; then
        perf record -q -e cpu-clock -g -t "$tid" -o "$WORK/$label.perf" 2>/dev/null &
        pf=$!
    fi
    wait "$run"
    wait "$st" || true
    if [ -n "$pf" ]; then wait "$pf" || true; fi
}

report() {
    local label="$1" per="$2" unit="$3"
    awk -v per="$per" -v unit="$unit" -v label="$label" '
        /^-/ || /^%/ || / total$/ { next }
        NF >= 5 { n = $4; name = $NF; calls[name] = n; sum += n }
        END {
            printf "%s: %.1f system calls per %s\n", label, sum / per, unit
            for (c in calls) if (calls[c] / per >= 0.01) printf "    %-18s %8.2f\n", c, calls[c] / per
        }' "$WORK/$label.strace" | { read -r head; echo "$head"; sort -k2,2nr; }
}

for pair in "warden:$WARDEN" ${WARDEN_BASE:+"base:$WARDEN_BASE"}; do
    label="${pair%%:*}"; bin="${pair#*:}"
    count "$bin" "$label-conns" conns "$CONNS" 1
    count "$bin" "$label-bytes" bytes $((MB * 1000000))
    mv "$WORK/$label-conns.strace" "$WORK/$label.strace"; report "$label" "$CONNS" "connection"
    mv "$WORK/$label-bytes.strace" "$WORK/$label.strace"; report "$label" "$MB" "MB"
    if [ -n "${PERF:-}" ] && [ -f "$WORK/$label-conns.perf" ]; then
        perf report -q -i "$WORK/$label-conns.perf" --no-children --percent-limit 1.5 \
            --stdio -g none 2>/dev/null | head -40
    fi
done
