#!/usr/bin/env bash
# The request-rule half of bench/egress.sh (`bench/egress.sh requests`):
# HTTPS/1.1 requests per second on one kept-alive connection and one
# download's MB/s, three ways in each round, interleaved: direct, through
# warden with bench.test passed through by name ("pass"), and through
# warden with a request rule for bench.test ("ruled": TLS terminated with
# the sandbox's authority, each request decided, its body scanned). Each
# figure is the median of ROUNDS rounds.
#
#   bench/egress_requests.sh [MEGABYTES] [REQUESTS] [ROUNDS]
#
# WARDEN=/path/to/warden measures that binary instead of building one.
# WARDEN_BASE=/path/to/another also measures that build's two ways in the
# same rounds ("pass-base", "ruled-base"), so that a change to the proxy
# is compared with the build before it under the same load.
set -euo pipefail
cd "$(dirname "$0")/.."
MB="${1:-200}"
REQS="${2:-2000}"
ROUNDS="${3:-5}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need python3 python3
need openssl openssl
if [ -z "${WARDEN:-}" ]; then build_warden; fi
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

WORK="$(mktemp -d)"
chmod 755 "$WORK"
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

PORT=18767
# An authority and a leaf it signs (rustls, on the proxy's upstream side,
# refuses a self-signed certificate used as its own authority).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj /CN=bench.test -keyout "$WORK/key.pem" -out "$WORK/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:bench.test\nbasicConstraints=CA:FALSE\n' > "$WORK/leaf.ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 2 -extfile "$WORK/leaf.ext" -out "$WORK/cert.pem" 2>/dev/null
chmod 644 "$WORK/key.pem"
cp bench/egress_http_server.py bench/egress_http_client.py "$WORK/"
"$PY" "$WORK/egress_http_server.py" "$PORT" "$WORK/cert.pem" "$WORK/key.pem" &
sleep 1

CLIENT="$WORK/egress_http_client.py"
BYTES=$((MB * 1000000))
# in_warden CA ARGS -- CLIENT-ARGS...: the client inside a sandbox that
# reaches bench.test on the server's port and nothing else.
in_warden() {
    local bin="$WARDEN"
    if [ "$1" = --base ]; then bin="$WARDEN_BASE"; shift; fi
    local ca="$1"; shift
    local args=()
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    "$bin" run --no-tty --allow-domain "bench.test:$PORT" --add-host bench.test=127.0.0.1 \
        --ro "$WORK" "${args[@]}" -- python3 "$CLIENT" bench.test "$PORT" "$ca" "$@"
}
measure() {
    local what="$1" n="$2"
    "$PY" "$CLIENT" 127.0.0.1 "$PORT" "$WORK/ca.pem" "$what" "$n" >>"$WORK/direct.$what"
    in_warden "$WORK/ca.pem" -- "$what" "$n" >>"$WORK/pass.$what"
    in_warden /run/warden/ca.crt --upstream-ca "$WORK/ca.pem" \
        --allow-request "GET bench.test:$PORT/**" -- "$what" "$n" >>"$WORK/ruled.$what"
    if [ -n "${WARDEN_BASE:-}" ]; then
        in_warden --base "$WORK/ca.pem" -- "$what" "$n" >>"$WORK/pass-base.$what"
        in_warden --base /run/warden/ca.crt --upstream-ca "$WORK/ca.pem" \
            --allow-request "GET bench.test:$PORT/**" -- "$what" "$n" >>"$WORK/ruled-base.$what"
    fi
}
for r in $(seq "$ROUNDS"); do
    echo "bench: round $r of $ROUNDS" >&2
    measure requests "$REQS"
    measure bytes "$BYTES"
done

python3 - "$WORK" "$MB" "$REQS" "${WARDEN_BASE:+base}" <<'PY'
import statistics, sys
work, mb, reqs, base = sys.argv[1:5]
ways = ["direct", "pass", "ruled"] + (["pass-base", "ruled-base"] if base else [])
rows = [("requests", f"requests/s ({reqs}, kept alive)"), ("bytes", f"MB/s ({mb} MB)")]
med = {(w, k): statistics.median(float(x) for x in open(f"{work}/{w}.{k}").read().split())
       for w in ways for k, _ in rows}
print(f"{'median of rounds':32}" + "".join(f"{w:>11}" for w in ways))
for k, label in rows:
    print(f"{label:32}" + "".join(f"{med[w, k]:>11.0f}" for w in ways))
print()
print(f"{'ratio':32}{'pass/direct':>14}{'ruled/direct':>14}{'ruled/pass':>14}")
for k, label in rows:
    d, p, r = med["direct", k], med["pass", k], med["ruled", k]
    print(f"{label:32}{p / d:>14.2f}{r / d:>14.2f}{r / p:>14.2f}")
if base:
    print()
    print(f"{'against WARDEN_BASE':32}{'pass/base':>14}{'ruled/base':>14}{'base r/p':>14}")
    for k, label in rows:
        pb, rb = med["pass-base", k], med["ruled-base", k]
        print(f"{label:32}{med['pass', k] / pb:>14.2f}{med['ruled', k] / rb:>14.2f}{rb / pb:>14.2f}")
    print("(base r/p: the base build's ruled/pass)")
# Ratios taken within each round (its ways run one after the other), then
# their median: steadier than ratios of medians when the load moves.
vals = {(w, k): [float(x) for x in open(f"{work}/{w}.{k}").read().split()]
        for w in ways for k, _ in rows}
pairs = [("ruled", "pass")] + ([("ruled-base", "pass-base"), ("ruled", "ruled-base"),
                                ("pass", "pass-base")] if base else [])
print()
print(f"{'median of per-round ratios':32}" + "".join(f"{a + '/' + b:>22}" for a, b in pairs))
for k, label in rows:
    cells = [statistics.median(x / y for x, y in zip(vals[a, k], vals[b, k])) for a, b in pairs]
    print(f"{label:32}" + "".join(f"{c:>22.2f}" for c in cells))
PY
