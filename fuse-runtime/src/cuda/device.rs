//! One GPU: its context, its one non-default stream, the cuBLAS handle and the module cache. Created once
//! per process and ordinal, shared by every tensor and call on that GPU; everything is ordered on the one
//! stream, so no cross-stream events are needed.

use super::modules::ModuleCache;
use crate::{Error, Result};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{sys, CudaContext, CudaStream, DriverError};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A handle on one GPU; cheap to clone, compared by ordinal.
#[derive(Clone)]
pub struct CudaDevice {
    state: Arc<DeviceState>,
}

pub(crate) struct DeviceState {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// `sm_90` for an H100/H200: the NVRTC target (a CUBIN for the exact arch needs no driver JIT).
    arch: String,
    /// The compute capability's major number (9 for sm_90).
    arch_major: i32,
    sm_count: usize,
    /// Kernel launches may overlap the kernel before them (see [`CudaDevice::overlaps_launches`]).
    overlap: AtomicBool,
    /// Testing aid: fill every new allocation with NaN bytes.
    poison: AtomicBool,
    blas: Mutex<Option<CudaBlas>>,
    /// Scratch memory of `queue_l2_flush`.
    flush: Mutex<Option<super::storage::CudaStorage>>,
    pub(crate) modules: ModuleCache,
}

/// A driver error as the runtime's error, naming what was being done.
pub(crate) fn driver_error(op: &str, e: DriverError) -> Error {
    Error::Cuda { op: op.to_string(), message: format!("{e}") }
}

fn registry() -> &'static Mutex<BTreeMap<usize, Arc<DeviceState>>> {
    static DEVICES: OnceLock<Mutex<BTreeMap<usize, Arc<DeviceState>>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Locks a mutex, recovering the data if another thread panicked while holding it (the data are caches
/// and handles that a panic cannot leave half-written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CudaDevice {
    /// The `ordinal`-th GPU, set up on first use. Errors (never panics) when the driver library is missing,
    /// there is no such GPU, or the context cannot be created.
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        let mut devices = lock(registry());
        if let Some(state) = devices.get(&ordinal) {
            return Ok(CudaDevice { state: state.clone() });
        }
        let state = Arc::new(DeviceState::create(ordinal)?);
        devices.insert(ordinal, state.clone());
        prepare_libraries(CudaDevice { state: state.clone() });
        Ok(CudaDevice { state })
    }

    pub fn ordinal(&self) -> usize {
        self.state.ordinal
    }

    /// The context (for interop with other cudarc code).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.state.ctx
    }

    /// The stream every fuse operation on this GPU runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.state.stream
    }

    /// The NVRTC target architecture, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.state.arch
    }

    pub fn sm_count(&self) -> usize {
        self.state.sm_count
    }

    /// Whether fuse's kernels launch with programmatic dependent launch: a kernel may start while the one
    /// before it in the stream finishes, and waits for it before it touches memory. On for sm_90 and
    /// later (the first with `griddepcontrol`) unless `FUSE_PDL=off`.
    pub fn overlaps_launches(&self) -> bool {
        self.state.overlap.load(Ordering::Relaxed)
    }

    /// Turns programmatic dependent launch on or off for the launches that follow (to compare the two in
    /// one process); it stays off on GPUs older than sm_90, which lack it.
    pub fn set_launch_overlap(&self, on: bool) {
        self.state.overlap.store(on && self.state.arch_major >= 9, Ordering::Relaxed);
    }

    /// Testing aid: when on, every allocation on this GPU (kernel outputs, products, copies) starts filled
    /// with NaN bytes (0xFF), so an element a kernel fails to write shows up as NaN instead of a plausible
    /// leftover from the memory pool.
    pub fn set_poison_allocations(&self, on: bool) {
        self.state.poison.store(on, Ordering::Relaxed);
    }

    pub(crate) fn poisons_allocations(&self) -> bool {
        self.state.poison.load(Ordering::Relaxed)
    }

    /// Number of distinct kernels compiled and loaded on this GPU so far (a repeated call adds none).
    pub fn loaded_kernels(&self) -> usize {
        self.state.modules.len()
    }

    /// Milliseconds the GPU spends on what `work` queues on this device's stream, measured with CUDA events
    /// (so host time before the first launch counts only while the GPU waits for it). Waits for the work.
    pub fn time_ms(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        let cuda = |e| driver_error("event", e);
        let event = || self.state.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda);
        let (start, end) = (event()?, event()?);
        start.record(&self.state.stream).map_err(cuda)?;
        work()?;
        end.record(&self.state.stream).map_err(cuda)?;
        end.synchronize().map_err(cuda)?;
        Ok(f64::from(start.elapsed_ms(&end).map_err(cuda)?))
    }

    /// Milliseconds of each of `reps` runs of `work`, queued one after another with no wait between them
    /// (so host time is hidden whenever the GPU has work queued), each run preceded by `before` outside its
    /// events. This is how `triton.testing.do_bench` times the PyTorch peers (with
    /// [`CudaDevice::queue_l2_flush`] as `before`). Waits once, for the last run.
    pub fn time_queued_ms(
        &self,
        reps: usize,
        mut before: impl FnMut() -> Result<()>,
        mut work: impl FnMut() -> Result<()>,
    ) -> Result<Vec<f64>> {
        let cuda = |e| driver_error("event", e);
        let event = || self.state.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda);
        let mut spans = Vec::with_capacity(reps);
        for _ in 0..reps {
            before()?;
            let (start, end) = (event()?, event()?);
            start.record(&self.state.stream).map_err(cuda)?;
            work()?;
            end.record(&self.state.stream).map_err(cuda)?;
            spans.push((start, end));
        }
        self.synchronize()?;
        spans.iter().map(|(start, end)| start.elapsed_ms(end).map(f64::from).map_err(cuda)).collect()
    }

    /// Queues zeros written over `bytes` bytes (rounded up to whole words) of scratch memory, allocated on
    /// first use and kept for the next call of the same size: `do_bench`'s way of evicting the L2 cache
    /// before a timed run.
    pub fn queue_l2_flush(&self, bytes: usize) -> Result<()> {
        let mut scratch = lock(&self.state.flush);
        let words = bytes.div_ceil(4);
        if scratch.as_ref().is_none_or(|s| s.len() != words) {
            *scratch = None;
            *scratch = Some(super::storage::CudaStorage::alloc(self, crate::DType::F32, words)?);
        }
        scratch.as_ref().map_or(Ok(()), |s| s.zero())
    }

    /// Waits until all work queued on this GPU's stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.state.stream.synchronize().map_err(|e| driver_error("stream synchronize", e))
    }

    pub(crate) fn state(&self) -> &DeviceState {
        &self.state
    }

    /// The cuBLAS handle (created on first use), locked: cuBLAS handles are not thread-safe.
    pub(crate) fn blas(&self) -> Result<MutexGuard<'_, Option<CudaBlas>>> {
        let mut guard = lock(&self.state.blas);
        if guard.is_none() {
            let blas = CudaBlas::new(self.state.stream.clone())
                .map_err(|e| Error::Cuda { op: "cublas create".into(), message: format!("{e:?}") })?;
            *guard = Some(blas);
        }
        Ok(guard)
    }
}

impl DeviceState {
    fn create(ordinal: usize) -> Result<DeviceState> {
        // SAFETY: only tries to open the driver library; loading it has no other effect.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::CudaUnavailable {
                reason: "the CUDA driver library (libcuda.so) cannot be loaded: no NVIDIA driver on this machine"
                    .into(),
            });
        }
        let unavailable = |what: &str, e: DriverError| Error::CudaUnavailable { reason: format!("{what}: {e}") };
        let count = CudaContext::device_count().map_err(|e| unavailable("counting GPUs", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::CudaUnavailable { reason: format!("asked for GPU {ordinal}, the machine has {count}") });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| unavailable("creating the context", e))?;
        // Everything runs on one stream, so cudarc's per-allocation events would only cost time.
        // SAFETY: no allocation of this context exists yet, and fuse uses no other stream on it.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| unavailable("creating the stream", e))?;
        let (major, minor) = ctx.compute_capability().map_err(|e| unavailable("reading the compute capability", e))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| unavailable("reading the SM count", e))?;
        keep_freed_memory_pooled(&ctx);
        Ok(DeviceState {
            ordinal,
            ctx,
            stream,
            arch: format!("sm_{major}{minor}"),
            sm_count: sm_count.max(1) as usize,
            overlap: AtomicBool::new(major >= 9 && crate::fused::env::launch_overlap()),
            arch_major: major,
            poison: AtomicBool::new(false),
            blas: Mutex::new(None),
            flush: Mutex::new(None),
            modules: ModuleCache::default(),
        })
    }
}

/// Creates the cuBLAS and cuBLASLt handles and their workspaces on a background thread: creating them takes
/// over 100 ms, which a program would otherwise wait for in its first matmul; a model is usually still
/// loading its weights when they are ready. A failure here is silent: the first matmul then tries again
/// and reports it.
fn prepare_libraries(device: CudaDevice) {
    let spawned = std::thread::Builder::new().name("fuse-cublas-setup".into()).spawn(move || {
        if device.context().bind_to_thread().is_err() {
            return;
        }
        if let Ok(guard) = device.blas() {
            if let Some(blas) = guard.as_ref() {
                super::gemm::ensure_workspace(&device, *blas.handle());
            }
        }
        let _ = super::lt::prepare(&device);
    });
    drop(spawned);
}

/// Tells the driver's stream-ordered allocator to keep freed memory for reuse instead of returning it at
/// every synchronisation: intermediates of one call are then served from the pool on the next call.
fn keep_freed_memory_pooled(ctx: &CudaContext) {
    if !ctx.has_async_alloc() {
        return;
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold: u64 = u64::MAX;
    // SAFETY: `pool` is written by the driver for a valid device; the attribute takes a u64 by pointer.
    // A failure only means freed memory goes back to the driver, so it is ignored.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) == sys::CUresult::CUDA_SUCCESS {
            let _ = sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            );
        }
    }
}

impl PartialEq for CudaDevice {
    fn eq(&self, other: &Self) -> bool {
        self.state.ordinal == other.state.ordinal
    }
}

impl Eq for CudaDevice {}

impl Hash for CudaDevice {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.state.ordinal.hash(h)
    }
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaDevice({}, {})", self.state.ordinal, self.state.arch)
    }
}
