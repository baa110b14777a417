use fuse::prelude::*;

struct Layer {
    w: Tensor,
}

impl Layer {
    #[fuse]
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(&self.w))
    }
}

fn main() {}
