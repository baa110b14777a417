use fuse::prelude::*;

#[fuse]
fn append(cache: &Tensor, rows: &Tensor, pos: usize) -> Result<Tensor> {
    let doubled = cache * 2.0;
    Ok(doubled.slice_set(rows, 1, pos))
}

fn main() {}
