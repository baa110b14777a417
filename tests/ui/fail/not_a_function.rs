use fuse::prelude::*;

#[fuse]
struct Weights {
    w: Tensor,
}

fn main() {}
