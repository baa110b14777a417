use fuse::prelude::*;

#[fuse]
fn swap(x: &Tensor) -> Result<Tensor> {
    Ok(x.transpose(1))
}

fn main() {}
