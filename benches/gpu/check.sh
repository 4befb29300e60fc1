#!/usr/bin/env bash
# What a GPU session checks first, in one run of about six minutes on an H200: the wgpu
# test binaries that NVIDIA's shader compiler failed before (f64 shaders), then kiln's
# W4, W5 and W7 beside jax (when jax is installed there) and W4 without row groups.
#
# Usage, on the GPU machine, from the repository root, after benches/gpu/prepare.sh here:
#   bash benches/gpu/check.sh        (device tool: carry .gpu and .gl, timeout 600)
# Writes tests.txt, kiln.jsonl, jax.jsonl, rowgroups_off.jsonl and gpu.txt to $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kiln-gpu}
mkdir -p "$out"
. "$here/vulkan-env.sh"
export WGPU_BACKEND=${WGPU_BACKEND:-vulkan} KILN_REQUIRE_GPU=1
{
  echo "== backend tests"
  timeout 150 .gpu/backend --test-threads 4 2>&1 | grep -v XDG_RUNTIME
  echo "rc=${PIPESTATUS[0]}"
  echo "== random DAGs on wgpu"
  KILN_WGPU_PROPTEST_CASES=300 timeout 120 .gpu/compiler_vs_reference compiled_equals_reference_on_wgpu 2>&1 |
    grep -v XDG_RUNTIME
  echo "rc=${PIPESTATUS[0]}"
} | tee "$out/tests.txt"
KILN_BENCH_BIN=.gpu/kiln-bench OUT=$out timeout 240 bash "$here/run.sh" --rounds 2 --only W4,W5,W7
KILN_DEVICE=wgpu KILN_WGPU_ROW_GROUPS=0 timeout 60 .gpu/kiln-bench --only W4 |
  tee "$out/rowgroups_off.jsonl"
