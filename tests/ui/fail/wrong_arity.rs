use fuse::prelude::*;

#[fuse]
fn gated(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    Ok(silu(x, y))
}

fn main() {}
