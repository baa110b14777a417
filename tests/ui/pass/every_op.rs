use fuse::prelude::*;

#[fuse]
fn every_op(x: &Tensor, w: &Tensor, s: f32) -> Result<Tensor> {
    let a = exp(x) + log(x) + sqrt(x) + rsqrt(x) + tanh(x) + sigmoid(x) + silu(x);
    let b = fuse::gelu(x) + gelu_tanh(x) + relu(x) + abs(x) + square(x) + recip(x) + sin(x) + cos(x);
    let c = x.exp() - x.log() - x.sqrt() - x.rsqrt() - x.tanh() - x.sigmoid() - x.silu() - x.gelu();
    let d = x.gelu_tanh() * x.relu() * x.abs() * x.square() * x.recip() * x.sin() * x.cos() / -x;
    let e = maximum(a, b) + minimum(&c, &d) + x.powf(s) + (x * 1e-3 - 2);
    let f = e.sum(-1) + e.mean(-1) + e.max(-1) + softmax(&e) + rms_norm(&e, w, 1e-5);
    Ok(f.matmul(&w.t()).to_dtype(DType::BF16).to_dtype(fuse::DType::F16).to_dtype(DType::F32))
}

fn main() {
    let _ = every_op;
}
