#!/usr/bin/env bash
# kiln on wgpu against jax.jit on the same GPU, on a machine with an NVIDIA GPU.
#
# Usage (from the repository root, with a release build of the bench binary, see
# benches/README.md): benches/gpu/run.sh [--rounds N] [--only W1,W5,...]
# Writes kiln.jsonl, jax.jsonl and gpu.txt to $OUT (default /tmp/kiln-gpu) and prints a table.
# Rounds interleave: each round runs one workload group on kiln, then on jax (the order
# alternating from round to round), so a slow spell lands on both sides.
#
# Vulkan: uses the machine's loader, or the Debian packages in .gl/ (see benches/README.md)
# when it has none, and the NVIDIA driver's ICD wherever the driver installed it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kiln-gpu}
bin=${KILN_BENCH_BIN:-target/release/kiln-bench}
rounds=2
only=W1,W2,W3,W4,W5,W6,W7
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
. "$here/vulkan-env.sh"
egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
export WGPU_BACKEND=${WGPU_BACKEND:-vulkan} KILN_DEVICE=wgpu
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"
  lscpu | grep -E '^Model name|^CPU\(s\)'
} | tee "$out/gpu.txt"
python3 "$here/jax_gpu.py" --only bounds | tee -a "$out/jax.jsonl"
for r in $(seq 1 "$rounds"); do
  for g in ${only//,/ }; do
    if [ $((r % 2)) = 1 ]; then
      "$bin" --only "$g" | tee -a "$out/kiln.jsonl"
      python3 "$here/jax_gpu.py" --only "$g" | tee -a "$out/jax.jsonl"
    else
      python3 "$here/jax_gpu.py" --only "$g" | tee -a "$out/jax.jsonl"
      "$bin" --only "$g" | tee -a "$out/kiln.jsonl"
    fi
  done
done
python3 "$here/table.py" "$out"
