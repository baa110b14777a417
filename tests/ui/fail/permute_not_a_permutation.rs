use fuse::prelude::*;

#[fuse]
fn reorder(x: &Tensor) -> Result<Tensor> {
    Ok(x.permute(&[0, 2, 2, 1]))
}

fn main() {}
