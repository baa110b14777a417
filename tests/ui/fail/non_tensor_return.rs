use fuse::prelude::*;

#[fuse]
fn total(x: &Tensor) -> Result<f32> {
    Ok(x.sum(-1))
}

fn main() {}
