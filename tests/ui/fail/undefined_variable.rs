use fuse::prelude::*;

#[fuse]
fn mlp(x: &Tensor, w_gate: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(w_gate));
    Ok(h * gate)
}

fn main() {}
