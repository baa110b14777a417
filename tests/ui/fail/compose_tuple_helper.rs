use fuse::prelude::*;

struct Net {
    w: Tensor,
}

#[fuse]
impl Net {
    fn halves(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        (x.matmul(&self.w), x * 2.0)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.halves(x) + 1.0)
    }
}

fn main() {}
