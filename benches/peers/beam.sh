#!/usr/bin/env bash
# g2p-en beam-search decoding: kiln-beam against a numpy implementation of the same search,
# in one run, printing one side-by-side table (see beam_numpy.py).
# Usage: benches/peers/beam.sh [--quick]
# Uses benches/peers/.venv (gitignored; created here with numpy if absent, as run.sh does),
# fetches the g2p-en checkpoint into data/ if absent, and builds the `beam` bench binary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ ! -x "$here/.venv/bin/python" ]; then
    python3 -m venv "$here/.venv"
fi
"$here/.venv/bin/python" -c "import numpy" 2>/dev/null || "$here/.venv/bin/pip" install -q numpy
if [ ! -f "${KILN_DATA_DIR:-$root/data}/g2p_en/checkpoint20.npz" ]; then
    bash "$root/scripts/fetch-data.sh"
fi
(cd "$root" && cargo build --release -q -p kiln-benches --bin beam)
target="${CARGO_TARGET_DIR:-$root/target}"
exec "$here/.venv/bin/python" "$here/beam_numpy.py" --kiln "$target/release/beam" "$@"
