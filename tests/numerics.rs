//! Property tests: every op and every DESIGN.md example, traced by `#[fuse]`, fused and unfused, against the
//! reference interpreter on random inputs with odd shapes, in f32, f16 and bf16.

mod common;
use common::fused_fns::*;
use common::{check_against_reference, random, rng};
use fuse::prelude::*;

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const SHAPES: [[usize; 2]; 5] = [[1, 1], [1, 17], [3, 33], [17, 5], [127, 130]];

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
