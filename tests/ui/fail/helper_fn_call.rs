use fuse::prelude::*;

fn gate(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.matmul(w)
}

#[fuse]
fn mlp(x: &Tensor, w_gate: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(gate(x, w_gate)?);
    Ok(h.matmul(w_down))
}

fn main() {}
