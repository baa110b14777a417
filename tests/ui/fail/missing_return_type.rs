use fuse::prelude::*;

#[fuse]
fn scale(x: &Tensor) {
    let y = x * 2.0;
}

fn main() {}
