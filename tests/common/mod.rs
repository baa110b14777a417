//! Shared by the integration tests: random tensors and comparison against the reference interpreter.
#![allow(dead_code)]

pub mod fused_fns;

use fuse::prelude::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Uniform in [lo, hi), never all zeros, stored in `dtype`.
pub fn random(rng: &mut SmallRng, shape: &[usize], dtype: DType, lo: f32, hi: f32) -> Tensor {
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu).and_then(|t| t.to_dtype(dtype)).expect("random tensor")
}

/// Relative L2 error a tensor of this dtype may show against the f64 reference.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 3e-3,
        DType::BF16 => 2e-2,
    }
}

/// Runs `f` fused and unfused and checks every output against the reference interpreter.
pub fn check_against_reference(what: &str, f: &FusedFn, args: &[fuse::Arg<'_>], dtype: DType) {
    let want = fuse::reference(f, args).unwrap_or_else(|e| panic!("{what}: reference failed: {e}"));
    for fusion in [Fusion::On, Fusion::Off] {
        let got = f.call_with(args, fusion).unwrap_or_else(|e| panic!("{what} ({fusion:?}): {e}"));
        assert_eq!(got.len(), want.len(), "{what}: output count");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), w.shape(), "{what} output {k} ({fusion:?}): shape");
            let gv: Vec<f32> = g.to_vec().expect("to_vec");
            let wv: Vec<f32> = w.to_vec().expect("to_vec");
            assert!(gv.iter().all(|v| v.is_finite()), "{what} output {k} ({fusion:?}): non-finite values");
            let err = fuse::rel_l2_error(&gv, &wv);
            let tol = tolerance(dtype);
            assert!(err <= tol, "{what} output {k} ({fusion:?}, {dtype}): relative error {err:.3e} > {tol:.1e}");
        }
    }
}
