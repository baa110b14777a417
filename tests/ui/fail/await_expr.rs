use fuse::prelude::*;

#[fuse]
fn wait(x: &Tensor) -> Result<Tensor> {
    Ok(x.exp().await)
}

fn main() {}
