#!/usr/bin/env bash
# Builds the dashboard into crates/daemon/assets/dashboard, which is
# committed and embedded in the warden binary (so that a cargo build needs
# neither node nor the network). The packages are exactly those of
# package-lock.json (npm ci); esbuild bundles and minifies the page's
# plain JavaScript, xterm.js and noVNC into one script (an ES module:
# noVNC awaits at its top level, which a classic script cannot) and one
# stylesheet.
# `build.sh --check` rebuilds into a temporary directory and fails when the
# committed bundle differs from what the lockfile produces.
set -euo pipefail
cd "$(dirname "$0")"
out=../crates/daemon/assets/dashboard
check=0
if [ "${1:-}" = "--check" ]; then
    check=1
fi
# Every text a view puts on the page or into a dialog goes through
# src/dom.js (`h`, `setText`, `lines`, `ask`, `toast`), which shows the
# sandbox's invisible characters escaped (bidi overrides, newlines,
# escape sequences): a view that sets text or opens a dialog itself
# could show a file name or a diff line raw, so the build refuses it.
raw='\.(textContent|innerText|outerText|nodeValue)[[:space:]]*=[^=]|innerHTML|outerHTML|insertAdjacent(HTML|Text)|createTextNode|document\.write|(^|[^.[:alnum:]_])(confirm|alert)[[:space:]]*\(|window\.(confirm|alert|prompt)'
if found="$(grep -nE "$raw" src/*.js | grep -v '^src/dom\.js:')"; then
    echo "text put on the page or into a dialog outside src/dom.js (use h, setText, lines or ask there):" >&2
    echo "$found" >&2
    exit 1
fi
npm ci --no-audit --no-fund --loglevel=error >/dev/null
dest="$out"
if [ "$check" = 1 ]; then
    dest="$(mktemp -d)"
    trap 'rm -rf "$dest"' EXIT
fi
mkdir -p "$dest"
./node_modules/.bin/esbuild src/app.js --bundle --minify --format=esm --target=es2022 \
    --legal-comments=none --charset=utf8 --log-level=warning --outfile="$dest/app.js"
cp src/index.html src/icon.svg "$dest/"
if [ "$check" = 1 ]; then
    if ! diff -r -q "$out" "$dest"; then
        echo "the committed dashboard bundle ($out) is not what dashboard/build.sh builds from package-lock.json: run dashboard/build.sh and commit the result" >&2
        exit 1
    fi
    echo "dashboard bundle: up to date"
fi
