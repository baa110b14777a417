use fuse::prelude::*;

#[fuse]
fn named(x: &Tensor) -> Result<Tensor> {
    Ok(x * "two")
}

fn main() {}
