#!/usr/bin/env bash
# Side-by-side benchmark of kiln against numpy, numexpr and jax.jit, interleaved round by
# round, with a same-run STREAM bound (see peers.py; stream.c needs gcc with OpenMP).
# Usage: benches/peers/run.sh [--quick] [--rounds N] [--only W1,W6,...] [--isa avx2]
# Creates benches/peers/.venv (gitignored) on first use and builds kiln twice: with default
# flags (benches/peers/.target-default) and with RUSTFLAGS="-C target-cpu=native"
# (benches/peers/.target-native).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$here/.venv/bin/python" ]; then
    python3 -m venv "$here/.venv"
fi
"$here/.venv/bin/pip" install -q numpy numexpr "jax[cpu]"
exec "$here/.venv/bin/python" "$here/peers.py" "$@"
