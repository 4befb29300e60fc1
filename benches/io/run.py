#!/usr/bin/env python3
"""Loading a large f32 file: kiln-io against numpy, in one run, interleaved.

Writes a `--gib` GiB float32 array as .npy and as .safetensors (once, cached in `--dir`),
then for `--rounds` rounds runs, each in its own process: kiln's `io-load` and numpy's
loader (`numpy.load`, `safetensors.numpy.load_file`) on each file, alternating (kiln,
numpy, kiln, numpy ...) so that noise lands on both sides. Each process reports the seconds
to load and to load and then read every element (a sum); its peak resident memory comes
from the kernel (`os.wait4`'s `ru_maxrss`). Prints one JSON line per measurement and one
summary line per (format, tool) with medians and ranges, and the ratios numpy/kiln.

Needs numpy and the `safetensors` Python package, and a release build of the bench:
    cargo build --release -p kiln-benches --bin io-load
    python3 benches/io/run.py --gib 1 --rounds 5
"""
import argparse, json, os, platform, statistics, subprocess, sys, time

NUMPY_LOADER = r"""
import json, sys, time
import numpy as np
fmt, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if fmt == "npy":
    arrays = [np.load(path)]
else:
    from safetensors.numpy import load_file
    arrays = list(load_file(path).values())
load = time.perf_counter() - t0
checksum = sum(float(a.sum()) for a in arrays)
total = time.perf_counter() - t0
print(json.dumps({"tool": "numpy", "format": fmt, "load_s": load, "load_and_sum_s": total, "checksum": checksum}))
"""


def run(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{cmd} failed with status {status}")
    rec = json.loads(out.decode().strip().splitlines()[-1])
    rec["peak_rss_mib"] = usage.ru_maxrss / 1024.0
    return rec


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/kiln-io-bench")
    ap.add_argument("--bin", default="target/release/io-load")
    args = ap.parse_args()
    import numpy as np
    from safetensors.numpy import save_file

    os.makedirs(args.dir, exist_ok=True)
    n = int(args.gib * (1 << 30)) // 4
    npy = os.path.join(args.dir, f"a-{n}.npy")
    st = os.path.join(args.dir, f"a-{n}.safetensors")
    if not (os.path.exists(npy) and os.path.exists(st)):
        a = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        np.save(npy, a)
        save_file({"a": a}, st)
        del a
    file_mib = {f: os.path.getsize(p) / (1 << 20) for f, p in (("npy", npy), ("safetensors", st))}
    print(json.dumps({"cpu": cpu_model(), "cores": os.cpu_count(), "file_mib": file_mib,
                      "numpy": np.__version__, "date": time.strftime("%Y-%m-%d")}))
    records = []
    for r in range(args.rounds):
        for fmt, path in (("npy", npy), ("safetensors", st)):
            pair = [
                [args.bin, "--format", fmt, path],
                [sys.executable, "-c", NUMPY_LOADER, fmt, path],
            ]
            if r % 2:
                pair.reverse()
            for cmd in pair:
                rec = run(cmd)
                rec["round"] = r
                print(json.dumps(rec), flush=True)
                records.append(rec)
    for fmt in ("npy", "safetensors"):
        summary = {"format": fmt, "file_mib": file_mib[fmt]}
        for tool in ("kiln", "numpy"):
            rs = [x for x in records if x["format"] == fmt and x["tool"] == tool]
            for key in ("load_s", "load_and_sum_s", "peak_rss_mib"):
                vals = [x[key] for x in rs]
                summary[f"{tool}_{key}"] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        for key in ("load_s", "load_and_sum_s"):
            ratios = []
            for r in range(args.rounds):
                k = [x[key] for x in records if x["format"] == fmt and x["tool"] == "kiln" and x["round"] == r]
                p = [x[key] for x in records if x["format"] == fmt and x["tool"] == "numpy" and x["round"] == r]
                ratios.append(p[0] / k[0])
            summary[f"numpy_over_kiln_{key}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        summary["kiln_rss_over_file"] = summary["kiln_peak_rss_mib"]["median"] / file_mib[fmt]
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
