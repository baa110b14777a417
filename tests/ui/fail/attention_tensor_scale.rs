use fuse::prelude::*;

#[fuse]
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: &Tensor) -> Result<Tensor> {
    Ok(attention(q, k, v, scale, true))
}

fn main() {}
