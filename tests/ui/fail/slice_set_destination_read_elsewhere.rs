use fuse::prelude::*;

#[fuse]
fn append(cache: &Tensor, rows: &Tensor, pos: usize) -> Result<(Tensor, Tensor)> {
    let written = cache.slice_set(rows, 1, pos);
    (written, cache.exp())
}

fn main() {}
