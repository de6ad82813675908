# Shared by the bench scripts (sourced, from the repository's root).

# need COMMAND PACKAGE: install PACKAGE from the distribution when COMMAND
# is missing and we are root; otherwise say what to install.
need() {
    command -v "$1" >/dev/null && return
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    else
        echo "bench: $1 is missing: install the $2 package" >&2
        exit 1
    fi
}

# build_warden: the release binary exactly as the README builds it, linked
# statically (glibc and libseccomp), so it needs nothing at run time but the
# kernel and starts without the dynamic loader; `--target host-tuple` keeps
# the flag off build scripts and proc macros. crates/cli/build.rs packs its
# relative relocations (RELR; docs/performance.md). Sets WARDEN to its
# path.
build_warden() {
    local host
    host="$(rustc -vV | sed -n 's/^host: //p')"
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -q -p warden-cli --target host-tuple
    WARDEN="$PWD/target/$host/release/warden"
}

# bwrap_args: bubblewrap with the isolation warden applies by default: every
# namespace, the host's system directories read-only (merged /usr as
# symlinks), fresh /proc, minimal /dev, tmpfs /tmp, a new session, dies with
# its parent. Sets the array BWRAP (the command to run is appended by the
# caller).
bwrap_args() {
    BWRAP=(bwrap --unshare-all --die-with-parent --new-session
           --ro-bind /usr /usr --ro-bind /etc /etc)
    local d
    for d in bin sbin lib lib32 lib64 libx32; do
        if [ -L "/$d" ]; then BWRAP+=(--symlink "$(readlink "/$d")" "/$d");
        elif [ -d "/$d" ]; then BWRAP+=(--ro-bind "/$d" "/$d"); fi
    done
    BWRAP+=(--proc /proc --dev /dev --tmpfs /tmp)
}

# egress_server PORT: the TLS server of the egress benchmarks in $WORK (a
# fresh certificate for bench.test, the client and server scripts copied
# there), started in the background with $PY on 127.0.0.1:PORT. The caller
# made $WORK (mode 755: a sandbox reads it) and kills its jobs at exit.
egress_server() {
    cp bench/egress_client.py bench/egress_server.py "$WORK/"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=bench.test -addext subjectAltName=DNS:bench.test \
        -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
    chmod 644 "$WORK/key.pem"
    "$PY" "$WORK/egress_server.py" "$1" "$WORK/cert.pem" "$WORK/key.pem" &
}
