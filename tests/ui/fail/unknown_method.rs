use fuse::prelude::*;

#[fuse]
fn project(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&w.transpose()))
}

fn main() {}
