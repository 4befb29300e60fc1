//! Quickstart: numpy-like arithmetic with kiln on the default CPU backend.
//!
//! Run with `cargo run -p kiln --example quickstart`.

use kiln::{s, Array, DType};

fn main() -> Result<(), kiln::Error> {
    // Arrays from data (moved in, never copied) and from constructors.
    let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let row = Array::from_vec(vec![10.0f32, 20.0, 30.0], &[3])?;
    println!("a =\n{a}\n");

    // Broadcasting, weak scalars (f32 stays f32), elementwise functions. Nothing runs yet:
    // shapes and dtypes are known at once.
    let b = (&a * 2.0 + &row).sqrt();
    println!(
        "b = sqrt(a*2 + row): shape {:?}, dtype {}",
        b.shape(),
        b.dtype()
    );
    println!("{b}\n"); // printing evaluates

    // Reductions, softmax, matmul.
    println!("a.sum(axis=1)      = {}", a.sum(Some(&[1]), false));
    println!("a.mean()           = {}", a.mean(None, false));
    println!("a.argmax(axis=-1)  = {}", a.argmax(Some(-1), false));
    println!("softmax(a, axis=-1) =\n{}", a.softmax(-1));
    println!("a @ a.T =\n{}\n", a.matmul(&a.transpose()));

    // Slicing with numpy's rules: a[:, ::-1], a[-1, 1:].
    println!("a[:, ::-1] =\n{}", a.slice(s![.., ..;-1]));
    println!("a[-1, 1:]  = {}\n", a.slice(s![-1, 1..]));

    // Integer arrays, comparisons, where, take, top_k.
    let ids = Array::arange(0.0, 6.0, 1.0, DType::I64)?;
    let even = ids.rem(2).eq(0);
    println!("ids            = {ids}");
    println!("where(even, ids, -1) = {}", Array::where_(&even, &ids, -1));
    let table = Array::eye(4, None, DType::F32);
    let picked = table.take(&Array::from_vec(vec![3i64, 0], &[2])?, 0);
    println!("eye(4)[[3, 0]] =\n{picked}");
    let (values, indices) = row.top_k(2);
    println!("top_k(row, 2)  = {values} at {indices}\n");

    // Several outputs evaluated in one pass: the shared exp() is computed once.
    let e = a.exp();
    let (total, peak) = (e.sum(None, false), e.max(None, false));
    kiln::eval(&[&total, &peak])?;
    println!(
        "sum(exp(a)) = {}, max(exp(a)) = {}",
        total.item::<f32>()?,
        peak.item::<f32>()?
    );

    // Errors name the op, both shapes and a fix, and are raised when the expression is built.
    let bad = Array::zeros(&[4], DType::F32);
    match a.try_add(&bad) {
        Err(e) => println!("\nerror, as expected: {e}"),
        Ok(_) => unreachable!(),
    }
    Ok(())
}
