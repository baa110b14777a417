use fuse::prelude::*;

#[fuse]
fn add((a, b): (&Tensor, &Tensor)) -> Result<Tensor> {
    Ok(a + b)
}

fn main() {}
