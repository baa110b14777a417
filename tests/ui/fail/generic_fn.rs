use fuse::prelude::*;

#[fuse]
fn scale<T: Into<f32>>(x: &Tensor, factor: T) -> Result<Tensor> {
    Ok(x * factor)
}

fn main() {}
