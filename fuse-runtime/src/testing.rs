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
