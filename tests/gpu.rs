//! The GPU-only suite: tensors and devices, eager ops against the CPU, every GEMM path forced (templates and
//! libraries), the sanitizer cases. Every op and kind of group against the reference runs on both devices
//! from tests/numerics.rs (`case::cuda`). Every allocation on the GPU starts as NaN bytes, so an element a
//! kernel fails to write shows.
//!
//! Without a GPU each test prints `skipped: no CUDA device` and passes, unless `FUSE_TEST_GPU=1` (the GPU
//! machine's runner sets it), which turns a missing GPU into a failure.

#[path = "common/decode_step.rs"]
mod decode_step;
#[path = "common/fused_fns.rs"]
mod fused_fns;
#[path = "gpu/interop.rs"]
mod interop;
#[path = "gpu/ops.rs"]
mod ops;
#[path = "gpu/sanitize.rs"]
mod sanitize;
#[path = "gpu/skinny.rs"]
mod skinny;
#[path = "gpu/tensors.rs"]
mod tensors;

use fuse::prelude::*;
pub use fuse::testing::{random, tolerance, TestRng};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

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

pub fn rng(seed: u64) -> TestRng {
    TestRng::new(seed)
}

/// Asserts that `got` is on the GPU and matches `want` (`fuse::testing::assert_close`).
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, dtype: DType) {
    assert!(got.device().is_cuda(), "{what}: result on {}", got.device());
    fuse::testing::assert_close(what, got, want, dtype, got.device());
}

/// Runs `f` on the GPU fused and unfused and checks every output against the reference interpreter.
pub fn check(what: &str, f: &FusedFn, args: &[fuse::Arg<'_>], dtype: DType) {
    let dev = args.iter().find_map(|a| match a {
        fuse::Arg::Tensor(t) => Some(t.device().clone()),
        fuse::Arg::Scalar(_) => None,
    });
    let dev = dev.unwrap_or_else(|| panic!("{what}: no tensor argument"));
    assert!(dev.is_cuda(), "{what}: arguments on {dev}");
    fuse::testing::check_against_reference(what, f, args, dtype, &dev);
}
