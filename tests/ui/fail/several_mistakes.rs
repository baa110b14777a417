use fuse::prelude::*;

#[fuse]
fn messy(x: Tensor, w: &Tensor) -> Result<Tensor> {
    let h = x.matmul(w).frobnicate();
    for _ in 0..2 {}
    Ok(h.sum(1) + bias)
}

fn main() {}
