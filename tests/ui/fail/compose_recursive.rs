use fuse::prelude::*;

struct Net {
    w: Tensor,
}

#[fuse]
impl Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward(&x.matmul(&self.w)))
    }
}

fn main() {}
