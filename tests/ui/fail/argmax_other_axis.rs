use fuse::prelude::*;

#[fuse]
fn pick(logits: &Tensor) -> Result<Tensor> {
    Ok(logits.argmax(0))
}

fn main() {}
