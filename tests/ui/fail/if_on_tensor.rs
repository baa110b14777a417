use fuse::prelude::*;

#[fuse]
fn clamp(x: &Tensor, limit: f32) -> Result<Tensor> {
    let y = if x > limit { limit } else { x };
    Ok(y)
}

fn main() {}
