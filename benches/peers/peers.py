"""Side-by-side benchmark: kiln (default build and -C target-cpu=native) against numpy,
numexpr and jax.jit on the workloads of design.md section 6, plus the machine's limits (a
STREAM-style triad and numpy's BLAS sgemm). Run through ./run.sh, which makes the venv.

Every peer times the same thing kiln's bench binary times: a fresh result of the whole
expression per call (inputs prepared beforehand), median over repeated runs after a warm-up.
Prints one table; ratios are peer time / kiln time (> 1: kiln is faster).
"""

import json
import os
import statistics
import subprocess
import sys
import time

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


def peers():
    """{(workload, size): {peer: seconds}} and the machine limits."""
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

    for n in [MEGA, 16 * MEGA, 64 * MEGA]:
        a, b, c, d = (uniform(n, s) for s in (1, 2, 3, 4))
        r = reps_for(20 * n)
        size = f"{n // MEGA}M"
        put("W1", size, "numpy", timeit(lambda: (a * b + c) * d - a, r))
        put("W1", size, "numexpr", timeit(lambda: ne.evaluate("(a*b + c)*d - a", local_dict={"a": a, "b": b, "c": c, "d": d}), r))
        put("W1", size, "jax.jit", jax_time(lambda a, b, c, d: (a * b + c) * d - a, [a, b, c, d], r))
        del a, b, c, d

    x = uniform(16 * MEGA, 5) * 4
    r = reps_for(8 * 16 * MEGA)
    put("W2", "16M", "numpy", timeit(lambda: np.exp(-x * x) * np.sin(x) + np.tanh(x), r))
    put("W2", "16M", "numexpr", timeit(lambda: ne.evaluate("exp(-x*x)*sin(x) + tanh(x)", local_dict={"x": x}), r))
    put("W2", "16M", "jax.jit", jax_time(lambda x: jnp.exp(-x * x) * jnp.sin(x) + jnp.tanh(x), [x], r))
    del x

    A, row, col = uniform((4096, 4096), 6), uniform(4096, 7), uniform((4096, 1), 8)
    r = reps_for(2 * 4 * 4096 * 4096)
    put("W3", "4096x4096", "numpy", timeit(lambda: A + row + col, r))
    put("W3", "4096x4096", "numexpr", timeit(lambda: ne.evaluate("A + row + col", local_dict={"A": A, "row": row, "col": col}), r))
    put("W3", "4096x4096", "jax.jit", jax_time(lambda A, r_, c_: A + r_ + c_, [A, row, col], r))
    del A

    a, b = uniform(16 * MEGA, 9), uniform(16 * MEGA, 10)
    r = reps_for(8 * 16 * MEGA)
    put("W4_sum_ab", "16M", "numpy", timeit(lambda: np.dot(a, b), r))
    put("W4_sum_ab", "16M", "numexpr", timeit(lambda: ne.evaluate("sum(a*b)", local_dict={"a": a, "b": b}), r))
    put("W4_sum_ab", "16M", "jax.jit", jax_time(lambda a, b: jnp.sum(a * b), [a, b], r))
    m = uniform((4096, 4096), 11)
    put("W4_row_sums", "4096x4096", "numpy", timeit(lambda: m.sum(axis=-1), r))
    put("W4_row_sums", "4096x4096", "jax.jit", jax_time(lambda m: jnp.sum(m, axis=-1), [m], r))
    s = uniform((4096, 1024), 12)

    def np_softmax(s):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    put("W4_softmax_rows", "4096x1024", "numpy", timeit(lambda: np_softmax(s), r))
    put("W4_softmax_rows", "4096x1024", "jax.jit", jax_time(lambda s: jax.nn.softmax(s, axis=-1), [s], r))

    for n in [1024, 2048]:
        a, b = uniform((n, n), 13), uniform((n, n), 14)
        put("W5_sgemm", f"{n}^3", "numpy", timeit(lambda: a @ b, 11))
        put("W5_sgemm", f"{n}^3", "jax.jit", jax_time(lambda a, b: a @ b, [a, b], 11))
    x, w, bias = uniform((1024, 1024), 15), uniform((1024, 1024), 16), uniform(1024, 17)
    put("W5_relu_xw_b", "1024^2", "numpy", timeit(lambda: np.maximum(x @ w + bias, 0), 11))
    put("W5_relu_xw_b", "1024^2", "jax.jit",
        jax_time(lambda x, w, b: jax.nn.relu(x @ w + b), [x, w, bias], 11))

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

    # Machine limits: STREAM-style triad a = b + s*c over 64M f32 (output reused: numpy's
    # `out=` with a temporary-free two-step), and numpy's BLAS sgemm.
    n = 64 * MEGA
    b, c = uniform(n, 30), uniform(n, 31)
    out = np.empty_like(b)

    def triad():
        np.multiply(c, np.float32(3.0), out=out)
        np.add(out, b, out=out)

    t = timeit(triad, 7)
    # Bytes a real triad moves (read b, c; write a): 12 bytes per element.
    limits = {"triad_numpy_gbs": 12 * n / t / 1e9}
    ne.set_num_threads(os.cpu_count())
    t = timeit(lambda: ne.evaluate("b + 3*c", local_dict={"b": b, "c": c}, out=out), 7)
    limits["triad_numexpr_gbs"] = 12 * n / t / 1e9
    a, b = uniform((2048, 2048), 13), uniform((2048, 2048), 14)
    limits["sgemm_numpy_gflops"] = 2 * 2048**3 / timeit(lambda: a @ b, 11) / 1e9
    return res, limits


def kiln(target_dir, rustflags):
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = target_dir
    if rustflags:
        env["RUSTFLAGS"] = rustflags
    else:
        env.pop("RUSTFLAGS", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kiln-benches"],
                   cwd=root, env=env, check=True)
    args = [os.path.join(target_dir, "release", "kiln-bench"), "--only",
            "triad,W1,W2,W3,W4,W5,W6,W7"] + (["--quick"] if QUICK else [])
    out = subprocess.run(args, cwd=root, env=env, check=True, capture_output=True, text=True)
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
        return f"{8 * 4096 * 1024 / secs / 1e9:.1f} GB/s"
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


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = kiln(os.path.join(here, ".target-default"), None)
    native = kiln(os.path.join(here, ".target-native"), "-C target-cpu=native")
    res, limits = peers()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; numpy {np.__version__}")
    print(f"limits: STREAM-style triad {limits['triad_numexpr_gbs']:.1f} GB/s (numexpr, 2 threads), "
          f"{limits['triad_numpy_gbs']:.1f} GB/s (numpy, 1 thread); numpy sgemm 2048³ "
          f"{limits['sgemm_numpy_gflops']:.0f} GFLOP/s")
    print()
    hdr = ["workload", "size", "kiln", "kiln rate", "kiln native", "numpy", "numexpr", "jax.jit",
           "numpy/kiln", "numexpr/kiln", "jax/kiln", "default/native"]
    rows = []
    for key in default:
        w, size = key
        k, kn = default[key], native.get(key)
        p = res.get(key, {})

        def ratio(x):
            return f"{x / k:.2f}" if x else "-"

        rows.append([w, size, fmt_t(k), rate(w, size, k), fmt_t(kn), fmt_t(p.get("numpy")),
                     fmt_t(p.get("numexpr")), fmt_t(p.get("jax.jit")), ratio(p.get("numpy")),
                     ratio(p.get("numexpr")), ratio(p.get("jax.jit")),
                     f"{k / kn:.2f}" if kn else "-"])
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    line = lambda r: "| " + " | ".join(str(c).ljust(wd) for c, wd in zip(r, widths)) + " |"
    print(line(hdr))
    print("|" + "|".join("-" * (wd + 2) for wd in widths) + "|")
    for r in rows:
        print(line(r))
    print()
    print("ratios: peer time / kiln time (> 1: kiln faster); default/native: default build time /"
          " native build time (> 1: native faster).")


if __name__ == "__main__":
    main()
