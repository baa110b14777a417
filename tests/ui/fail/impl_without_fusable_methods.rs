use fuse::prelude::*;

struct Block {
    eps: f32,
}

#[fuse]
impl Block {
    fn eps(&self) -> f32 {
        self.eps
    }
}

fn main() {}
