use fuse::prelude::*;

#[fuse]
fn affine(x: &Tensor, a: f32, b: f64, n: usize, k: i64) -> Result<Tensor> {
    let y = x * a + b;
    let z = -y / n - k * 2 + 0.5;
    Ok(z.powf(a) + z.powf(2.0) + z.powf(3))
}

/// Sizes and scalars computed from others: `as` between integers and floats, integer division.
#[fuse]
fn derived(x: &Tensor, heads: usize) -> Result<Tensor> {
    let head = x.dim(1) / heads;
    let rows = x.reshape(&[x.dim(0) * heads, head]);
    Ok(rows / (head as f32).sqrt() + (heads as f64 / 2.0) as i64)
}

fn main() {
    let _ = affine;
    let _ = derived;
}

/// A `bool` parameter: one graph per value.
#[fuse]
fn maybe_causal(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
    let o = attention(q, k, v, 0.125, causal);
    Ok(if causal { o * 2.0 } else { o })
}

fn _uses() {
    let _ = maybe_causal;
    let _: &'static FusedFn = maybe_causal_fused(true);
}
