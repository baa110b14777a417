use fuse::prelude::*;

#[fuse]
fn scale_in_place(x: &mut Tensor) -> Result<Tensor> {
    Ok(x * 2.0)
}

fn main() {}
