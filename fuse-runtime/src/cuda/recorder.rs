//! The work queued while a step is captured for one launch (`CudaGraph::capture_one_launch`): each launch of
//! fuse's own kernels (function, geometry, argument words) and each memset and device copy, in stream order,
//! so that `one_launch/` can run them again as the tasks of one persistent kernel. One `Recorder` per
//! device; off (and free) unless such a capture runs. A launch's geometry (`KernelDims`) is defined here, below
//! the device that holds the recorder, and used by every launcher (`exec/launch.rs` re-exports it).

use super::driver::lock;
use cudarc::driver::CudaFunction;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How a kernel launches: blocks, threads per block, blocks per cluster (1: no cluster), dynamic shared
/// memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelDims {
    pub grid: u32,
    pub block: u32,
    pub cluster: u32,
    pub shared_bytes: u32,
    /// The launch may overlap the kernel before it where the device allows (see `launch_kernel`).
    pub overlap: bool,
}

/// One launch as it was queued (`dims.overlap`: it did overlap the kernel before, programmatic dependent
/// launch being on: it waits in `fuse_grid_wait`).
#[derive(Clone)]
pub(crate) struct RecordedLaunch {
    pub name: String,
    pub function: CudaFunction,
    pub dims: KernelDims,
    pub words: Vec<u64>,
}

/// One piece of recorded work.
#[derive(Clone)]
pub(crate) enum RecordedOp {
    Kernel(RecordedLaunch),
    /// `bytes` bytes at `address` set to `value`.
    Fill {
        address: u64,
        bytes: usize,
        value: u8,
    },
    /// `bytes` bytes copied from `from` to `to` (device memory, not overlapping).
    Copy {
        from: u64,
        to: u64,
        bytes: usize,
    },
}

impl RecordedOp {
    pub(crate) fn is_kernel(&self) -> bool {
        matches!(self, RecordedOp::Kernel(_))
    }
}

#[derive(Default)]
pub(crate) struct Recorder {
    on: AtomicBool,
    ops: Mutex<Vec<RecordedOp>>,
}

impl Recorder {
    /// Starts recording (forgetting anything recorded before).
    pub(crate) fn start(&self) {
        lock(&self.ops).clear();
        self.on.store(true, Ordering::Release);
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    pub(crate) fn record(&self, op: RecordedOp) {
        lock(&self.ops).push(op);
    }

    /// Stops recording and returns what was recorded.
    pub(crate) fn finish(&self) -> Vec<RecordedOp> {
        self.on.store(false, Ordering::Release);
        std::mem::take(&mut *lock(&self.ops))
    }
}
