//! Property tests: every op and every DESIGN.md example, traced by `#[fuse]`, fused and unfused, against the
//! reference interpreter on random inputs with odd shapes, in f32, f16 and bf16.

mod common;
use common::{check_against_reference, random, rng};
use fuse::prelude::*;

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const SHAPES: [[usize; 2]; 5] = [[1, 1], [1, 17], [3, 33], [17, 5], [127, 130]];

#[fuse]
pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
    Ok(h.matmul(w_down))
}

struct Block {
    norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    eps: f32,
}

impl Block {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + (silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t()))
    }
}

#[fuse]
fn unary_a(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let pos = abs(x) + 0.5;
    (exp(x), log(pos), sqrt(pos), rsqrt(pos), tanh(x), sigmoid(x), silu(x))
}

#[fuse]
fn unary_b(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let away = x + 2.5;
    (gelu(x), gelu_tanh(x), relu(x), abs(x), square(x), recip(away), -x)
}

#[fuse]
fn binary(a: &Tensor, b: &Tensor, s: f32) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let pos = abs(a) + 0.25;
    (a + b, a - b, a * b, a / (abs(b) + 0.5), maximum(a, b), minimum(a, b), pos.powf(s), b * s - 1.5)
}

#[fuse]
fn reductions(x: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    (x.sum(-1), x.mean(-1), x.max(-1), softmax(x), x - x.mean(-1))
}

#[fuse]
fn norm_and_cast(x: &Tensor, w: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let n = rms_norm(x, w, eps);
    (n, n.to_dtype(DType::F32) * 2.0)
}

#[fuse]
fn attention_scores(q: &Tensor, k: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(softmax(q.matmul(&k.t()) * scale))
}

#[test]
fn unary_ops_match_reference() {
    let mut r = rng(1);
    for dtype in DTYPES {
        for shape in SHAPES {
            let x = random(&mut r, &shape, dtype, -2.0, 2.0);
            let args = [fuse::arg(&x)];
            check_against_reference(&format!("unary_a {shape:?}"), unary_a_fused(), &args, dtype);
            check_against_reference(&format!("unary_b {shape:?}"), unary_b_fused(), &args, dtype);
        }
    }
}

#[test]
fn binary_ops_broadcast_and_match_reference() {
    let mut r = rng(2);
    for dtype in DTYPES {
        for shape in SHAPES {
            let a = random(&mut r, &shape, dtype, -2.0, 2.0);
            // full, row-broadcast and column-broadcast right operands
            for bshape in [shape.to_vec(), vec![shape[1]], vec![shape[0], 1]] {
                let b = random(&mut r, &bshape, dtype, -2.0, 2.0);
                let s = 1.25f32;
                check_against_reference(&format!("binary {shape:?} {bshape:?}"), binary_fused(), &[fuse::arg(&a), fuse::arg(&b), fuse::arg(&s)], dtype);
            }
        }
    }
}

#[test]
fn reductions_softmax_rms_norm_match_reference() {
    let mut r = rng(3);
    for dtype in DTYPES {
        for shape in SHAPES {
            let x = random(&mut r, &shape, dtype, -3.0, 3.0);
            check_against_reference(&format!("reductions {shape:?}"), reductions_fused(), &[fuse::arg(&x)], dtype);
            let w = random(&mut r, &shape[1..], dtype, 0.5, 1.5);
            let eps = 1e-5f64;
            check_against_reference(&format!("rms_norm {shape:?}"), norm_and_cast_fused(), &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&eps)], dtype);
        }
    }
}

#[test]
fn mlp_matches_reference() {
    let mut r = rng(4);
    for dtype in DTYPES {
        for (m, h, i) in [(1, 7, 13), (3, 33, 65), (17, 64, 40), (5, 1, 3)] {
            let x = random(&mut r, &[m, h], dtype, -1.0, 1.0);
            let wg = random(&mut r, &[h, i], dtype, -0.5, 0.5);
            let wu = random(&mut r, &[h, i], dtype, -0.5, 0.5);
            let wd = random(&mut r, &[i, h], dtype, -0.5, 0.5);
            let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
            check_against_reference(&format!("mlp m={m} h={h} i={i}"), mlp_fused(), &args, dtype);
            // the generated function itself returns what its plan computes
            let y = mlp(&x, &wg, &wu, &wd).expect("mlp");
            assert_eq!(y.shape(), &[m, h]);
            assert_eq!(y.dtype(), dtype);
        }
    }
}

#[test]
fn transformer_block_method_matches_reference() {
    let mut r = rng(5);
    for dtype in DTYPES {
        for (m, h, i) in [(1, 16, 24), (3, 33, 17), (17, 8, 40)] {
            let block = Block {
                norm: random(&mut r, &[h], dtype, 0.5, 1.5),
                gate: random(&mut r, &[i, h], dtype, -0.5, 0.5),
                up: random(&mut r, &[i, h], dtype, -0.5, 0.5),
                down: random(&mut r, &[h, i], dtype, -0.5, 0.5),
                eps: 1e-6,
            };
            let x = random(&mut r, &[m, h], dtype, -1.0, 1.0);
            let y = block.forward(&x).expect("forward");
            assert_eq!(y.shape(), &[m, h]);
            let f = Block::forward_fused();
            let g = f.graph().expect("graph");
            let names: Vec<&str> = g.inputs.iter().map(|i| i.name.as_str()).collect();
            assert_eq!(names, ["x", "self.norm", "self.eps", "self.gate", "self.up", "self.down"]);
            let args = [fuse::arg(&x), fuse::arg(&block.norm), fuse::arg(&block.eps), fuse::arg(&block.gate), fuse::arg(&block.up), fuse::arg(&block.down)];
            check_against_reference(&format!("block m={m} h={h} i={i}"), f, &args, dtype);
        }
    }
}

#[test]
fn batched_attention_scores_match_reference() {
    let mut r = rng(6);
    for dtype in DTYPES {
        for (s, d) in [(1, 8), (3, 5), (17, 33)] {
            let q = random(&mut r, &[s, d], dtype, -1.0, 1.0);
            let k = random(&mut r, &[s, d], dtype, -1.0, 1.0);
            let scale = 1.0 / (d as f32).sqrt();
            check_against_reference(&format!("attention s={s} d={d}"), attention_scores_fused(), &[fuse::arg(&q), fuse::arg(&k), fuse::arg(&scale)], dtype);
        }
    }
}
