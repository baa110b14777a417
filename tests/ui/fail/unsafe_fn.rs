use fuse::prelude::*;

#[fuse]
unsafe fn scale(x: &Tensor) -> Result<Tensor> {
    Ok(x * 2.0)
}

fn main() {}
