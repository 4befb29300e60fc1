//! # kiln for numpy users
//!
//! kiln follows numpy's semantics (broadcasting, promotion, slicing, reductions) with Rust
//! syntax. The big difference: kiln is **lazy**. `a + b` records work; values are computed
//! on `eval`, `to_vec`, `item`, printing, or `kiln::eval(&[..])` for several arrays at once.
//!
//! | numpy | kiln |
//! |---|---|
//! | `np.array([1., 2.], dtype=np.float32)` | `Array::from_vec(vec![1.0f32, 2.0], &[2])?` |
//! | `np.zeros((2, 3))`, `np.ones`, `np.full` | `Array::zeros(&[2, 3], DType::F64)`, `Array::ones`, `Array::full(&[2, 3], 7, DType::F32)` |
//! | `np.arange(0, 10, 2)` | `Array::arange(0.0, 10.0, 2.0, DType::I64)?` |
//! | `np.linspace(0, 1, 5)` | `Array::linspace(0.0, 1.0, 5, DType::F64)?` |
//! | `np.eye(3)` | `Array::eye(3, None, DType::F64)` |
//! | `rng.uniform(lo, hi, size)` / `rng.normal(m, s, size)` | `Array::uniform(&size, lo, hi, seed, DType::F32)?` / `Array::normal(..)` |
//! | `a.shape`, `a.dtype`, `a.ndim`, `a.size` | `a.shape()`, `a.dtype()`, `a.ndim()`, `a.size()` |
//! | `a + b`, `a * 2.0`, `2.0 - a`, `-a` | `&a + &b`, `&a * 2.0`, `2.0 - &a`, `-&a` |
//! | `a / b` (true division), `a // b`, `a % b`, `a ** b` | `&a / &b`, `a.floor_div(&b)`, `&a % &b`, `a.pow(&b)` |
//! | `np.maximum(a, b)`, `np.minimum(a, 0)` | `a.maximum(&b)`, `a.minimum(0)` |
//! | `a == b`, `a < 0` | `a.eq(&b)`, `a.lt(0)` (also `ne le gt ge`) |
//! | `np.logical_and(a, b)`, `~mask` | `a.logical_and(&b)`, `!&mask` or `mask.logical_not()` |
//! | `np.where(c, a, b)` | `kiln::where_(&c, &a, &b)?` or `Array::where_(&c, &a, &b)` |
//! | `np.clip(a, 0, 1)` | `a.clip(0.0, 1.0)` |
//! | `a.astype(np.int32)` | `a.cast(DType::I32)` |
//! | `np.exp(a)`, `np.sqrt(a)`, `np.tanh(a)`, ... | `a.exp()`, `a.sqrt()`, `a.tanh()`, ... (also `sigmoid relu rsqrt recip square`) |
//! | `np.round(a)` (half to even) | `a.round()` |
//! | `a.reshape(2, -1)` | `a.reshape(&[2, -1])` |
//! | `a.T`, `a.transpose(2, 0, 1)`, `np.swapaxes(a, 0, 1)` | `a.transpose()`, `a.permute(&[2, 0, 1])`, `a.try_swapaxes(0, 1)?` |
//! | `np.expand_dims(a, 0)`, `a.squeeze()` | `a.expand_dims(0)`, `a.squeeze(None)` |
//! | `np.broadcast_to(a, (4, 3))` | `a.broadcast_to(&[4, 3])` |
//! | `a[1:3, ::2]`, `a[-1]`, `a[::-1]`, `a[:, None]` | `a.slice(s![1..3, ..;2])`, `a.slice(s![-1])`, `a.slice(s![..;-1])`, `a.slice(s![.., NEW])` |
//! | `a[1, 2]` (a scalar) | `a.at::<f32>(&[1, 2])?` |
//! | `np.concatenate([a, b], axis=0)`, `np.stack([a, b])` | `Array::concat(&[&a, &b], 0)`, `Array::stack(&[&a, &b], 0)` |
//! | `a.sum()`, `a.sum(axis=1, keepdims=True)` | `a.sum(None, false)`, `a.sum(Some(&[1]), true)` |
//! | `a.mean(axis=(0, 2))`, `a.max()`, `a.prod()` | `a.mean(Some(&[0, 2]), false)`, `a.max(None, false)`, `a.prod(None, false)` |
//! | `a.argmax()`, `a.argmax(axis=-1)` | `a.argmax(None, false)`, `a.argmax(Some(-1), false)` |
//! | `scipy.special.logsumexp(a, axis=-1)` | `a.logsumexp(Some(&[-1]), false)` |
//! | `scipy.special.softmax(a, axis=-1)`, `log_softmax` | `a.softmax(-1)`, `a.log_softmax(-1)` |
//! | `a @ b`, `np.matmul(a, b)`, `np.dot(a, b)` | `a.matmul(&b)`, `a.dot(&b)` |
//! | `np.take(a, idx, axis=0)` (embedding lookup) | `a.take(&idx, 0)` |
//! | `jax.nn.one_hot(idx, n)` | `idx.one_hot(n, DType::F32)` |
//! | `jax.lax.top_k(a, k)` | `let (values, indices) = a.top_k(k);` |
//! | `a.tolist()` / `a.item()` | `a.to_vec::<f32>()?` / `a.item::<f32>()?` |
//! | `print(a)` | `println!("{a}")` |
//! | `np.load("a.npy")` / `np.save("a.npy", a)` | `kiln_io::read_npy("a.npy")?` / `kiln_io::write_npy("a.npy", &a)?` (crate `kiln-io`) |
//! | `np.load("w.npz")["w"]` / `np.savez("w.npz", w=w)` | `kiln_io::read_npz("w.npz")?["w"]` / `kiln_io::write_npz("w.npz", &[("w", &w)])?` |
//! | `safetensors.numpy.load_file(p)` / `save_file({"w": w}, p)` | `kiln_io::read_safetensors(p)?` (memory-mapped) / `kiln_io::write_safetensors(p, &[("w", &w)], &[])?` |
//! | `np.asarray(ndarray)` both ways | `Array::from(nd)` / `a.to_ndarray::<f32>()?` (feature `ndarray`) |
//!
//! ## Where kiln deliberately differs from numpy
//! - **Integer division by zero** (`//`, `%`) is an error at evaluation naming the op and the
//!   dividend; numpy returns 0 with a warning. Integer `**` with a negative exponent is an
//!   error in both.
//! - **`take` out of range** is an error at evaluation naming the index (numpy raises too).
//! - **Float → int casts** of NaN, inf and out-of-range values saturate (NaN → 0); numpy's
//!   result is platform-defined.
//! - **Float functions of `bool` arrays** (`exp`, `sqrt`, ...) and `neg`/`abs`/`sign` of bools
//!   are errors (cast first); numpy computes them in `float16`/`int8`, dtypes kiln does not have.
//!   `floor_divide`, `remainder` and `power` of two bool arrays are errors likewise.
//! - **`recip`** of integers gives `f64` (numpy's `reciprocal` truncates to an integer).
//! - **`arange`** with an integer dtype and a fractional `start` or `step` gives
//!   `start + i * step` truncated toward zero; numpy steps by `dtype(start + step) -
//!   dtype(start)` (`np.arange(0.5, 5, 1.5, dtype=int)` is `[0, 2, 4]`, kiln's `[0, 2, 3]`).
//! - **`one_hot`** of an out-of-range index gives a zero row (as `jax.nn.one_hot`).
//! - **`top_k`** treats NaN as the largest value and breaks ties by the lower index.
//! - **Reductions of `f32`** are accumulated at least as accurately as numpy's pairwise sums;
//!   results can differ in the last bits.
//! - **Scalars**: a bare Rust scalar is *weak* (NEP 50, numpy 2): `f32_array * 2.0` is `f32`,
//!   `i32_array + 1` is `i32`; an integer scalar that does not fit (`i32_array + (1 << 40)`)
//!   is an error, as in numpy 2. `Array::scalar(2.0f64)` is a *strong* rank-0 array.
//! - **Printing** follows numpy's `str()` closely but not to the last character in every
//!   corner (line breaking of very wide rows, precision of summarised arrays).
//!
//! Depends on nothing: documentation only.
