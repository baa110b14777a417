use fuse::prelude::*;

#[fuse]
fn append(cache: &Tensor, rows: &Tensor, axis: usize, pos: usize) -> Result<Tensor> {
    Ok(cache.slice_set(rows, axis, pos))
}

fn main() {}
