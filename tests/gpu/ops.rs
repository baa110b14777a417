//! Pointwise and row-reduction groups on the GPU, and the eager ops against their CPU twins.

use crate::fused_fns::*;
use crate::{check, gpu, random, rng, tolerance, DTYPES, ROWS};
use fuse::prelude::*;

#[test]
fn unary_ops_match_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(11);
    for dtype in DTYPES {
        for rows in ROWS {
            for inner in [1, 33, 255] {
                let x = random(&mut r, &[rows, inner], dtype, -2.0, 2.0, &dev);
                let args = [fuse::arg(&x)];
                check(&format!("unary_a [{rows}, {inner}]"), unary_a_fused(), &args, dtype);
                check(&format!("unary_b [{rows}, {inner}]"), unary_b_fused(), &args, dtype);
            }
        }
    }
}

#[test]
fn binary_ops_broadcast_and_match_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(12);
    for dtype in DTYPES {
        for rows in ROWS {
            let shape = [rows, 65];
            let a = random(&mut r, &shape, dtype, -2.0, 2.0, &dev);
            // full, row-broadcast and column-broadcast right operands, and a .t() view
            for bshape in [shape.to_vec(), vec![shape[1]], vec![shape[0], 1]] {
                let b = random(&mut r, &bshape, dtype, -2.0, 2.0, &dev);
                let s = 1.25f32;
                check(
                    &format!("binary {shape:?} {bshape:?}"),
                    binary_fused(),
                    &[fuse::arg(&a), fuse::arg(&b), fuse::arg(&s)],
                    dtype,
                );
            }
            let bt = random(&mut r, &[shape[1], shape[0]], dtype, -2.0, 2.0, &dev).t().expect("t");
            check(
                &format!("binary {shape:?} transposed"),
                binary_fused(),
                &[fuse::arg(&a), fuse::arg(&bt), fuse::arg(&0.5f32)],
                dtype,
            );
        }
    }
}

#[test]
fn reductions_softmax_rms_norm_match_reference() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(13);
    for dtype in DTYPES {
        for rows in ROWS {
            // a row shorter than a block, an odd one, and one longer than a block's stride
            for inner in [1, 17, 4097] {
                if rows * inner > 1 << 22 {
                    continue;
                }
                let x = random(&mut r, &[rows, inner], dtype, -3.0, 3.0, &dev);
                check(&format!("reductions [{rows}, {inner}]"), reductions_fused(), &[fuse::arg(&x)], dtype);
                let w = random(&mut r, &[inner], dtype, 0.5, 1.5, &dev);
                let eps = 1e-5f64;
                check(
                    &format!("rms_norm [{rows}, {inner}]"),
                    norm_and_cast_fused(),
                    &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&eps)],
                    dtype,
                );
            }
        }
    }
}

#[test]
fn rank_three_inputs_reduce_over_the_last_axis() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(14);
    for dtype in DTYPES {
        let x = random(&mut r, &[3, 17, 33], dtype, -3.0, 3.0, &dev);
        check("reductions [3, 17, 33]", reductions_fused(), &[fuse::arg(&x)], dtype);
    }
}

/// Eager ops (each a one-op graph) give the same answer on the GPU as on the CPU.
#[test]
fn eager_ops_match_the_cpu() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(15);
    for dtype in DTYPES {
        let x = random(&mut r, &[17, 33], dtype, -2.0, 2.0, &dev);
        let b = random(&mut r, &[33], dtype, -2.0, 2.0, &dev);
        let xc = x.to_device(&Device::Cpu).expect("to cpu");
        let bc = b.to_device(&Device::Cpu).expect("to cpu");
        type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
        let cases: [(&str, Op); 8] = [
            ("silu", |x, _| silu(x)),
            ("gelu", |x, _| gelu(x)),
            ("x + b", |x, b| x + b),
            ("x * 3", |x, _| x * 3.0f32),
            ("maximum", |x, b| maximum(x, b)),
            ("softmax", |x, _| softmax(x)),
            ("sum", |x, _| x.sum(-1)),
            ("to f32", |x, _| x.to_dtype(DType::F32)),
        ];
        for (name, op) in cases {
            let got = op(&x, &b).unwrap_or_else(|e| panic!("{name} on the GPU: {e}"));
            let want = op(&xc, &bc).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
            assert!(got.device().is_cuda(), "{name}: result on {}", got.device());
            let (g, w): (Vec<f32>, Vec<f32>) = (got.to_vec().expect("to_vec"), want.to_vec().expect("to_vec"));
            let err = fuse::rel_l2_error(&g, &w);
            assert!(err <= tolerance(dtype), "{name} ({dtype}): GPU vs CPU relative error {err:.3e}");
        }
    }
}

/// Empty tensors: nothing to compute, except reductions over empty rows, which give the identity.
#[test]
fn empty_tensors() {
    let Some((dev, _gpu)) = gpu() else { return };
    let empty = Tensor::from_vec(Vec::<f32>::new(), &[0, 3], &dev).expect("empty");
    assert_eq!(exp(&empty).expect("exp").shape(), &[0, 3]);
    let rows = Tensor::from_vec(Vec::<f32>::new(), &[3, 0], &dev).expect("empty rows");
    assert_eq!(rows.sum(-1).and_then(|s| s.to_vec::<f32>()).expect("sum"), vec![0.0; 3]);
    assert_eq!(rows.max(-1).and_then(|s| s.to_vec::<f32>()).expect("max"), vec![f32::NEG_INFINITY; 3]);
    let k0 = Tensor::from_vec(Vec::<f32>::new(), &[0, 4], &dev).expect("k = 0");
    assert_eq!(rows.matmul(&k0).and_then(|p| p.to_vec::<f32>()).expect("matmul"), vec![0.0; 12]);
}
