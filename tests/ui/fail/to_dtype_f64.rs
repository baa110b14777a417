use fuse::prelude::*;

#[fuse]
fn widen(x: &Tensor) -> Result<Tensor> {
    Ok(x.to_dtype(DType::F64))
}

fn main() {}
