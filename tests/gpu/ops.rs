//! Eager ops on the GPU against their CPU twins (the ops against the reference, on both devices:
//! tests/numerics.rs).

use crate::{gpu, random, rng, tolerance, DTYPES};
use fuse::prelude::*;

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
            assert!(err <= tolerance(dtype, &dev), "{name} ({dtype}): GPU vs CPU relative error {err:.3e}");
        }
    }
}
