use fuse::prelude::*;

trait Module {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
}

struct Lin {
    w: Tensor,
}

#[fuse]
impl Module for Lin {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(xs.matmul(&self.w.transpose()))
    }
}

fn main() {
    let _ = Lin::forward_fused();
}
