use fuse::prelude::*;

#[fuse]
fn shortcut(x: &Tensor) -> Result<Tensor> {
    let h = x.exp();
    return Ok(h);
    Ok(h.log())
}

fn main() {}
