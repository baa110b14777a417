use fuse::prelude::*;

/// The Llama MLP: doc comments and attributes are kept on the generated function.
#[fuse]
#[inline]
pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
    Ok(h.matmul(w_down))
}

fn main() {
    let _: fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor> = mlp;
    let _: &'static FusedFn = mlp_fused();
}
