"""Side-by-side benchmark: kiln (default build and -C target-cpu=native) against numpy,
numexpr and jax.jit on the workloads of design.md section 6, plus the machine's limits (a
STREAM triad in C on every core with streaming stores, numpy's BLAS sgemm). Run through
./run.sh, which makes the venv.

Every peer times the same thing kiln's bench binary times: a fresh result of the whole
expression per call (inputs prepared beforehand), median over repeated runs after a warm-up.

Noise from other tenants must not land on one side only, so the runs interleave: each round
runs every workload group as kiln default, kiln native, then the peers (the order of kiln
and the peers, and of kiln's two builds, alternates from round to round), and the STREAM
bound once. The table gives,
per workload, the median and the range over the rounds of the per-round ratios (peer time /
kiln time: > 1 means kiln is faster). The header names the CPU model, its ISA level and
caches. Options: --rounds N (default 3), --quick (one short round), --only W1,W6,...,
--isa avx2 (an AVX2-only machine on an AVX-512 one: every side held to AVX2, see AVX2_ENV).
"""

import json
import os
import statistics
import subprocess
import sys
import time

# `--isa avx2`: the nearest an AVX-512 machine gets to an AVX2-only one (x86-64-v3), for
# every side alike: kiln's dispatch (KILN_CPU_ISA) and its "native" build (x86-64-v3 instead of
# the host), numpy's dispatched loops, OpenBLAS's kernels, XLA's code generation, and the C
# STREAM program. Set before numpy is imported, so the script re-executes itself once.
AVX2_ENV = {
    "KILN_CPU_ISA": "avx2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Haswell",
    "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
}
ISA = sys.argv[sys.argv.index("--isa") + 1] if "--isa" in sys.argv else "host"
if ISA not in ("host", "avx2"):
    sys.exit(f"--isa {ISA}: expected avx2 (or leave it out for the host's own level)")
if ISA == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
    os.environ.update(AVX2_ENV)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np

QUICK = "--quick" in sys.argv
MEGA = 1 << 20


def timeit(f, reps):
    f()
    ts = []
    for _ in range(3 if QUICK else reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def reps_for(nbytes):
    return 7 if nbytes > 1e9 else 11 if nbytes > 1e8 else 21


def uniform(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def peers(group):
    """{(workload, size): {peer: seconds}} for one workload group (W1 ... W7)."""
    import numexpr as ne
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    res = {}

    def put(w, size, peer, secs):
        res.setdefault((w, size), {})[peer] = secs

    def jax_time(f, args, reps):
        jf = jax.jit(f)
        dargs = [jnp.asarray(a) for a in args]
        return timeit(lambda: jf(*dargs).block_until_ready(), reps)

    if group == "W1":
        w1(put, ne, jax_time)
    elif group == "W2":
        w2(put, ne, jax_time, jnp)
    elif group == "W3":
        w3(put, ne, jax_time)
    elif group == "W4":
        w4(put, ne, jax_time, jax, jnp)
    elif group == "W5":
        w5(put, jax_time, jax)
    elif group == "W6":
        w6(put, jax, jnp)
    elif group == "W7":
        w7(put, jax, jnp)
    return res


def w1(put, ne, jax_time):
    for n in [MEGA, 16 * MEGA, 64 * MEGA]:
        a, b, c, d = (uniform(n, s) for s in (1, 2, 3, 4))
        r = reps_for(20 * n)
        size = f"{n // MEGA}M"
        put("W1", size, "numpy", timeit(lambda: (a * b + c) * d - a, r))
        put("W1", size, "numexpr", timeit(lambda: ne.evaluate("(a*b + c)*d - a", local_dict={"a": a, "b": b, "c": c, "d": d}), r))
        put("W1", size, "jax.jit", jax_time(lambda a, b, c, d: (a * b + c) * d - a, [a, b, c, d], r))
        del a, b, c, d


def w2(put, ne, jax_time, jnp):
    x = uniform(16 * MEGA, 5) * 4
    r = reps_for(8 * 16 * MEGA)
    put("W2", "16M", "numpy", timeit(lambda: np.exp(-x * x) * np.sin(x) + np.tanh(x), r))
    put("W2", "16M", "numexpr", timeit(lambda: ne.evaluate("exp(-x*x)*sin(x) + tanh(x)", local_dict={"x": x}), r))
    put("W2", "16M", "jax.jit", jax_time(lambda x: jnp.exp(-x * x) * jnp.sin(x) + jnp.tanh(x), [x], r))
    del x


def w3(put, ne, jax_time):
    A, row, col = uniform((4096, 4096), 6), uniform(4096, 7), uniform((4096, 1), 8)
    r = reps_for(2 * 4 * 4096 * 4096)
    put("W3", "4096x4096", "numpy", timeit(lambda: A + row + col, r))
    put("W3", "4096x4096", "numexpr", timeit(lambda: ne.evaluate("A + row + col", local_dict={"A": A, "row": row, "col": col}), r))
    put("W3", "4096x4096", "jax.jit", jax_time(lambda A, r_, c_: A + r_ + c_, [A, row, col], r))
    del A


def w4(put, ne, jax_time, jax, jnp):
    a, b = uniform(16 * MEGA, 9), uniform(16 * MEGA, 10)
    r = reps_for(8 * 16 * MEGA)
    put("W4_sum_ab", "16M", "numpy", timeit(lambda: np.dot(a, b), r))
    put("W4_sum_ab", "16M", "numexpr", timeit(lambda: ne.evaluate("sum(a*b)", local_dict={"a": a, "b": b}), r))
    put("W4_sum_ab", "16M", "jax.jit", jax_time(lambda a, b: jnp.sum(a * b), [a, b], r))
    m = uniform((4096, 4096), 11)
    put("W4_row_sums", "4096x4096", "numpy", timeit(lambda: m.sum(axis=-1), r))
    put("W4_row_sums", "4096x4096", "jax.jit", jax_time(lambda m: jnp.sum(m, axis=-1), [m], r))
    def np_softmax(s):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    for rows, cols, salt in [(4096, 1024, 12), (1024, 16384, 21)]:
        s = uniform((rows, cols), salt)
        r = reps_for(8 * rows * cols)
        put("W4_softmax_rows", f"{rows}x{cols}", "numpy", timeit(lambda: np_softmax(s), r))
        put("W4_softmax_rows", f"{rows}x{cols}", "jax.jit",
            jax_time(lambda s: jax.nn.softmax(s, axis=-1), [s], r))


def w5(put, jax_time, jax):
    for n in [1024, 2048]:
        a, b = uniform((n, n), 13), uniform((n, n), 14)
        put("W5_sgemm", f"{n}^3", "numpy", timeit(lambda: a @ b, 11))
        put("W5_sgemm", f"{n}^3", "jax.jit", jax_time(lambda a, b: a @ b, [a, b], 11))
    x, w, bias = uniform((1024, 1024), 15), uniform((1024, 1024), 16), uniform(1024, 17)
    put("W5_relu_xw_b", "1024^2", "numpy", timeit(lambda: np.maximum(x @ w + bias, 0), 11))
    put("W5_relu_xw_b", "1024^2", "jax.jit",
        jax_time(lambda x, w, b: jax.nn.relu(x @ w + b), [x, w, bias], 11))


def w6(put, jax, jnp):
    x, w, bias = uniform((64, 64), 20), uniform((64, 64), 18), uniform(64, 19)
    iters = 1000 if QUICK else 10000

    def loop_np():
        for _ in range(iters):
            x @ w + bias

    jf = jax.jit(lambda x, w, b: x @ w + b)
    jx, jw, jb = jnp.asarray(x), jnp.asarray(w), jnp.asarray(bias)

    def loop_jax():
        for _ in range(iters):
            jf(jx, jw, jb).block_until_ready()

    put("W6", "64x64x10000", "numpy", timeit(loop_np, 5) / iters)
    put("W6", "64x64x10000", "jax.jit", timeit(loop_jax, 5) / iters)


def w7(put, jax, jnp):
    # W7: one SGD step of a 784-512-10 MLP, batch 256 (jax.jit of value_and_grad + update).
    xb = uniform((256, 784), 21)
    yb = np.eye(10, dtype=np.float32)[(np.arange(256) * 7) % 10]
    params = [uniform((784, 512), 22) * 0.05, np.zeros(512, np.float32),
              uniform((512, 10), 23) * 0.05, np.zeros(10, np.float32)]

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p[0] + p[1])
        logits = h @ p[2] + p[3]
        return -jnp.sum(jax.nn.log_softmax(logits, axis=-1) * y) / x.shape[0]

    @jax.jit
    def step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return [pi - 0.01 * gi for pi, gi in zip(p, g)], loss

    def np_step(p, x, y):
        # The same step with hand-written gradients.
        w1, b1, w2, b2 = p
        z1 = x @ w1 + b1
        h = np.maximum(z1, 0)
        logits = h @ w2 + b2
        m = logits.max(axis=1, keepdims=True)
        e = np.exp(logits - m)
        s = e.sum(axis=1, keepdims=True)
        n = x.shape[0]
        loss = -((logits - m - np.log(s)) * y).sum() / n
        dlogits = (e / s * y.sum(axis=1, keepdims=True) - y) / n
        dw2, db2 = h.T @ dlogits, dlogits.sum(axis=0)
        dz1 = (dlogits @ w2.T) * (z1 > 0)
        dw1, db1 = x.T @ dz1, dz1.sum(axis=0)
        return [pi - np.float32(0.01) * gi for pi, gi in zip(p, [dw1, db1, dw2, db2])], loss

    put("W7_mlp_step", "784-512-10 b256", "numpy", timeit(lambda: np_step(params, xb, yb), 101))
    jp = [jnp.asarray(p) for p in params]
    jxb, jyb = jnp.asarray(xb), jnp.asarray(yb)
    put("W7_mlp_step", "784-512-10 b256", "jax.jit",
        timeit(lambda: jax.block_until_ready(step(jp, jxb, jyb)), 101))



def numpy_sgemm_gflops():
    """numpy's BLAS sgemm at 2048³, GFLOP/s."""
    a, b = uniform((2048, 2048), 13), uniform((2048, 2048), 14)
    return 2 * 2048**3 / timeit(lambda: a @ b, 11) / 1e9


def stream_bound(here):
    """The C triad and W1 by hand on every core with streaming stores (stream.c), GB/s:
    (triad best, triad median, W1 best)."""
    march = "x86-64-v3" if ISA == "avx2" else "native"
    exe = os.path.join(here, ".target-default", f"stream-{march}")
    src = os.path.join(here, "stream.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        subprocess.run(["gcc", "-O3", f"-march={march}", "-fopenmp", src, "-o", exe], check=True)
    out = json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)
    return out["triad_best_gbs"], out["triad_median_gbs"], out["w1_best_gbs"]


def machine():
    """CPU model, ISA level (x86-64-v1..v4 from the flags; the architecture elsewhere), caches."""
    info = open("/proc/cpuinfo").read()
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    flags = set(next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), []))
    if "avx512f" in flags and {"avx512bw", "avx512dq", "avx512vl"} <= flags:
        isa = "x86-64-v4 (AVX-512)"
    elif {"avx2", "fma", "bmi2"} <= flags:
        isa = "x86-64-v3 (AVX2, FMA)"
    elif "sse4_2" in flags:
        isa = "x86-64-v2 (SSE4.2)"
    elif flags:
        isa = "x86-64 (SSE2)"
    else:
        isa = os.uname().machine
    family = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("cpu family")), "?")
    mdl = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model\t")), "?")
    caches = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    for idx in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if not idx.startswith("index"):
            continue
        rd = lambda f: open(os.path.join(base, idx, f)).read().strip()
        kind = rd("type")
        if kind != "Instruction":
            caches.append(f"L{rd('level')} {rd('size')}")
    held = ""
    if ISA == "avx2":
        held = f"; every side held to x86-64-v3 (AVX2): {' '.join(f'{k}={v}' for k, v in AVX2_ENV.items())}, " \
               "kiln's native build and stream.c at x86-64-v3"
    return f"{model} (family {family}, model {mdl}), {isa}, {os.cpu_count()} cores, caches {' / '.join(caches)}{held}"


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(target_dir, rustflags):
    """Builds kiln's bench binary into `target_dir` with `rustflags`; returns its env."""
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = target_dir
    if rustflags:
        env["RUSTFLAGS"] = rustflags
    else:
        env.pop("RUSTFLAGS", None)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln-benches", "--bin", "kiln-bench"],
                   cwd=ROOT, env=env, check=True)
    return env


def kiln(target_dir, env, group):
    """{(workload, size): seconds} of kiln's bench binary on one workload group."""
    args = [os.path.join(target_dir, "release", "kiln-bench"), "--only", group] + (["--quick"] if QUICK else [])
    out = subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    res = {}
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if "median_ms" in j:
            res[(j["workload"], j["size"])] = j["median_ms"] / 1e3
    return res


def fmt_t(secs):
    if secs is None:
        return "-"
    if secs < 1e-3:
        return f"{secs * 1e6:.1f} µs"
    return f"{secs * 1e3:.2f} ms"


def rate(w, size, secs):
    """GB/s (elementwise/reductions) or GFLOP/s (matmul, MLP) for a time."""
    if secs is None:
        return ""
    n = {"1M": MEGA, "16M": 16 * MEGA, "64M": 64 * MEGA}.get(size)
    if w == "W1":
        return f"{20 * n / secs / 1e9:.1f} GB/s"
    if w in ("W2", "W4_sum_ab"):
        return f"{8 * 16 * MEGA / secs / 1e9:.1f} GB/s"
    if w == "W3":
        return f"{8 * 4096 * 4096 / secs / 1e9:.1f} GB/s"
    if w == "W4_row_sums":
        return f"{4 * 4096 * 4096 / secs / 1e9:.1f} GB/s"
    if w == "W4_softmax_rows":
        rows, cols = (int(v) for v in size.split("x"))
        return f"{8 * rows * cols / secs / 1e9:.1f} GB/s"
    if w == "W5_sgemm":
        k = int(size.split("^")[0])
        return f"{2 * k**3 / secs / 1e9:.0f} GFLOP/s"
    if w == "W5_relu_xw_b":
        return f"{2 * 1024**3 / secs / 1e9:.0f} GFLOP/s"
    if w == "W6":
        return f"{2 * 64**3 / secs / 1e9:.0f} GFLOP/s"
    if w == "W7_mlp_step":
        return f"{6 * 256 * (784 * 512 + 512 * 10) / secs / 1e9:.0f} GFLOP/s"
    return ""


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def spread(values):
    """'median [min–max]' of a list of ratios."""
    if not values:
        return "-"
    m = statistics.median(values)
    if len(values) == 1:
        return f"{m:.2f}"
    return f"{m:.2f} [{min(values):.2f}–{max(values):.2f}]"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    rounds = 1 if QUICK else int(arg("--rounds", "3"))
    groups = arg("--only", "W1,W2,W3,W4,W5,W6,W7").split(",")
    native = "x86-64-v3" if ISA == "avx2" else "native"
    dirs = {"default": os.path.join(here, ".target-default"), "native": os.path.join(here, f".target-{native}")}
    envs = {"default": build(dirs["default"], None), "native": build(dirs["native"], f"-C target-cpu={native}")}
    times = {}   # (workload, size) -> {who: [seconds per round]}
    ratios = {}  # (workload, size) -> {peer: [peer / kiln default per round]}
    streams = []
    for rnd in range(rounds):
        streams.append(stream_bound(here))
        for group in groups:
            runs = ["kiln", "peers"]
            if rnd % 2 == 1:
                runs.reverse()  # A B, then B A: noise lands on both sides
            got = {}
            for who in runs:
                if who == "kiln":
                    # the two builds alternate too (a fixed order once favoured the second)
                    for build_ in (["default", "native"] if rnd % 2 == 0 else ["native", "default"]):
                        got[build_] = kiln(dirs[build_], envs[build_], group)
                else:
                    got["peers"] = peers(group)
            for key, secs in got["default"].items():
                t = times.setdefault(key, {})
                t.setdefault("kiln", []).append(secs)
                if key in got["native"]:
                    t.setdefault("kiln native", []).append(got["native"][key])
                for peer, ps in got["peers"].get(key, {}).items():
                    t.setdefault(peer, []).append(ps)
                    ratios.setdefault(key, {}).setdefault(peer, []).append(ps / secs)
                if key in got["native"]:
                    ratios.setdefault(key, {}).setdefault("default/native", []).append(secs / got["native"][key])
    print(f"machine: {machine()}")
    print(f"numpy {np.__version__}; {rounds} interleaved round(s); ratios: median [range] over the rounds")
    best = [b for b, _, _ in streams]
    w1_c = [w for _, _, w in streams]
    print(f"limits (same run): C STREAM triad, {os.cpu_count()} threads, streaming stores: "
          f"{statistics.median(best):.1f} GB/s (best of 11 per round; rounds {min(best):.1f}–{max(best):.1f}); "
          f"numpy sgemm 2048³ {numpy_sgemm_gflops():.0f} GFLOP/s")
    w1 = times.get(("W1", "64M"), {}).get("kiln")
    if w1:
        gbs = [20 * 64 * MEGA / t / 1e9 for t in w1]
        print(f"W1 64M: kiln {statistics.median(gbs):.1f} GB/s = "
              f"{100 * statistics.median(gbs) / statistics.median(best):.0f}% of the triad bound, "
              f"{100 * statistics.median(gbs) / statistics.median(w1_c):.0f}% of W1 by hand in C "
              f"({statistics.median(w1_c):.1f} GB/s, best of 11 per round)")
    print()
    hdr = ["workload", "size", "kiln", "kiln rate", "numpy/kiln", "numexpr/kiln", "jax/kiln", "default/native"]
    rows = []
    for key, t in times.items():
        w, size = key
        k = statistics.median(t["kiln"])
        r = ratios.get(key, {})
        rows.append([w, size, fmt_t(k), rate(w, size, k), spread(r.get("numpy", [])),
                     spread(r.get("numexpr", [])), spread(r.get("jax.jit", [])),
                     spread(r.get("default/native", []))])
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "| " + " | ".join(str(c).ljust(wd) for c, wd in zip(r, widths)) + " |"
    print(line(hdr))
    print("|" + "|".join("-" * (wd + 2) for wd in widths) + "|")
    for r in rows:
        print(line(r))
    print()
    print("ratios: peer time / kiln time per round (> 1: kiln faster); default/native: default build"
          " time / native build time (> 1: native faster).")


if __name__ == "__main__":
    main()
