//! Gradients: `grad`, `value_and_grad`, `vjp` and `stop_gradient`, as a transform of the lazy
//! graph (`kiln-autodiff`). The results are ordinary lazy arrays: evaluate them together with
//! the loss (`kiln::eval(&[&loss, &g1, &g2])`) and the forward work is shared, fused and
//! cached like any other graph.
//!
//! Depends on `kiln-autodiff` and [`crate::Array`].

use crate::Array;
use kiln_ir::{build, NodeRef, Result};

/// The gradient of a one-element float `loss` with respect to each of `wrt`.
///
/// Errors if the loss has more than one element, or if the loss or an input is not `f32`/`f64`
/// (integers and bools have no gradient).
///
/// ```
/// use kiln::Array;
/// let w = Array::from_vec(vec![1.0f64, -2.0, 3.0], &[3])?;
/// let loss = (&w * &w).sum(None, false);           // Σ w²
/// let g = kiln::grad(&loss, &[&w])?;
/// assert_eq!(g[0].to_vec::<f64>()?, vec![2.0, -4.0, 6.0]);
/// let ids = Array::from_vec(vec![1i64], &[1])?;
/// assert!(kiln::grad(&loss, &[&ids]).is_err());   // not differentiable
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn grad(loss: &Array, wrt: &[&Array]) -> Result<Vec<Array>> {
    let w: Vec<&NodeRef> = wrt.iter().map(|a| &a.node).collect();
    Ok(kiln_autodiff::grad(&loss.node, &w)?
        .into_iter()
        .map(Array::from_node)
        .collect())
}

/// The loss and its gradients, ready to be evaluated in one pass:
/// `kiln::eval(&[&value, &grads[0], ...])`.
///
/// ```
/// use kiln::Array;
/// let x = Array::from_vec(vec![0.5f32, 1.5], &[2])?;
/// let (v, g) = kiln::value_and_grad(&x.exp().sum(None, false), &[&x])?;
/// kiln::eval(&[&v, &g[0]])?;
/// assert!((v.item::<f32>()? - (0.5f32.exp() + 1.5f32.exp())).abs() < 1e-5);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn value_and_grad(loss: &Array, wrt: &[&Array]) -> Result<(Array, Vec<Array>)> {
    Ok((loss.clone(), grad(loss, wrt)?))
}

/// Vector-Jacobian products: the gradient of `Σ_i <outputs[i], cotangents[i]>` with respect to
/// each of `wrt` (for non-scalar outputs).
///
/// ```
/// use kiln::Array;
/// let x = Array::from_vec(vec![1.0f64, 2.0], &[2])?;
/// let y = &x * 3.0;
/// let ct = Array::from_vec(vec![1.0f64, 10.0], &[2])?;
/// assert_eq!(kiln::vjp(&[&y], &[&ct], &[&x])?[0].to_vec::<f64>()?, vec![3.0, 30.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn vjp(outputs: &[&Array], cotangents: &[&Array], wrt: &[&Array]) -> Result<Vec<Array>> {
    let o: Vec<&NodeRef> = outputs.iter().map(|a| &a.node).collect();
    let c: Vec<&NodeRef> = cotangents.iter().map(|a| &a.node).collect();
    let w: Vec<&NodeRef> = wrt.iter().map(|a| &a.node).collect();
    Ok(kiln_autodiff::vjp(&o, &c, &w)?
        .into_iter()
        .map(Array::from_node)
        .collect())
}

impl Array {
    /// The same values, treated as a constant by [`grad`].
    ///
    /// ```
    /// use kiln::Array;
    /// let x = Array::from_vec(vec![2.0f64], &[1])?;
    /// let loss = (&x * &x.stop_gradient()).sum(None, false); // d/dx (x * c) = c
    /// assert_eq!(kiln::grad(&loss, &[&x])?[0].to_vec::<f64>()?, vec![2.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn stop_gradient(&self) -> Array {
        Array::from_node(build::stop_gradient(&self.node))
    }
}
