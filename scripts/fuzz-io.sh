#!/usr/bin/env bash
# Fuzzes kiln-io's readers with cargo-fuzz (libFuzzer + AddressSanitizer, on nightly): the
# targets in crates/kiln-io/fuzz (npy, npz, safetensors, pickle, pth), each for a fixed
# number of runs, seeded with the test fixtures (crates/kiln-io/tests/fixtures). Installs the
# nightly toolchain and cargo-fuzz when missing.
#
#   scripts/fuzz-io.sh                    # every target, FUZZ_RUNS runs each
#   FUZZ_RUNS=1000000 scripts/fuzz-io.sh npy safetensors
#   FUZZ_RUNS=100000 scripts/fuzz-io.sh pth      # one target (only it is built)
#
# Environment:
#   FUZZ_RUNS     runs per target (default 200000: about a minute per target on 2 cores,
#                 after a first build of a few minutes)
#   FUZZ_TIMEOUT  seconds one input may take before libFuzzer calls it a hang (default 10)
#   FUZZ_ARGS     more libFuzzer flags (e.g. "-max_len=65536", or "-malloc_limit_mb=8192"
#                 to look past a known oversized allocation)
#
# The corpus each target grows is kept in crates/kiln-io/fuzz/corpus/TARGET (git-ignored),
# so later runs start where earlier ones stopped. A crash, hang or leak stops the script
# with libFuzzer's report; the input is saved under crates/kiln-io/fuzz/artifacts/TARGET,
# and `cargo +nightly fuzz run TARGET crates/kiln-io/fuzz/artifacts/TARGET/crash-...` (from
# crates/kiln-io) replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${FUZZ_RUNS:-200000}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
read -r -a EXTRA <<< "${FUZZ_ARGS:-}"
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=(npy npz safetensors pickle pth); fi

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain (cargo-fuzz needs -Zsanitizer)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

FIXTURES=crates/kiln-io/tests/fixtures
cd crates/kiln-io

# Seeds for each target: the fixture files of its format (copied, so libFuzzer never writes
# into the fixtures; new inputs go to the first corpus directory, corpus/TARGET).
seed() {
    local target=$1 dir=fuzz/seeds/$1
    rm -rf "$dir" && mkdir -p "$dir"
    case $target in
        npy) cp ../../$FIXTURES/io/*.npy "$dir"/ ;;
        npz) cp ../../$FIXTURES/io/*.npz ../../$FIXTURES/zip/*.zip "$dir"/ ;;
        safetensors) cp ../../$FIXTURES/io/*.safetensors "$dir"/ ;;
        pickle)
            cp ../../$FIXTURES/pickle/*.pkl "$dir"/
            # The data.pkl of each PyTorch checkpoint fixture, where python3 can extract it.
            for pth in ../../$FIXTURES/pth/*.pth; do
                python3 - "$pth" "$dir" <<'PY' 2>/dev/null || true
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z:
    for n in z.namelist():
        if n.endswith("data.pkl"):
            with open(os.path.join(out, os.path.basename(src) + ".data.pkl"), "wb") as f:
                f.write(z.read(n))
PY
            done
            ;;
        # PyTorch checkpoints, and the plain zips (stored, deflated, zip64) of the archive
        # reader beneath them.
        pth) cp ../../$FIXTURES/pth/*.pth ../../$FIXTURES/zip/*.zip "$dir"/ ;;
        *) echo "unknown target $target" >&2; exit 2 ;;
    esac
}

for target in "${TARGETS[@]}"; do
    case $target in
        npy | npz | safetensors | pickle | pth) ;;
        *) echo "unknown target $target" >&2; exit 2 ;;
    esac
done

echo "== building ${TARGETS[*]} (release, debug assertions, AddressSanitizer)"
for target in "${TARGETS[@]}"; do
    cargo +nightly fuzz build -a "$target"
done

for target in "${TARGETS[@]}"; do
    seed "$target"
    mkdir -p "fuzz/corpus/$target"
    echo "== fuzzing $target: $RUNS runs (timeout ${TIMEOUT}s per input)"
    start=$(date +%s)
    cargo +nightly fuzz run -a "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -runs="$RUNS" -timeout="$TIMEOUT" -print_final_stats=1 ${EXTRA[@]+"${EXTRA[@]}"}
    echo "== $target: $RUNS runs in $(( $(date +%s) - start ))s, corpus $(ls "fuzz/corpus/$target" | wc -l) inputs"
done
echo "== no crash, hang or leak in ${TARGETS[*]}"
