use fuse::prelude::*;

#[fuse]
fn read(x: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&self.w))
}

fn main() {}
