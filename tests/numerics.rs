//! Every op and every kind of group, traced by `#[fuse]`, fused and unfused, against the reference
//! interpreter on random inputs with odd shapes, in f32, f16 and bf16: one case per behaviour, each run on
//! the CPU (`case::cpu`) and on CUDA device 0 (`case::cuda`, skipped visibly without a GPU) by
//! `fuse::device_tests!`, with the same inputs and the tolerances of `fuse::testing::tolerance`.

#[path = "common/fused_fns.rs"]
mod fused_fns;
use fuse::prelude::*;
use fuse::testing::{check_against_reference as check, random, TestRng};
use fused_fns::*;

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
/// Rows: one, a few, odd, just under a power of two, and many (several waves of blocks on the GPU).
const ROWS: [usize; 5] = [1, 3, 17, 127, 4095];

#[fuse]
fn gemm_bias_gelu(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(gelu(x.matmul(w) + b))
}

#[fuse]
fn norm_then_matmul(x: &Tensor, nw: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    Ok(rms_norm(x, nw, eps).matmul(&w.t()))
}

#[fuse]
fn row_sum_plus(x: &Tensor, z: &Tensor) -> Result<Tensor> {
    Ok(exp(x.sum(-1) + z))
}

fn unary_ops_match_reference(dev: &Device) {
    let mut r = TestRng::new(11);
    for dtype in DTYPES {
        for rows in ROWS {
            for inner in [1, 33, 255] {
                let x = random(&mut r, &[rows, inner], dtype, -2.0, 2.0, dev);
                let args = [fuse::arg(&x)];
                check(&format!("unary_a [{rows}, {inner}]"), unary_a_fused(), &args, dtype, dev);
                check(&format!("unary_b [{rows}, {inner}]"), unary_b_fused(), &args, dtype, dev);
                check(&format!("unary_c [{rows}, {inner}]"), unary_c_fused(), &args, dtype, dev);
            }
        }
    }
}

fn binary_ops_broadcast_and_match_reference(dev: &Device) {
    let mut r = TestRng::new(12);
    for dtype in DTYPES {
        for rows in ROWS {
            let shape = [rows, 65];
            let a = random(&mut r, &shape, dtype, -2.0, 2.0, dev);
            // full, row-broadcast and column-broadcast right operands, and a .t() view
            for bshape in [shape.to_vec(), vec![shape[1]], vec![shape[0], 1]] {
                let b = random(&mut r, &bshape, dtype, -2.0, 2.0, dev);
                let args = [fuse::arg(&a), fuse::arg(&b), fuse::arg(&1.25f32)];
                check(&format!("binary {shape:?} {bshape:?}"), binary_fused(), &args, dtype, dev);
                check(&format!("compare {shape:?} {bshape:?}"), compare_fused(), &args[..2], dtype, dev);
            }
            let bt = random(&mut r, &[shape[1], shape[0]], dtype, -2.0, 2.0, dev).t().expect("t");
            let args = [fuse::arg(&a), fuse::arg(&bt), fuse::arg(&0.5f32)];
            check(&format!("binary {shape:?} transposed"), binary_fused(), &args, dtype, dev);
        }
    }
}

fn where_cond_masks_broadcast_and_match_reference(dev: &Device) {
    let mut r = TestRng::new(19);
    for dtype in DTYPES {
        for (queries, keys) in [(1, 1), (3, 17), (17, 130), (127, 33)] {
            let scores = random(&mut r, &[2, queries, keys], dtype, -3.0, 3.0, dev);
            // Positions as [queries, 1] and [keys] (they broadcast to the scores' last two axes), the queries
            // at the end of the keys as in a decode step; a window of 5 keys.
            let q: Vec<f32> = (0..queries).map(|i| (keys - queries.min(keys) + i.min(keys - 1)) as f32).collect();
            let k: Vec<f32> = (0..keys).map(|j| j as f32).collect();
            let q_pos = Tensor::from_vec(q, &[queries, 1], dev).expect("q_pos").to_dtype(dtype).expect("cast");
            let k_pos = Tensor::from_vec(k, &[keys], dev).expect("k_pos").to_dtype(dtype).expect("cast");
            let mask = random(&mut r, &[queries, 1], dtype, -1.0, 1.0, dev)
                .gt(&Tensor::zeros(&[1], dtype, dev).expect("zeros"))
                .expect("gt");
            let args = [fuse::arg(&scores), fuse::arg(&q_pos), fuse::arg(&k_pos), fuse::arg(&5.0f32), fuse::arg(&mask)];
            check(&format!("masked [2, {queries}, {keys}]"), masked_fused(), &args, dtype, dev);
        }
    }
}

fn broadcast_as_copies_match_reference(dev: &Device) {
    let mut r = TestRng::new(20);
    for dtype in DTYPES {
        for (rows, cols) in [(1, 1), (3, 17), (127, 65)] {
            let x = random(&mut r, &[rows, cols], dtype, -2.0, 2.0, dev);
            let row = random(&mut r, &[cols], dtype, -2.0, 2.0, dev);
            let col = random(&mut r, &[rows, 1], dtype, -2.0, 2.0, dev);
            let args = [fuse::arg(&x), fuse::arg(&row), fuse::arg(&col)];
            check(&format!("repeated [{rows}, {cols}]"), repeated_fused(), &args, dtype, dev);
        }
    }
}

fn reductions_softmax_rms_norm_match_reference(dev: &Device) {
    let mut r = TestRng::new(13);
    for dtype in DTYPES {
        for rows in ROWS {
            // a row shorter than a block, an odd one, and one longer than a block's stride
            for inner in [1, 17, 4097] {
                if rows * inner > 1 << 22 {
                    continue;
                }
                let x = random(&mut r, &[rows, inner], dtype, -3.0, 3.0, dev);
                check(&format!("reductions [{rows}, {inner}]"), reductions_fused(), &[fuse::arg(&x)], dtype, dev);
                let w = random(&mut r, &[inner], dtype, 0.5, 1.5, dev);
                let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&1e-5f64)];
                check(&format!("rms_norm [{rows}, {inner}]"), norm_and_cast_fused(), &args, dtype, dev);
            }
        }
    }
}

fn rank_three_inputs_reduce_over_the_last_axis(dev: &Device) {
    let mut r = TestRng::new(14);
    for dtype in DTYPES {
        let x = random(&mut r, &[3, 17, 33], dtype, -3.0, 3.0, dev);
        check("reductions [3, 17, 33]", reductions_fused(), &[fuse::arg(&x)], dtype, dev);
    }
}

fn gemm_with_epilogue_matches_reference(dev: &Device) {
    let mut r = TestRng::new(21);
    for dtype in DTYPES {
        for rows in ROWS {
            let (k, n) = (65, 127);
            let x = random(&mut r, &[rows, k], dtype, -1.0, 1.0, dev);
            let w = random(&mut r, &[k, n], dtype, -0.5, 0.5, dev);
            let b = random(&mut r, &[n], dtype, -0.5, 0.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)];
            check(&format!("gemm_bias_gelu m={rows}"), gemm_bias_gelu_fused(), &args, dtype, dev);
        }
    }
}

fn gemm_with_prologue_and_transposed_weight_matches_reference(dev: &Device) {
    let mut r = TestRng::new(22);
    for dtype in DTYPES {
        for rows in ROWS {
            let (k, n) = (33, 17);
            let x = random(&mut r, &[rows, k], dtype, -1.0, 1.0, dev);
            let nw = random(&mut r, &[k], dtype, 0.5, 1.5, dev);
            let w = random(&mut r, &[n, k], dtype, -0.5, 0.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&nw), fuse::arg(&w), fuse::arg(&1e-5f32)];
            check(&format!("norm_then_matmul m={rows}"), norm_then_matmul_fused(), &args, dtype, dev);
        }
    }
}

fn mlp_matches_reference(dev: &Device) {
    let mut r = TestRng::new(23);
    for dtype in DTYPES {
        for (m, h, i) in [(1, 7, 13), (3, 33, 65), (17, 64, 40), (5, 1, 3), (127, 63, 129), (4095, 63, 129)] {
            let x = random(&mut r, &[m, h], dtype, -1.0, 1.0, dev);
            // [in, out] weights, and the same MLP with checkpoint-layout [out, in] weights read through .t()
            let [wg, wu] = [0; 2].map(|_| random(&mut r, &[h, i], dtype, -0.5, 0.5, dev));
            let wd = random(&mut r, &[i, h], dtype, -0.5, 0.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
            check(&format!("mlp m={m} h={h} i={i}"), mlp_fused(), &args, dtype, dev);
            let y = mlp(&x, &wg, &wu, &wd).expect("mlp");
            assert_eq!(
                (y.shape(), y.dtype(), y.device()),
                (&[m, h][..], dtype, dev),
                "the generated function's result"
            );
            let [cg, cu] = [0; 2].map(|_| random(&mut r, &[i, h], dtype, -0.5, 0.5, dev));
            let cd = random(&mut r, &[h, i], dtype, -0.5, 0.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&cg), fuse::arg(&cu), fuse::arg(&cd)];
            check(&format!("llama_mlp m={m} h={h} i={i}"), llama_mlp_fused(), &args, dtype, dev);
        }
    }
}

fn batched_left_operands_fold_into_rows(dev: &Device) {
    let mut r = TestRng::new(24);
    for dtype in DTYPES {
        for rows in [1, 3, 17] {
            let x = random(&mut r, &[3, rows, 33], dtype, -1.0, 1.0, dev);
            let w = random(&mut r, &[33, 17], dtype, -0.5, 0.5, dev);
            let b = random(&mut r, &[17], dtype, -0.5, 0.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)];
            check(&format!("batched gemm [3, {rows}, 33]"), gemm_bias_gelu_fused(), &args, dtype, dev);
        }
    }
}

fn attention_scores_match_reference(dev: &Device) {
    let mut r = TestRng::new(25);
    for dtype in DTYPES {
        for (s, d) in [(1, 8), (3, 5), (17, 33), (127, 64)] {
            let scale = 1.0 / (d as f32).sqrt();
            // [s, d] x [d, s], and batched: [b, s, d] x [b, d, s]
            for shape in [vec![s, d], vec![2, s, d]] {
                let q = random(&mut r, &shape, dtype, -1.0, 1.0, dev);
                let k = random(&mut r, &shape, dtype, -1.0, 1.0, dev);
                let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&scale)];
                check(&format!("attention {shape:?}"), attention_scores_fused(), &args, dtype, dev);
            }
        }
    }
}

fn transformer_block_method_matches_reference(dev: &Device) {
    let mut r = TestRng::new(26);
    for dtype in DTYPES {
        for (m, h, i) in [(1, 16, 24), (3, 33, 17), (17, 8, 40), (127, 64, 97), (4095, 64, 97)] {
            let block = Block {
                norm: random(&mut r, &[h], dtype, 0.5, 1.5, dev),
                gate: random(&mut r, &[i, h], dtype, -0.5, 0.5, dev),
                up: random(&mut r, &[i, h], dtype, -0.5, 0.5, dev),
                down: random(&mut r, &[h, i], dtype, -0.5, 0.5, dev),
                eps: 1e-6,
            };
            let x = random(&mut r, &[m, h], dtype, -1.0, 1.0, dev);
            let y = block.forward(&x).expect("forward");
            assert_eq!((y.shape(), y.dtype()), (&[m, h][..], dtype));
            let f = Block::forward_fused();
            let names: Vec<&str> = f.graph().expect("graph").inputs.iter().map(|i| i.name.as_str()).collect();
            assert_eq!(names, ["x", "self.norm", "self.eps", "self.gate", "self.up", "self.down"]);
            let args = [
                fuse::arg(&x),
                fuse::arg(&block.norm),
                fuse::arg(&block.eps),
                fuse::arg(&block.gate),
                fuse::arg(&block.up),
                fuse::arg(&block.down),
            ];
            check(&format!("block m={m} h={h} i={i}"), f, &args, dtype, dev);
        }
    }
}

/// A row reduction followed by pointwise work whose rows are another width: planned as one row group (the
/// planner cannot know the widths), run as separate passes when the call's shapes do not make one domain.
fn a_row_reduction_then_work_on_rows_of_another_width(dev: &Device) {
    let mut r = TestRng::new(27);
    for dtype in DTYPES {
        let cases = [
            ([3, 5], vec![3, 7]),
            ([3, 5], vec![3, 5]),
            ([3, 5], vec![7]),
            ([3, 5], vec![3, 1]),
            ([3, 5], vec![2, 3, 7]),
            ([3, 1], vec![3, 7]),
        ];
        for (xshape, zshape) in cases {
            let x = random(&mut r, &xshape, dtype, -0.5, 0.5, dev);
            let z = random(&mut r, &zshape, dtype, -0.5, 0.5, dev);
            check(
                &format!("row_sum_plus {xshape:?} + {zshape:?}"),
                row_sum_plus_fused(),
                &[fuse::arg(&x), fuse::arg(&z)],
                dtype,
                dev,
            );
        }
    }
}

/// Empty tensors: nothing to compute, except sums over empty rows, which give 0; a max over them has no
/// value (an error, as in torch; tests/nan.rs checks its message).
fn empty_tensors(dev: &Device) {
    let empty = Tensor::from_vec(Vec::<f32>::new(), &[0, 3], dev).expect("empty");
    assert_eq!(exp(&empty).expect("exp").shape(), &[0, 3]);
    let rows = Tensor::from_vec(Vec::<f32>::new(), &[3, 0], dev).expect("empty rows");
    assert_eq!(rows.sum(-1).and_then(|s| s.to_vec::<f32>()).expect("sum"), vec![0.0; 3]);
    assert!(rows.max(-1).is_err(), "a max over empty rows");
    let k0 = Tensor::from_vec(Vec::<f32>::new(), &[0, 4], dev).expect("k = 0");
    assert_eq!(rows.matmul(&k0).and_then(|p| p.to_vec::<f32>()).expect("matmul"), vec![0.0; 12]);
}

fuse::device_tests!(
    unary_ops_match_reference,
    binary_ops_broadcast_and_match_reference,
    where_cond_masks_broadcast_and_match_reference,
    broadcast_as_copies_match_reference,
    reductions_softmax_rms_norm_match_reference,
    rank_three_inputs_reduce_over_the_last_axis,
    gemm_with_epilogue_matches_reference,
    gemm_with_prologue_and_transposed_weight_matches_reference,
    mlp_matches_reference,
    batched_left_operands_fold_into_rows,
    attention_scores_match_reference,
    transformer_block_method_matches_reference,
    a_row_reduction_then_work_on_rows_of_another_width,
    empty_tensors,
);
