//! Gemm and DualGemm groups on the GPU: prologues, epilogues, `.t()` weights read in place, batched left
//! operands folded into rows, and the transformer block as a method.

use crate::fused_fns::{attention_scores_fused, Block};
use crate::{check, gpu, random, rng, DTYPES, ROWS};
use fuse::prelude::*;

#[fuse]
fn gemm_bias_gelu(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(gelu(x.matmul(w) + b))
}

#[fuse]
fn norm_then_matmul(x: &Tensor, nw: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    Ok(rms_norm(x, nw, eps).matmul(&w.t()))
}

#[fuse]
fn mlp_checkpoint_layout(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&w_gate.t())) * x.matmul(&w_up.t());
    Ok(h.matmul(&w_down.t()))
}

#[test]
fn gemm_with_epilogue_matches_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(21);
    for dtype in DTYPES {
        for rows in ROWS {
            let (k, n) = (65, 127);
            let x = random(&mut r, &[rows, k], dtype, -1.0, 1.0, &dev);
            let w = random(&mut r, &[k, n], dtype, -0.5, 0.5, &dev);
            let b = random(&mut r, &[n], dtype, -0.5, 0.5, &dev);
            check(
                &format!("gemm_bias_gelu m={rows}"),
                gemm_bias_gelu_fused(),
                &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)],
                dtype,
            );
        }
    }
}

#[test]
fn gemm_with_prologue_and_transposed_weight_matches_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(22);
    for dtype in DTYPES {
        for rows in ROWS {
            let (k, n) = (33, 17);
            let x = random(&mut r, &[rows, k], dtype, -1.0, 1.0, &dev);
            let nw = random(&mut r, &[k], dtype, 0.5, 1.5, &dev);
            let w = random(&mut r, &[n, k], dtype, -0.5, 0.5, &dev);
            let args = [fuse::arg(&x), fuse::arg(&nw), fuse::arg(&w), fuse::arg(&1e-5f32)];
            check(&format!("norm_then_matmul m={rows}"), norm_then_matmul_fused(), &args, dtype);
        }
    }
}

#[test]
fn dual_gemm_mlp_with_checkpoint_weights_matches_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(23);
    for dtype in DTYPES {
        for rows in ROWS {
            let (h, i) = (63, 129);
            let x = random(&mut r, &[rows, h], dtype, -1.0, 1.0, &dev);
            let wg = random(&mut r, &[i, h], dtype, -0.5, 0.5, &dev);
            let wu = random(&mut r, &[i, h], dtype, -0.5, 0.5, &dev);
            let wd = random(&mut r, &[h, i], dtype, -0.5, 0.5, &dev);
            let args = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
            check(&format!("mlp m={rows}"), mlp_checkpoint_layout_fused(), &args, dtype);
        }
    }
}

#[test]
fn batched_left_operands_fold_into_rows() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(24);
    for dtype in DTYPES {
        for rows in [1, 3, 17] {
            let x = random(&mut r, &[3, rows, 33], dtype, -1.0, 1.0, &dev);
            let w = random(&mut r, &[33, 17], dtype, -0.5, 0.5, &dev);
            let b = random(&mut r, &[17], dtype, -0.5, 0.5, &dev);
            check(
                &format!("batched gemm [3, {rows}, 33]"),
                gemm_bias_gelu_fused(),
                &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)],
                dtype,
            );
        }
    }
}

#[test]
fn attention_scores_match_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(25);
    for dtype in DTYPES {
        for (s, d) in [(1, 8), (3, 5), (17, 33), (127, 64)] {
            let q = random(&mut r, &[s, d], dtype, -1.0, 1.0, &dev);
            let k = random(&mut r, &[s, d], dtype, -1.0, 1.0, &dev);
            let scale = 1.0 / (d as f32).sqrt();
            check(
                &format!("attention s={s} d={d}"),
                attention_scores_fused(),
                &[fuse::arg(&q), fuse::arg(&k), fuse::arg(&scale)],
                dtype,
            );
            // batched: [b, s, d] x [b, d, s]
            let qb = random(&mut r, &[2, s, d], dtype, -1.0, 1.0, &dev);
            let kb = random(&mut r, &[2, s, d], dtype, -1.0, 1.0, &dev);
            check(
                &format!("batched attention s={s} d={d}"),
                attention_scores_fused(),
                &[fuse::arg(&qb), fuse::arg(&kb), fuse::arg(&scale)],
                dtype,
            );
        }
    }
}

#[test]
fn transformer_block_method_matches_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(26);
    for dtype in DTYPES {
        for rows in ROWS {
            let (h, i) = (64, 97);
            let block = Block {
                norm: random(&mut r, &[h], dtype, 0.5, 1.5, &dev),
                gate: random(&mut r, &[i, h], dtype, -0.5, 0.5, &dev),
                up: random(&mut r, &[i, h], dtype, -0.5, 0.5, &dev),
                down: random(&mut r, &[h, i], dtype, -0.5, 0.5, &dev),
                eps: 1e-6,
            };
            let x = random(&mut r, &[rows, h], dtype, -1.0, 1.0, &dev);
            let y = block.forward(&x).expect("forward");
            assert_eq!((y.shape(), y.dtype()), (&[rows, h][..], dtype));
            let args = [
                fuse::arg(&x),
                fuse::arg(&block.norm),
                fuse::arg(&block.eps),
                fuse::arg(&block.gate),
                fuse::arg(&block.up),
                fuse::arg(&block.down),
            ];
            check(&format!("block m={rows}"), Block::forward_fused(), &args, dtype);
        }
    }
}
