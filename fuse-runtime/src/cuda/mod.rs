//! The CUDA backend: executes the same plans as the CPU backend, one launch per generated kernel, cuBLAS
//! for the matmuls. Rooms, each importing only those listed before it:
//!
//! - `driver`: driver errors and panic-safe locking, shared by every module here;
//! - `compile/`: CUDA C to a loaded kernel (NVRTC, the on-disk cubin cache, the in-memory module cache);
//! - `arena`: a CUDA graph capture's memory; `queueing`: who queues on a GPU's stream, and the capture
//!   regime;
//! - `device`: one context and one non-default stream per GPU, created once per process and shared;
//! - `storage`: device memory of a tensor (bytes + dtype), host <-> device copies; `interop`: tensors
//!   over memory made elsewhere;
//! - `gemm/`: matmuls (cuBLAS mapping, cuBLASLt, the GEMM templates' configs and operands) and the
//!   libraries' warm-up;
//! - `exec/`: the plan executor (kernels, the `FuseArgs` ABI, launches, launch plans, GEMM paths, tuning);
//! - `custom_kernel`: a user's own CUDA kernel on the same compile path and launches (public as
//!   `fuse::custom_kernel`);
//! - `recorder` (below `device`, which holds one): the work queued while a step is captured for one launch;
//!   `one_launch/`: that work rebuilt as persistent kernels generated from the kernels' sources
//!   (`CudaGraph::capture_one_launch`), built on `custom_kernel`.
//!
//! Nothing here imports the CPU backend: values and call types come from `crate::call`, and the
//! dispatcher (`crate::exec`) decides which backend runs a call.

mod arena;
mod buffers;
pub(crate) mod capture;
pub(crate) mod compile;
pub mod custom_kernel;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod exec;
mod gemm;
mod interop;
#[cfg(feature = "cuda")]
pub(crate) mod nccl;
mod one_launch;
mod queueing;
pub(crate) mod recorder;
pub(crate) mod storage;

pub use device::CudaDevice;
pub(crate) use exec::kernels::{KernelCache, PlanKernels};

impl CudaDevice {
    /// The `ordinal`-th GPU, set up on first use (the cuBLAS and cuBLASLt handles then warm up in the
    /// background: `gemm::warm_up`). Errors (never panics) when the driver library is missing, there is no
    /// such GPU, or the context cannot be created.
    pub fn new(ordinal: usize) -> crate::Result<CudaDevice> {
        device::open(ordinal, gemm::warm_up)
    }
}
