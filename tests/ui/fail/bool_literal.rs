use fuse::prelude::*;

#[fuse]
fn masked(x: &Tensor) -> Result<Tensor> {
    Ok(x * true)
}

fn main() {}
