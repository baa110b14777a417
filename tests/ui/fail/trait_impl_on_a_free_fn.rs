use fuse::prelude::*;

#[fuse(trait_impl)]
fn scale(x: &Tensor) -> Result<Tensor> {
    Ok(x * 2.0)
}

fn main() {}
