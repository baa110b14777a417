use fuse::prelude::*;

#[fuse]
fn stats(x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let m = x.mean(-1);
    Ok((x.sum(-1), m, x.max(-1)))
}

#[fuse]
fn pair(x: &Tensor) -> fuse::Result<(fuse::Tensor, fuse::Tensor)> {
    (x.exp(), x.log())
}

fn main() {
    let _ = stats;
    let _ = pair;
}
