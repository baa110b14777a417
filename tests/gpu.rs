//! The GPU suite: every op and every kind of group, run on CUDA device 0 fused and unfused, against the
//! reference interpreter (CPU, f64) in f32, f16 and bf16 at rows 1, 3, 17, 127, 4095 and odd inner sizes.
//! Every allocation on the GPU starts as NaN bytes, so an element a kernel fails to write shows.
//!
//! Without a GPU each test prints `skipped: no CUDA device` and passes, unless `FUSE_TEST_GPU=1` (the GPU
//! machine's runner sets it), which turns a missing GPU into a failure.


#[path = "common/fused_fns.rs"]
mod fused_fns;
#[path = "gpu/groups.rs"]
mod groups;
#[path = "gpu/ops.rs"]
mod ops;
#[path = "gpu/sanitize.rs"]
mod sanitize;
#[path = "gpu/skinny.rs"]
mod skinny;
#[path = "gpu/tensors.rs"]
mod tensors;

use fuse::prelude::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
pub const ROWS: [usize; 5] = [1, 3, 17, 127, 4095];

/// Tests share the GPU (read) except those that count what the whole device did (write).
static GPU_USE: RwLock<()> = RwLock::new(());

/// CUDA device 0 with poisoned allocations and a shared hold on it, or `None` (after saying so) when there
/// is none.
pub fn gpu() -> Option<(Device, RwLockReadGuard<'static, ()>)> {
    let hold = GPU_USE.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    fuse::testing::gpu_or_skip().map(|dev| (dev, hold))
}

/// Like [`gpu`], holding the GPU alone (no other test launches anything meanwhile).
pub fn gpu_alone() -> Option<(Device, RwLockWriteGuard<'static, ()>)> {
    let hold = GPU_USE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    fuse::testing::gpu_or_skip().map(|dev| (dev, hold))
}


pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Uniform in [lo, hi) (never all zeros), rounded to `dtype`, on `dev`.
pub fn random(rng: &mut SmallRng, shape: &[usize], dtype: DType, lo: f32, hi: f32, dev: &Device) -> Tensor {
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .and_then(|t| t.to_device(dev))
        .expect("random tensor on the device")
}

/// Relative L2 error a GPU result of this dtype may show against the f64 reference.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 4e-3,
        DType::BF16 => 2.5e-2,
    }
}

/// Asserts `got` is on the GPU, has `want`'s shape, only finite values, and is within tolerance of it.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, dtype: DType) {
    assert!(got.device().is_cuda(), "{what}: result on {}", got.device());
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g: Vec<f32> = got.to_vec().expect("to_vec");
    let w: Vec<f32> = want.to_vec().expect("to_vec");
    if let Some(i) = g.iter().position(|v| !v.is_finite()) {
        panic!("{what}: element {i} is {} (unwritten or overflowed); the reference has {}", g[i], w[i]);
    }
    let err = fuse::rel_l2_error(&g, &w);
    let tol = tolerance(dtype);
    assert!(err <= tol, "{what} ({dtype}): relative error {err:.3e} > {tol:.1e}");
}

/// Runs `f` on the GPU fused and unfused and checks every output against the reference interpreter.
pub fn check(what: &str, f: &FusedFn, args: &[fuse::Arg<'_>], dtype: DType) {
    let want = fuse::reference(f, args).unwrap_or_else(|e| panic!("{what}: reference failed: {e}"));
    for fusion in [Fusion::On, Fusion::Off] {
        let got = f.call_with(args, fusion).unwrap_or_else(|e| panic!("{what} ({fusion:?}): {e}"));
        assert_eq!(got.len(), want.len(), "{what}: output count");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{what} output {k} ({fusion:?})"), g, w, dtype);
        }
    }
}
