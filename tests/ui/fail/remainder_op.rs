use fuse::prelude::*;

#[fuse]
fn wrap(x: &Tensor) -> Result<Tensor> {
    Ok(x % 2.0)
}

fn main() {}
