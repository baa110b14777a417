//! The CUDA backend's stand-in when fuse is built without its `cuda` feature (no cudarc): the same paths
//! and types as `cuda/`, so the rest of the crate needs no `#[cfg]`. A `CudaDevice` cannot be made
//! (`CudaDevice::new` says why), so GPU tensors and GPU calls cannot exist, and every method on them is a
//! `match` on an uninhabited value. NVRTC reports itself unavailable.
//!
//! Public CUDA-only methods absent here: `CudaDevice::{context, stream, arch, sm_count, overlaps_launches,
//! set_launch_overlap, loaded_kernels, time_ms, time_queued_ms, queue_l2_flush}` and
//! `Tensor::{from_cuda_slice, to_cuda_slice}`.

use crate::Result;

/// Why there is no GPU in this build.
const NOT_BUILT: &str = "fuse was built without its `cuda` cargo feature (on by default; \
                         `default-features = false` turns it off)";

/// A GPU handle; uninhabited in a build without the `cuda` feature.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CudaDevice {}

impl CudaDevice {
    /// Always `Error::CudaUnavailable`: this build has no CUDA backend.
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        Err(crate::Error::CudaUnavailable { reason: format!("cannot open GPU {ordinal}: {NOT_BUILT}") })
    }

    pub fn ordinal(&self) -> usize {
        match *self {}
    }

    pub fn set_poison_allocations(&self, _on: bool) {
        match *self {}
    }

    pub fn synchronize(&self) -> Result<()> {
        match *self {}
    }
}

impl CudaDevice {
    pub(crate) fn capture_graph(&self, _step: &mut dyn FnMut() -> Result<()>) -> Result<capture::CapturedGraph> {
        match *self {}
    }

    pub(crate) fn capture_one_launch(
        &self,
        _step: &mut dyn FnMut() -> Result<()>,
        _persistent: bool,
    ) -> Result<(capture::CapturedGraph, crate::graph::OneLaunchReport)> {
        match *self {}
    }
}

pub(crate) mod capture {
    /// A recorded graph; none can exist without a GPU.
    pub(crate) enum CapturedGraph {}

    impl CapturedGraph {
        pub(crate) fn launch(&self) -> crate::Result<()> {
            match *self {}
        }

        pub(crate) fn arena_bytes(&self) -> usize {
            match *self {}
        }

        pub(crate) fn kernel_names(&self) -> crate::Result<Vec<String>> {
            match *self {}
        }
    }
}

/// The kernels a GPU call would launch: nothing launches them here, so none are kept.
pub(crate) struct PlanKernels;

impl PlanKernels {
    pub(crate) fn from_specs(_groups: Vec<Vec<fuse_ir::codegen::KernelSpec>>) -> PlanKernels {
        PlanKernels
    }
}

pub(crate) type KernelCache = std::sync::OnceLock<PlanKernels>;

pub(crate) mod driver {
    use std::sync::{Mutex, MutexGuard};

    /// Locks a mutex, recovering the data if another thread panicked while holding it (as `cuda/driver.rs`).
    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub(crate) mod storage {
    use super::CudaDevice;
    use crate::host::CpuData;
    use crate::Result;
    use fuse_ir::DType;

    /// Device memory; uninhabited, as there is no device.
    pub(crate) enum CudaStorage {}

    impl CudaStorage {
        pub(crate) fn upload(device: &CudaDevice, _data: &CpuData) -> Result<CudaStorage> {
            match *device {}
        }

        pub(crate) fn write_from_host<T: Copy>(&self, _at: usize, _values: &[T]) -> Result<()> {
            match *self {}
        }

        pub(crate) fn download(&self) -> Result<CpuData> {
            match *self {}
        }

        pub(crate) fn download_range(&self, _start: usize, _len: usize) -> Result<CpuData> {
            match *self {}
        }

        pub(crate) fn dtype(&self) -> DType {
            match *self {}
        }

        pub(crate) fn device(&self) -> &CudaDevice {
            match *self {}
        }
    }
}

pub(crate) mod exec {
    use super::{CudaDevice, KernelCache};
    use crate::call::GroupRun;
    use crate::{Arg, Result, Tensor};
    use fuse_ir::{Graph, Plan};

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn execute(
        _function: &str,
        _g: &Graph,
        _plan: &Plan,
        _args: &[Arg<'_>],
        device: &CudaDevice,
        _timed: bool,
        _library_only: bool,
        _cache: Option<&KernelCache>,
    ) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
        match *device {}
    }
}

pub(crate) mod compile {
    pub(crate) mod nvrtc {
        pub use crate::compile_reports::{ptxas_check, NvrtcError, PtxasReport};

        /// Always `false`: NVRTC is loaded through cudarc, which this build leaves out.
        pub fn nvrtc_available() -> bool {
            false
        }

        pub fn nvrtc_version() -> Option<(i32, i32)> {
            None
        }

        /// Always a `load` error naming the missing feature.
        pub fn compile_ptx(name: &str, _source: &str, _defines: &[String], _arch: &str) -> Result<String, NvrtcError> {
            Err(NvrtcError {
                kernel: name.to_string(),
                stage: "load",
                message: super::super::NOT_BUILT.to_string(),
                log: String::new(),
                numbered_source: String::new(),
            })
        }
    }
}
