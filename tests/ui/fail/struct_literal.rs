use fuse::prelude::*;

struct Scale {
    v: f32,
}

#[fuse]
fn scaled(x: &Tensor) -> Result<Tensor> {
    Ok(x * Scale { v: 2.0 })
}

fn main() {}
