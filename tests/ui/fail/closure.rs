use fuse::prelude::*;

#[fuse]
fn twice(x: &Tensor) -> Result<Tensor> {
    let double = |t: &Tensor| t * 2.0;
    Ok(double(x))
}

fn main() {}
