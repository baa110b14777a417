use fuse::prelude::*;

struct Norm {
    weight: Vec<f32>,
    eps: f32,
}

impl Norm {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(x, &self.weight, self.eps))
    }
}

fn main() {}
