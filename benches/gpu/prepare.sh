#!/usr/bin/env bash
# Builds, here, what benches/gpu/check.sh runs on a GPU machine that cannot build (no
# crates.io there): the release bench binary with wgpu and the test binaries of the wgpu
# backend and of the random DAGs, stripped, into .gpu/ (ignored; carry it, with .gl/).
#
# Usage (from the repository root): benches/gpu/prepare.sh
# Then, through the device tool: carry [".gpu", ".gl"], command "bash benches/gpu/check.sh".
set -euo pipefail
mkdir -p .gpu
cargo build --release -p kiln-benches --features wgpu --bin kiln-bench
strip -o .gpu/kiln-bench target/release/kiln-bench
# The test binaries' paths, from cargo's JSON messages.
exe() {
  cargo test "$@" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
}
strip -o .gpu/backend "$(exe -p kiln-wgpu --test backend)"
strip -o .gpu/compiler_vs_reference "$(exe -p kiln --features wgpu --test compiler_vs_reference)"
du -ch .gpu/* | tail -1
