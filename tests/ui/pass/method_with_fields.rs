use fuse::prelude::*;

struct Mlp {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

struct Block {
    norm: Tensor,
    mlp: Mlp,
    eps: f32,
}

impl Block {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let m = silu(h.matmul(&self.mlp.gate.t())) * h.matmul(&self.mlp.up.t());
        Ok(x + m.matmul(&self.mlp.down.t()))
    }

    #[fuse]
    pub fn scaled(self: &Self, x: &Tensor, s: f64) -> Result<Tensor> {
        Ok(x * self.eps * s)
    }
}

fn main() {
    let _ = Block::forward;
    let _ = Block::scaled;
    let _: &'static FusedFn = Block::forward_fused();
    let _: &'static FusedFn = Block::scaled_fused();
}
