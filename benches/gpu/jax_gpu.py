"""jax.jit on the GPU for the workloads kiln-bench runs (W1-W7, same sizes and data shapes),
plus the GPU's limits measured in the same run: the bandwidth of a streaming elementwise pass
(`x + 1` over 1 GiB: read and write) and f32 matrix-product throughput at 8192³ with
`precision=HIGHEST` (no TF32), the bounds W1 and W5 are quoted against.

Inputs are placed on the GPU once (`jax.device_put`), as kiln's resident values are; each timed
call computes a fresh result and waits for it (`block_until_ready`). One JSON line per figure,
medians of repeated calls after a warm-up. Run by `benches/gpu/run.sh`.
"""

import json
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

MEGA = 1 << 20


def timeit(f, reps):
    f()
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts), max(ts)


def uniform(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def emit(workload, size, t, **extra):
    med, lo, hi = t
    line = {"workload": workload, "size": size, "peer": "jax.jit", "device": str(jax.devices()[0]),
            "median_ms": round(med * 1e3, 4), "min_ms": round(lo * 1e3, 4), "max_ms": round(hi * 1e3, 4)}
    line.update(extra)
    print(json.dumps(line), flush=True)


def run(workload, size, f, args, reps=51, nbytes=None, flops=None):
    jf = jax.jit(f)
    dargs = [jax.device_put(a) for a in args]
    t = timeit(lambda: jax.block_until_ready(jf(*dargs)), reps)
    extra = {}
    if nbytes:
        extra["gb_per_s"] = round(nbytes / t[0] / 1e9, 1)
    if flops:
        extra["gflop_per_s"] = round(flops / t[0] / 1e9, 1)
    emit(workload, size, t, **extra)


def main():
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    want = lambda w: only is None or w in only
    if want("bounds"):
        n = 256 * MEGA
        run("bound_stream", "256M", lambda x: x + 1.0, [uniform(n, 0)], reps=21, nbytes=8 * n)
        n = 8192
        a, b = uniform((n, n), 1), uniform((n, n), 2)
        run("bound_sgemm", "8192^3", lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST),
            [a, b], reps=11, flops=2 * n**3)
    if want("W1"):
        for n in [MEGA, 16 * MEGA, 64 * MEGA]:
            args = [uniform(n, s) for s in (1, 2, 3, 4)]
            run("W1", f"{n // MEGA}M", lambda a, b, c, d: (a * b + c) * d - a, args, nbytes=20 * n)
    if want("W2"):
        x = uniform(16 * MEGA, 5) * 4
        run("W2", "16M", lambda x: jnp.exp(-x * x) * jnp.sin(x) + jnp.tanh(x), [x], nbytes=8 * 16 * MEGA)
    if want("W3"):
        args = [uniform((4096, 4096), 6), uniform(4096, 7), uniform((4096, 1), 8)]
        run("W3", "4096x4096", lambda A, r, c: A + r + c, args, nbytes=8 * 4096 * 4096)
    if want("W4"):
        a, b = uniform(16 * MEGA, 9), uniform(16 * MEGA, 10)
        run("W4_sum_ab", "16M", lambda a, b: jnp.sum(a * b), [a, b], nbytes=8 * 16 * MEGA)
        run("W4_row_sums", "4096x4096", lambda m: jnp.sum(m, axis=-1), [uniform((4096, 4096), 11)],
            nbytes=4 * 4096 * 4096)
        for rows, cols, salt in [(4096, 1024, 12), (1024, 16384, 21)]:
            run("W4_softmax_rows", f"{rows}x{cols}", lambda s: jax.nn.softmax(s, axis=-1),
                [uniform((rows, cols), salt)], nbytes=8 * rows * cols)
    if want("W5"):
        for n in [1024, 2048, 4096]:
            run("W5_sgemm", f"{n}^3", lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST),
                [uniform((n, n), 13), uniform((n, n), 14)], reps=21, flops=2 * n**3)
        run("W5_relu_xw_b", "1024^2",
            lambda x, w, b: jax.nn.relu(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST) + b),
            [uniform((1024, 1024), 15), uniform((1024, 1024), 16), uniform(1024, 17)], reps=21,
            flops=2 * 1024**3)
    if want("W6"):
        jf = jax.jit(lambda x, w, b: jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST) + b)
        x, w, b = (jax.device_put(uniform(s, i)) for s, i in (((64, 64), 20), ((64, 64), 18), (64, 19)))
        iters = 10000

        def loop():
            for _ in range(iters):
                jf(x, w, b).block_until_ready()

        med, lo, hi = timeit(loop, 5)
        emit("W6", "64x64x10000", (med / iters, lo / iters, hi / iters), us_per_iter=round(med / iters * 1e6, 2))
    if want("W7"):
        xb = uniform((256, 784), 21)
        yb = np.eye(10, dtype=np.float32)[(np.arange(256) * 7) % 10]
        params = [uniform((784, 512), 22) * 0.05, np.zeros(512, np.float32),
                  uniform((512, 10), 23) * 0.05, np.zeros(10, np.float32)]
        hi = jax.lax.Precision.HIGHEST

        def loss_fn(p, x, y):
            h = jax.nn.relu(jnp.matmul(x, p[0], precision=hi) + p[1])
            logits = jnp.matmul(h, p[2], precision=hi) + p[3]
            return -jnp.sum(jax.nn.log_softmax(logits, axis=-1) * y) / x.shape[0]

        @jax.jit
        def step(p, x, y):
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            return [pi - 0.01 * gi for pi, gi in zip(p, g)], loss

        state = {"p": [jax.device_put(p) for p in params]}
        jx, jy = jax.device_put(xb), jax.device_put(yb)

        def one():
            # Parameters stay on the device and are replaced by the step's result, as in a
            # training loop; only the loss comes back.
            state["p"], loss = step(state["p"], jx, jy)
            float(loss)

        t = timeit(one, 201)
        emit("W7_mlp_step", "784-512-10 b256", t, steps_per_s=round(1 / t[0], 1))


if __name__ == "__main__":
    main()
