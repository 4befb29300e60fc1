"""Prints the table of a benches/gpu/run.sh run: per workload, kiln's and jax's median time
(the median over rounds of each round's median), jax/kiln per round (> 1: kiln faster;
median and range over the rounds, round i of kiln against round i of jax), and W1's
bandwidth and W5's throughput as fractions of the bounds measured in the same run."""

import json
import statistics
import sys
from pathlib import Path


def load(path):
    rows = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "median_ms" in r and "size" in r:
            rows.setdefault((r["workload"], r["size"]), []).append(r)
    return rows


def main():
    out = Path(sys.argv[1])
    kiln, jax = load(out / "kiln.jsonl"), load(out / "jax.jsonl")
    med = lambda rs, k: statistics.median(r[k] for r in rs if r.get(k) is not None) if any(r.get(k) is not None for r in rs) else None
    stream = med(jax.get(("bound_stream", "256M"), []), "gb_per_s")
    sgemm = med(jax.get(("bound_sgemm", "8192^3"), []), "gflop_per_s")
    print(f"bounds (jax, same run): streaming pass {stream:.0f} GB/s, f32 matmul 8192^3 {sgemm:.0f} GFLOP/s"
          if stream and sgemm else "bounds: not measured")
    print(f"{'workload':<18}{'size':<18}{'kiln ms':>10}{'jax ms':>10}{'jax/kiln':>18}  note")
    for key in sorted(set(kiln) | set(jax)):
        if key[0].startswith("bound"):
            continue
        k, j = med(kiln.get(key, []), "median_ms"), med(jax.get(key, []), "median_ms")
        per = [b["median_ms"] / a["median_ms"] for a, b in zip(kiln.get(key, []), jax.get(key, []))]
        ratio = "-"
        if per:
            ratio = f"{statistics.median(per):.2f}"
            if len(per) > 1:
                ratio += f" [{min(per):.2f}-{max(per):.2f}]"
        note = ""
        gb = med(kiln.get(key, []), "gb_per_s")
        if gb and stream and key[0] == "W1":
            note = f"kiln {gb:.0f} GB/s = {100 * gb / stream:.0f}% of the streaming bound"
        gf = med(kiln.get(key, []), "gflop_per_s")
        if gf and sgemm and key[0].startswith("W5"):
            note = f"kiln {gf:.0f} GFLOP/s = {100 * gf / sgemm:.0f}% of f32 matmul"
        if key[0] == "W7" or key[0].startswith("W7"):
            note = f"steps/s kiln {1e3 / k:.0f}, jax {1e3 / j:.0f}" if k and j else ""
        fmt = lambda x: f"{x:.3f}" if x is not None else "-"
        print(f"{key[0]:<18}{key[1]:<18}{fmt(k):>10}{fmt(j):>10}{ratio:>18}  {note}")


if __name__ == "__main__":
    main()
