use fuse::prelude::*;

#[fuse]
fn mean_by_hand(x: &Tensor) -> Result<Tensor> {
    Ok(x.sum(-1) / x.shape()[1])
}

fn main() {}
