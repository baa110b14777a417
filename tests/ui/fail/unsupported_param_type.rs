use fuse::prelude::*;

#[fuse]
fn scale(x: &Tensor, factor: u8) -> Result<Tensor> {
    Ok(x * factor)
}

fn main() {}
