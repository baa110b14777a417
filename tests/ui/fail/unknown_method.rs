use fuse::prelude::*;

#[fuse]
fn project(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(x.mm(&w))
}

fn main() {}
