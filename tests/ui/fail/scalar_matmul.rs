use fuse::prelude::*;

#[fuse]
fn project(x: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(x.matmul(scale))
}

fn main() {}
