use fuse::prelude::*;

#[fuse]
fn positive(x: &Tensor) -> Result<Tensor> {
    Ok(x > 0.0)
}

fn main() {}
