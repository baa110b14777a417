use fuse::prelude::*;

#[fuse]
mod sizes {
    pub fn width() -> usize {
        64
    }
}

fn main() {}
