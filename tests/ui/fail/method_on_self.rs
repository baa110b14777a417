use fuse::prelude::*;

struct Block {
    w: Tensor,
}

impl Block {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.project(x);
        Ok(silu(h))
    }
}

fn main() {}
