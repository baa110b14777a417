use fuse::prelude::*;

#[fuse]
const fn scale(x: &Tensor) -> Result<Tensor> {
    Ok(x * 2.0)
}

fn main() {}
