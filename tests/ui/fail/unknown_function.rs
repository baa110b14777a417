use fuse::prelude::*;

#[fuse]
fn layer(x: &Tensor) -> Result<Tensor> {
    Ok(layer_norm(x))
}

fn main() {}
