use fuse::prelude::*;

#[fuse]
fn scale(x: &Tensor) -> Result<Tensor>
where
    f32: Copy,
{
    Ok(x * 2.0)
}

fn main() {}
