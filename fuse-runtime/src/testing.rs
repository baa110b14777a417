//! For test suites that need a GPU (fuse's own, and users' of fuse): skip visibly where there is none.

use crate::Device;
use std::io::Write as _;

/// CUDA device 0 with every allocation poisoned (NaN bytes, so an element a kernel fails to write shows), or
/// `None` after printing `skipped: no CUDA device (why)` when there is none. With `FUSE_TEST_GPU=1` a missing
/// GPU panics instead: the GPU machine's runner sets it so that a skip cannot pass for a success there.
pub fn gpu_or_skip() -> Option<Device> {
    match Device::cuda(0) {
        Ok(dev) => {
            if let Device::Cuda(cuda) = &dev {
                cuda.set_poison_allocations(true);
            }
            Some(dev)
        }
        Err(e) => {
            if crate::env::gpu_required() {
                panic!("FUSE_TEST_GPU=1 but there is no CUDA device: {e}");
            }
            // Straight to stderr: libtest captures println!/eprintln! of passing tests, and a skip must be seen.
            let _ = writeln!(std::io::stderr(), "skipped: no CUDA device ({e})");
            None
        }
    }
}

// ---- Shared by every test suite (fuse's and users'): one random source, one tolerance table, one check. ----

use crate::{Arg, DType, FusedFn, Fusion, Tensor};

/// The generator of the test helpers: deterministic (SplitMix64), so that the same seed gives the same values
/// on every machine and for every device a case runs on.
#[derive(Clone, Debug)]
pub struct TestRng(fuse_ir::SplitMix64);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(fuse_ir::SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.0.unit()
    }
}

/// A tensor of `shape` with values uniform in `[lo, hi)` (never all zeros), rounded to `dtype`, on `dev`.
pub fn random(rng: &mut TestRng, shape: &[usize], dtype: DType, lo: f32, hi: f32, dev: &Device) -> Tensor {
    let data: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.uniform(lo, hi)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .and_then(|t| t.to_device(dev))
        .unwrap_or_else(|e| panic!("a random {dtype} tensor of shape {shape:?} on {dev}: {e}"))
}

/// The relative L2 error a result computed in `dtype` on `device` may show against the f64 reference. The GPU
/// is allowed more in f32: its sigmoid and silu use the hardware's exp2 and reciprocal approximations (README,
/// "Numerics on the GPU"); half types are bounded by their rounding either way.
pub fn tolerance(dtype: DType, device: &Device) -> f64 {
    match (dtype, device.is_cuda()) {
        (DType::F32, false) => 2e-5,
        (DType::F32, true) => 1e-4,
        (DType::F16, false) => 3e-3,
        (DType::F16, true) => 4e-3,
        (DType::BF16, _) => 2.5e-2,
        // Token ids (argmax) are exact.
        (DType::U32, _) => 0.0,
        // Nothing computes a block-quantized result; its values are compared after dequantizing (exact).
        (_, _) => 0.0,
    }
}

/// Asserts that `got` is on `device`, has `want`'s shape, holds only finite values (so an element a kernel
/// never wrote, NaN-poisoned on the GPU, shows) and is within [`tolerance`] of `want`.
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, dtype: DType, device: &Device) {
    assert_eq!(got.device(), device, "{what}: the result is on {}", got.device());
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g: Vec<f32> = got.to_vec().unwrap_or_else(|e| panic!("{what}: reading the result: {e}"));
    let w: Vec<f32> = want.to_vec().unwrap_or_else(|e| panic!("{what}: reading the reference: {e}"));
    if let Some(i) = g.iter().position(|v| !v.is_finite()) {
        panic!("{what}: element {i} is {} (unwritten or overflowed); the reference has {}", g[i], w[i]);
    }
    let (err, tol) = (crate::rel_l2_error(&g, &w), tolerance(dtype, device));
    assert!(err <= tol, "{what} ({dtype} on {device}): relative error {err:.3e} > {tol:.1e}");
}

/// Runs `f` fused and unfused on `args` (tensors on `device`) and checks every output against the reference
/// interpreter with [`assert_close`].
pub fn check_against_reference(what: &str, f: &FusedFn, args: &[Arg<'_>], dtype: DType, device: &Device) {
    let want = crate::reference(f, args).unwrap_or_else(|e| panic!("{what}: the reference failed: {e}"));
    for fusion in [Fusion::On, Fusion::Off] {
        let got = f.call_with(args, fusion).unwrap_or_else(|e| panic!("{what} ({fusion:?}): {e}"));
        assert_eq!(got.len(), want.len(), "{what} ({fusion:?}): output count");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{what} output {k} ({fusion:?})"), g, w, dtype, device);
        }
    }
}

/// One test case per behaviour, run on each device: for every `case` (a `fn case(dev: &Device)` in scope),
/// makes `case::cpu` (always runs) and `case::cuda` (on CUDA device 0, with poisoned allocations; skipped
/// visibly without a GPU, a failure then with `FUSE_TEST_GPU=1`, see [`gpu_or_skip`]).
///
/// ```
/// // In a user's crate these are `fuse::...`: the facade re-exports this crate.
/// use fuse_runtime::testing::{random, TestRng};
/// use fuse_runtime::{DType, Device};
///
/// fn negation_is_exact(dev: &Device) {
///     let x = random(&mut TestRng::new(1), &[3, 17], DType::F32, -1.0, 1.0, dev);
///     let y: Vec<f32> = (-&x).unwrap().to_vec().unwrap();
///     let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| -v).collect();
///     assert_eq!(y, want);
/// }
/// fuse_runtime::device_tests!(negation_is_exact);
/// # fn main() { negation_is_exact(&Device::Cpu); }
/// ```
#[macro_export]
macro_rules! device_tests {
    ($($case:ident),+ $(,)?) => {$(
        #[allow(non_snake_case)]
        mod $case {
            #[test]
            pub fn cpu() {
                super::$case(&$crate::Device::Cpu)
            }
            #[test]
            pub fn cuda() {
                if let Some(dev) = $crate::testing::gpu_or_skip() {
                    super::$case(&dev)
                }
            }
        }
    )+};
}
