//! The `#[fuse]` functions several test binaries and the CPU bench share (numerics on the CPU, the GPU suite,
//! the kernel compile and static-source checks, benches/cpu.rs): every op, every kind of group, the DESIGN.md examples.
#![allow(dead_code)] // each test binary uses its own subset

use fuse::prelude::*;

#[fuse]
pub fn unary_a(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let pos = abs(x) + 0.5;
    (exp(x), log(pos), sqrt(pos), rsqrt(pos), tanh(x), sigmoid(x), silu(x))
}

#[fuse]
pub fn unary_b(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let away = x + 2.5;
    (gelu(x), gelu_tanh(x), relu(x), abs(x), square(x), recip(away), -x)
}

#[fuse]
pub fn unary_c(x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    (sin(x * 3.0), x.cos(), trunc(x * 4.0))
}

#[fuse]
pub fn binary(
    a: &Tensor,
    b: &Tensor,
    s: f32,
) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let pos = abs(a) + 0.25;
    (a + b, a - b, a * b, a / (abs(b) + 0.5), maximum(a, b), minimum(a, b), pos.powf(s), b * s - 1.5)
}

/// The comparisons on the inputs themselves (1 or 0: an intermediate rounded differently could flip one).
#[fuse]
pub fn compare(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    (a.ge(b), a.gt(b), a.le(b), a.lt(b), a.eq(a), a.ne(b))
}

/// A sliding-window causal mask written by hand (query and key positions as tensors): scores outside the
/// window become -inf before the softmax; and a select between two tensors by a 0/1 mask.
#[fuse]
pub fn masked(scores: &Tensor, q_pos: &Tensor, k_pos: &Tensor, window: f32, mask: &Tensor) -> Result<(Tensor, Tensor)> {
    let behind = q_pos - k_pos;
    let keep = behind.ge(0.0) * behind.lt(window);
    (softmax(keep.where_cond(scores, f32::NEG_INFINITY)), mask.where_cond(scores, scores * 0.5 - 1.0))
}

/// A row repeated over the rows of `x` (broadcast_as, a copy kernel), and a column stretched over a new axis.
#[fuse]
pub fn repeated(x: &Tensor, row: &Tensor, col: &Tensor) -> Result<(Tensor, Tensor)> {
    (row.broadcast_as(&[x.dim(0), x.dim(1)]) * x, col.broadcast_as(&[2, x.dim(0), x.dim(1)]))
}

#[fuse]
pub fn reductions(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    (x.sum(-1), x.mean(-1), x.max(-1), softmax(x), x - x.mean(-1), x.min(-1))
}

#[fuse]
pub fn norm_and_cast(x: &Tensor, w: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let n = rms_norm(x, w, eps);
    (n, n.to_dtype(DType::F32) * 2.0)
}

/// DESIGN.md's MLP, weights in [in, out] layout.
#[fuse]
pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
    Ok(h.matmul(w_down))
}

/// The same MLP with checkpoint-layout ([out, in]) weights read through `.t()`.
#[fuse]
pub fn llama_mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&w_gate.t())) * x.matmul(&w_up.t());
    Ok(h.matmul(&w_down.t()))
}

/// rms_norm, the SwiGLU MLP, the residual: one transformer FFN block with its weights as parameters.
#[fuse]
pub fn ffn_block(
    x: &Tensor,
    norm: &Tensor,
    w_gate: &Tensor,
    w_up: &Tensor,
    w_down: &Tensor,
    eps: f32,
) -> Result<Tensor> {
    let h = rms_norm(x, norm, eps);
    Ok(x + (silu(h.matmul(&w_gate.t())) * h.matmul(&w_up.t())).matmul(&w_down.t()))
}

/// A matmul whose left operand is computed on the fly (a prologue) and whose product is activated.
#[fuse]
pub fn scaled_projection(x: &Tensor, row_scale: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(tanh(relu(x * row_scale).matmul(&w.t())))
}

/// Ten pointwise ops with broadcasting (a bias row, a scalar parameter, literals).
#[fuse]
pub fn chain10(x: &Tensor, bias: &Tensor, s: f32) -> Result<Tensor> {
    let a = (x + bias) * s;
    let b = tanh(a) * 0.5 + 1.0;
    Ok(exp(-square(b)) / (b + 2.0))
}

#[fuse]
pub fn attention_scores(q: &Tensor, k: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(softmax(q.matmul(&k.t()) * scale))
}

/// DESIGN.md's transformer block: a `#[fuse]` method reading tensor and scalar fields.
pub struct Block {
    pub norm: Tensor,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub eps: f32,
}

impl Block {
    #[fuse]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + (silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t()))
    }
}

/// A projection whose weight is computed by the kernel just before the GEMM's: a kernel that read its
/// weights before waiting for that kernel would read them unwritten.
#[fuse]
pub fn computed_weight_projection(x: &Tensor, w: &Tensor, w_scale: &Tensor) -> Result<Tensor> {
    let weight = exp(w * w_scale);
    Ok(x.matmul(&weight.t()))
}

/// A projection alone (the skinny kernel may read `w` before its grid wait when only the host wrote it).
#[fuse]
pub fn projection(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&w.t()))
}

/// Rows of `w` from the position in `at` on replaced, in place, by `rows` (a kernel writing an argument).
#[fuse]
pub fn overwrite_rows(w: &Tensor, rows: &Tensor, at: &Tensor) -> Result<Tensor> {
    Ok(w.slice_set(rows, 0, at))
}

/// q, k and v from one normalised input by separate weights: one MultiGemm group (the rms_norm its
/// prologue, the biases the epilogues of q and k).
#[fuse]
pub fn qkv_projections(
    x: &Tensor,
    norm: &Tensor,
    wq: &Tensor,
    bq: &Tensor,
    wk: &Tensor,
    bk: &Tensor,
    wv: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let h = rms_norm(x, norm, 1e-5);
    (h.matmul(&wq.t()) + bq, h.matmul(&wk.t()) + bk, h.matmul(&wv.t()))
}
