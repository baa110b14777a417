//! `CudaGraph`: a step of many fused calls and eager ops on one GPU, recorded once and replayed as one
//! launch (CUDA graphs), so that the host's per-call work is paid once instead of on every step.
//!
//! ```no_run
//! // In a user's crate these are `fuse::...`: the facade re-exports this crate.
//! use fuse_runtime::{exp, CudaGraph, DType, Device, Tensor};
//! # fn main() -> fuse_runtime::Result<()> {
//! let dev = Device::cuda_if_available(0);
//! let x = Tensor::randn_seeded(0.0, 1.0, &[4, 64], 1, &dev)?;
//! let out = Tensor::zeros(&[4, 64], DType::F32, &dev)?;
//! // Run the step once first: kernels compile and GEMM paths are tuned on first use, outside the capture.
//! out.slice_set(&exp(&x)?, 0, 0)?;
//! let (x2, out2) = (x.clone(), out.clone());
//! let mut step = CudaGraph::capture(&dev, move || {
//!     out2.slice_set(&exp(&x2)?, 0, 0)?; // results go into memory made before the capture
//!     Ok(())
//! })?;
//! step.replay()?; // write new values into x between replays (slice_set): the graph reads them again
//! let y = out.to_vec::<f32>()?;
//! # Ok(()) }
//! ```
//!
//! Inside the closure, on a GPU: no synchronisation, no copy to or from the host (`to_vec`,
//! `Tensor::from_vec`), no first-time work (compiling, tuning: run the step once
//! before capturing it); each is an `Error::Capture` naming it. Values that change from step to step (token
//! ids, positions) live in tensors made before the capture, written between replays (`slice_set`), and read
//! by ops that take them as tensors (`embedding`, `slice_set` with a tensor offset, `attention_len`). Memory
//! that ops allocate during the capture is the graph's: each replay writes the same places, and a tensor
//! made during the capture that the closure keeps shows what the last replay wrote.
//!
//! On the CPU, or with `FUSE_GRAPHS=off`, nothing is recorded: `capture` keeps the closure and `replay`
//! calls it, so the same code runs (and can be debugged) without graphs.

use crate::{Device, Result};

/// A recorded step (see the module docs); `'a` is what the step's closure borrows (kept for replays that
/// call it: on the CPU and with `FUSE_GRAPHS=off`).
pub struct CudaGraph<'a> {
    kind: Kind<'a>,
    /// How a step captured for one launch runs ([`CudaGraph::capture_one_launch`]).
    one_launch: Option<OneLaunchReport>,
}

/// How a step captured by [`CudaGraph::capture_one_launch`] runs: which of its recorded launches became the
/// tasks of persistent kernels, and why the others stay launches of their own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OneLaunchReport {
    /// Kernel launches the step made when it was recorded.
    pub launches: usize,
    /// Of those, the ones that now run as tasks of a persistent kernel.
    pub as_tasks: usize,
    /// Persistent kernels the step launches (one when every launch could be a task).
    pub step_kernels: usize,
    /// Blocks of each persistent kernel (as many as the GPU holds at once, at most its tasks).
    pub blocks: Vec<usize>,
    /// Distinct kernels each persistent kernel runs tasks of.
    pub task_kernels: Vec<usize>,
    /// Bytes of local memory a thread of each persistent kernel takes (its stack: registers spilled by its
    /// task bodies, and their calls), as the driver compiled it.
    pub local_bytes: Vec<usize>,
    /// Each launch that stays its own, with why (`"name: reason"`), or why the whole step stays the
    /// recorded graph.
    pub kept: Vec<String>,
}

impl OneLaunchReport {
    /// Launches of one replay: the persistent kernels and the launches kept.
    pub fn launches_per_step(&self) -> usize {
        if self.as_tasks == 0 {
            return self.launches;
        }
        self.step_kernels + self.kept.len()
    }
}

enum Kind<'a> {
    Captured(crate::cuda::capture::CapturedGraph),
    /// Not recorded (CPU, or `FUSE_GRAPHS=off`): replaying calls the closure.
    Plain(Box<dyn FnMut() -> Result<()> + 'a>),
}

impl<'a> CudaGraph<'a> {
    /// Records the GPU work `step` queues on `device` (running nothing). On the CPU or with
    /// `FUSE_GRAPHS=off`, keeps `step` to call on each replay instead.
    pub fn capture(device: &Device, mut step: impl FnMut() -> Result<()> + 'a) -> Result<CudaGraph<'a>> {
        match device {
            Device::Cuda(gpu) if crate::env::graphs_on() => {
                let graph = gpu.capture_graph(&mut step)?;
                Ok(CudaGraph { kind: Kind::Captured(graph), one_launch: None })
            }
            _ => Ok(CudaGraph { kind: Kind::Plain(Box::new(step)), one_launch: None }),
        }
    }

    /// Records `step` as [`CudaGraph::capture`] does, then runs its kernel launches as one persistent kernel
    /// generated from their sources: each launch's blocks become tasks of resident blocks that wait for each
    /// other through counters in memory, in the order the stream gave them (checked before anything
    /// launches). A launch that cannot be a task (a cluster launch, more than 256 threads a block, a kernel
    /// fuse did not generate) stays a launch of its own in its place; a step with work that was not a fuse
    /// kernel (a copy, a library matmul) stays the recorded graph. [`CudaGraph::one_launch_report`] says which.
    /// Replays compute what the recorded graph would, bit for bit (the same kernels in the same order).
    /// `FUSE_DEBUG=1` prints the report, `4` the generated kernel's source.
    /// On the CPU or with `FUSE_GRAPHS=off`, keeps `step` as `capture` does.
    pub fn capture_one_launch(device: &Device, step: impl FnMut() -> Result<()> + 'a) -> Result<CudaGraph<'a>> {
        Self::capture_for_one_launch(device, step, true)
    }

    /// Records `step` exactly as [`CudaGraph::capture_one_launch`] does (the same kernels: the forms a task
    /// takes, such as the decode attention without clusters and a template for every matmul that has one)
    /// and keeps it as that recorded graph: what the one-launch step computes, bit for bit, launch by
    /// launch, so it is the one-launch step's oracle and its baseline. On the CPU or with
    /// `FUSE_GRAPHS=off`, keeps `step` as `capture` does.
    pub fn capture_one_launch_as_graph(
        device: &Device,
        step: impl FnMut() -> Result<()> + 'a,
    ) -> Result<CudaGraph<'a>> {
        Self::capture_for_one_launch(device, step, false)
    }

    fn capture_for_one_launch(
        device: &Device,
        mut step: impl FnMut() -> Result<()> + 'a,
        persistent: bool,
    ) -> Result<CudaGraph<'a>> {
        match device {
            Device::Cuda(gpu) if crate::env::graphs_on() => {
                let (graph, report) = gpu.capture_one_launch(&mut step, persistent)?;
                if crate::env::debug_level() >= 1 {
                    eprintln!("fuse: one-launch step: {report:?}");
                }
                Ok(CudaGraph { kind: Kind::Captured(graph), one_launch: Some(report) })
            }
            _ => Ok(CudaGraph { kind: Kind::Plain(Box::new(step)), one_launch: None }),
        }
    }

    /// How the step runs when it was captured by [`CudaGraph::capture_one_launch`] on a GPU (`None`
    /// otherwise).
    pub fn one_launch_report(&self) -> Option<&OneLaunchReport> {
        self.one_launch.as_ref()
    }

    /// Runs the step once more: one graph launch queued on the GPU (returns before it finishes; reading a
    /// result waits for it), or a call of the closure when nothing was recorded.
    pub fn replay(&mut self) -> Result<()> {
        match &mut self.kind {
            Kind::Captured(graph) => graph.launch(),
            Kind::Plain(step) => step(),
        }
    }

    /// Whether the step was recorded as a CUDA graph (false on the CPU and with `FUSE_GRAPHS=off`).
    pub fn is_recorded(&self) -> bool {
        matches!(self.kind, Kind::Captured(_))
    }

    /// Kernels the recorded step launches on each replay (`None` when not recorded): what fusion left of
    /// the step (FUSE_DEBUG=1 in fuse-models' decoder prints it per layer).
    pub fn kernel_count(&self) -> Result<Option<usize>> {
        Ok(self.kernel_names()?.map(|names| names.len()))
    }

    /// The function name of each kernel the recorded step launches ("?" where the driver gives none), in the
    /// driver's node order; `None` when not recorded.
    pub fn kernel_names(&self) -> Result<Option<Vec<String>>> {
        match &self.kind {
            Kind::Captured(graph) => graph.kernel_names().map(Some),
            Kind::Plain(_) => Ok(None),
        }
    }

    /// Bytes of GPU memory the recorded step's own allocations take (0 when not recorded).
    pub fn memory_bytes(&self) -> usize {
        match &self.kind {
            Kind::Captured(graph) => graph.arena_bytes(),
            Kind::Plain(_) => 0,
        }
    }
}
