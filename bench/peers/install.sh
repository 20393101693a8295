#!/usr/bin/env bash
# Installs the peers that the peers scenario of "app bench" compares fleet
# with, at the versions the bench pins, into .cache/peers of the checkout
# (ignored by git), or into the directory given as the first argument:
#
#   river/river-bench   River v0.51.2 with riverpgxv5 (bench/peers/river/go.mod),
#                       built with Go from the module proxy
#   graphile/           graphile-worker 0.18.0 (bench/peers/graphile/package-lock.json),
#                       installed with npm ci, and its runner run.mjs
#
# Run it from anywhere in a checkout: bash bench/peers/install.sh
# "app bench --scenario peers --peers-dir DIR" then finds them in DIR
# (default .cache/peers, relative to the bench's working directory).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-$root/.cache/peers}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

if ! command -v go >/dev/null 2>&1; then
  echo "install.sh: River's runner needs Go (1.26 or later) on PATH" >&2
  exit 1
fi
echo "building River's runner into $dest/river"
mkdir -p "$dest/river"
(cd "$root/bench/peers/river" && go build -trimpath -o "$dest/river/river-bench" .)

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "install.sh: graphile-worker needs Node.js and npm on PATH (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
echo "installing graphile-worker into $dest/graphile"
mkdir -p "$dest/graphile"
cp "$root/bench/peers/graphile/package.json" "$root/bench/peers/graphile/package-lock.json" \
  "$root/bench/peers/graphile/run.mjs" "$dest/graphile/"
# graphile-worker 0.18 declares Node.js 22.18 in its engines; it runs the
# bench on Node.js 20 too, so npm's engine warning is not fatal here.
npm ci --prefix "$dest/graphile" --no-audit --no-fund --loglevel=error >/dev/null

echo "installed into $dest: $("$dest/river/river-bench" version), graphile-worker $(node -p "require('$dest/graphile/node_modules/graphile-worker/package.json').version")"
echo "run: app bench --scenario peers --peers-dir $dest"
