use fuse::prelude::*;

#[fuse]
fn column_sums(x: &Tensor) -> Result<Tensor> {
    Ok(x.sum(0))
}

fn main() {}
