//! One GPU: its context, its one non-default stream, the cuBLAS handle and the module cache. Created once
//! per process and ordinal, shared by every tensor and call on that GPU; everything is ordered on the one
//! stream, so no cross-stream events are needed.
//!
//! The libraries' warm-up on a new device (`gemm::warm_up`) is started by `CudaDevice::new` in `cuda/mod.rs`:
//! this module imports none of the modules that build on it. Who may queue on the stream, and the capture
//! regime, are `queueing.rs`; a capture's memory is `arena.rs`.

use super::arena::{check_capture, Arena};
use super::buffers::BufferCache;
use super::compile::{KernelOrigin, ModuleCache};
use super::driver::{driver_error, lock};
use super::queueing::{Entered, Queueing};
use super::recorder::Recorder;
use crate::{Error, Result};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Arrival counters of [`CudaDevice::zeroed_counters`] (256 KB).
pub(crate) const COUNTERS: usize = 1 << 16;

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
    /// The L2 cache in bytes, read once (each recorded task kernel's prefetch cap comes from it).
    l2_bytes: usize,
    /// Kernel launches may overlap the kernel before them (see [`CudaDevice::overlaps_launches`]).
    overlap: AtomicBool,
    /// Testing aid: fill every new allocation with NaN bytes.
    poison: AtomicBool,
    blas: Mutex<Option<CudaBlas>>,
    /// Pool memory no tensor holds any more, kept for the next allocation of its size (`buffers.rs`).
    buffers: Mutex<BufferCache<CudaSlice<u8>>>,
    /// Scratch memory of `queue_l2_flush`.
    flush: Mutex<Option<CudaSlice<u8>>>,
    /// Scratch memory of [`CudaDevice::workspace`].
    workspace: Mutex<Option<CudaSlice<u8>>>,
    /// The device's fault record (see [`CudaDevice::fault_address`]), made zero on first use.
    fault: Mutex<Option<CudaSlice<u64>>>,
    /// Arrival counters of kernels that merge their own blocks' partials (see [`CudaDevice::zeroed_counters`]),
    /// made zero on first use.
    counters: Mutex<Option<CudaSlice<u32>>>,
    /// Who is queueing work on the stream, and the capture, if any.
    queueing: Queueing,
    modules: ModuleCache,
    /// The launches queued while a step is captured for one launch.
    recorder: Recorder,
}

/// What a kernel found wrong, by the code it records (`fuse_model_fault` in the model kernels' common.cuh).
fn fault_error(code: u64, value: u64, limit: u64) -> Error {
    let (op, message) = match code {
        1 => ("embedding", format!("token id {value} is out of range for a vocabulary of {limit}")),
        2 => ("slice_set", format!("offset {value} leaves no room for the rows written (at most {limit} here)")),
        3 => ("attention_len", format!("a key count of lens is {value}, more than the {limit} keys k and v hold")),
        4 => ("attention_len", format!("a key count of lens is {value}, under causal fewer than the {limit} queries")),
        5 => ("gather", format!("gather index {value} is out of range for an axis of {limit}")),
        _ => ("kernel", format!("fault code {code} (value {value}, limit {limit})")),
    };
    Error::DeviceCheck { op, message }
}

/// Scratch memory of [`CudaDevice::workspace`], held until dropped.
pub(crate) struct Workspace<'a> {
    /// The device address of its first byte.
    pub address: u64,
    _guard: Option<MutexGuard<'a, Option<CudaSlice<u8>>>>,
}

fn registry() -> &'static Mutex<BTreeMap<usize, Arc<DeviceState>>> {
    static DEVICES: OnceLock<Mutex<BTreeMap<usize, Arc<DeviceState>>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// The `ordinal`-th GPU, set up on first use, and whether this call set it up. Errors (never panics) when
/// the driver library is missing, there is no such GPU, or the context cannot be created. `on_create` runs
/// once per GPU, with the registry still locked, before any other caller gets the device.
pub(crate) fn open(ordinal: usize, on_create: impl FnOnce(CudaDevice)) -> Result<CudaDevice> {
    let mut devices = lock(registry());
    if let Some(state) = devices.get(&ordinal) {
        return Ok(CudaDevice { state: state.clone() });
    }
    let state = Arc::new(DeviceState::create(ordinal)?);
    devices.insert(ordinal, state.clone());
    on_create(CudaDevice { state: state.clone() });
    Ok(CudaDevice { state })
}

impl CudaDevice {
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

    /// The compute capability's major number (9 on sm_90: thread-block clusters, programmatic launch).
    pub(crate) fn arch_major(&self) -> i32 {
        self.state.arch_major
    }

    pub fn sm_count(&self) -> usize {
        self.state.sm_count
    }

    /// The GPU's L2 cache in bytes (50 MB on an H100 or H200).
    pub(crate) fn l2_bytes(&self) -> usize {
        self.state.l2_bytes
    }

    /// The most shared memory one block may have, static and dynamic together, once a kernel opts in
    /// (227 KB on an H100 or H200).
    pub fn max_shared_bytes_per_block(&self) -> Result<usize> {
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
        let bytes = self
            .state
            .ctx
            .attribute(attribute)
            .map_err(|e| super::driver::driver_error("reading the shared memory a block may opt in to", e))?;
        Ok(bytes.max(0) as usize)
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
        self.state.overlap.store(on && self.arch_major() >= 9, Ordering::Relaxed);
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
        let len = bytes.div_ceil(4).checked_mul(4).ok_or_else(|| Error::Cuda {
            op: "alloc".into(),
            message: format!("{} elements of f32 overflow the address space", bytes.div_ceil(4)),
        })?;
        // At least one byte, as every allocation of the backend.
        let len = len.max(1);
        if scratch.as_ref().is_none_or(|s| s.len() != len) {
            *scratch = None;
            // SAFETY: uninitialised, and zeroed below before the caller's work can read it.
            *scratch = Some(unsafe { self.state.stream.alloc::<u8>(len) }.map_err(|e| driver_error("alloc", e))?);
        }
        let Some(s) = scratch.as_ref() else { return Ok(()) };
        let (address, _sync) = cudarc::driver::DevicePtr::device_ptr(s, &self.state.stream);
        // SAFETY: the address and byte count are this live allocation's; queued on the stream every use of
        // it is ordered on.
        unsafe { cudarc::driver::result::memset_d8_async(address, 0, s.len(), self.state.stream.cu_stream()) }
            .map_err(|e| driver_error("memset", e))
    }

    /// At least `bytes` bytes of scratch memory for kernels that hand partial results to a later kernel
    /// (attention's key splits): one buffer per GPU, reallocated only to grow (to a power of two), so that
    /// repeated calls allocate nothing. The caller keeps the returned guard until it has queued every launch
    /// that uses the memory: those launches are then in stream order with every other use, and no other
    /// thread can interleave its own or free the buffer (a reallocation frees the old one in stream order,
    /// after the work queued before). With poisoned allocations the bytes asked for are set to 0xFF each time.
    pub(crate) fn workspace(&self, bytes: usize) -> Result<Workspace<'_>> {
        let bytes = bytes.max(1);
        // A graph keeps the addresses its nodes use: its scratch memory is its own (the arena's), so that a
        // later call growing the shared one cannot free memory under it.
        if let Some(arena) = self.capture_arena() {
            return Ok(Workspace { address: arena.take(bytes)?, _guard: None });
        }
        let mut guard = lock(&self.state.workspace);
        if guard.as_ref().is_none_or(|w| w.len() < bytes) {
            *guard = None;
            let len = bytes.checked_next_power_of_two().unwrap_or(bytes);
            // SAFETY: uninitialised; the kernels that read it write it first (in stream order).
            *guard = Some(unsafe { self.state.stream.alloc::<u8>(len) }.map_err(|e| driver_error("alloc", e))?);
        }
        let Some(buffer) = guard.as_ref() else {
            return Err(Error::internal("workspace", "no buffer after allocating it"));
        };
        let address = cudarc::driver::DevicePtr::device_ptr(buffer, &self.state.stream).0;
        if self.poisons_allocations() {
            // SAFETY: the first `bytes` bytes of this live allocation, queued on the stream of every use.
            unsafe { cudarc::driver::result::memset_d8_async(address, 0xFF, bytes, self.state.stream.cu_stream()) }
                .map_err(|e| driver_error("memset", e))?;
        }
        Ok(Workspace { address, _guard: Some(guard) })
    }

    /// The arena that allocations come from while a graph is captured on this device.
    pub(crate) fn capture_arena(&self) -> Option<Arc<Arena>> {
        self.state.queueing.capture_arena()
    }

    pub(crate) fn is_capturing(&self) -> bool {
        self.state.queueing.is_capturing()
    }

    /// An error naming `what` while this thread captures a graph (it would wait for the GPU or read host
    /// memory); waits for another thread's capture to end.
    pub(crate) fn refuse_while_capturing(&self, what: &str) -> Result<()> {
        self.state.queueing.refuse_while_capturing(what)
    }

    /// Starts a capture's allocation regime (see `queueing.rs`): waits until no other thread is queueing
    /// work on this GPU, and makes other threads wait until it ends.
    pub(crate) fn begin_capture(&self, arena: Arc<Arena>) -> Result<()> {
        self.state.queueing.begin_capture(arena)
    }

    /// Ends the capture's allocation regime, frees the pool memory dropped during it and lets other
    /// threads' work on this GPU go on.
    pub(crate) fn end_capture(&self) {
        self.state.queueing.end_capture()
    }

    /// Marks this thread as queueing work on this GPU until the guard drops: it waits while another thread
    /// captures, and a capture waits for it. Nested calls on one thread enter once.
    pub(crate) fn enter(&self) -> Entered<'_> {
        self.state.queueing.enter()
    }

    /// Threads queueing work on this GPU now (between `enter` and the end of their guard), the caller
    /// included when it has entered: more than one means a timing may include another thread's kernels.
    pub(crate) fn queueing_threads(&self) -> usize {
        self.state.queueing.active()
    }

    /// While capturing: an error naming `what` if the capture is no longer valid (the driver invalidates a
    /// capture, without an error of its own, when a call it cannot record is made).
    pub(crate) fn check_capture(&self, what: &dyn Fn() -> String) -> Result<()> {
        check_capture(&self.state.stream, what)
    }

    /// Pool memory no tensor holds any more: kept for the next allocation of its size (freed when the cache
    /// is full), or freed after the capture when one is running (a free during it would be recorded into the
    /// graph and replayed).
    pub(crate) fn release(&self, buffer: CudaSlice<u8>) {
        let Some(buffer) = self.state.queueing.keep_until_capture_ends(buffer) else { return };
        let bytes = buffer.len();
        let full = crate::host_profile::time_release(|| lock(&self.state.buffers).put(bytes, buffer));
        drop(full);
    }

    /// The owner of another library's memory that no tensor reads any more: dropped after the work queued
    /// on the stream (after the capture, when one is running: a wait now would break it).
    /// With `then` (the owner's stream), that stream waits for fuse's queued work instead.
    pub(crate) fn release_external(&self, owner: Box<dyn std::any::Any + Send + Sync>, then: Option<sys::CUstream>) {
        let Some(owner) = self.state.queueing.keep_until_capture_ends(owner) else { return };
        // A failure here is a fault an earlier kernel left, which the next call reports; on failing to order
        // the streams, wait on the host instead.
        let ordered = then.is_some_and(|stream| unsafe { self.make_stream_wait(stream) }.is_ok());
        if !ordered {
            let _ = self.synchronize();
        }
        drop(owner);
    }

    /// Pool memory of exactly `bytes` for a new tensor: a kept buffer, else a new one from the stream-ordered
    /// pool (after freeing the kept ones when the pool is out of memory).
    pub(crate) fn pool_buffer(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        if let Some(buffer) = lock(&self.state.buffers).take(bytes) {
            return Ok(buffer);
        }
        // SAFETY: the memory is uninitialised; every caller writes it before reading it.
        match unsafe { self.stream().alloc::<u8>(bytes) } {
            Ok(buffer) => Ok(buffer),
            Err(_) if lock(&self.state.buffers).bytes() > 0 => {
                let kept = lock(&self.state.buffers).drain();
                drop(kept);
                // SAFETY: as above.
                unsafe { self.stream().alloc::<u8>(bytes) }.map_err(|e| driver_error("alloc", e))
            }
            Err(e) => Err(driver_error("alloc", e)),
        }
    }

    /// Waits for the work queued so far; a check a kernel failed in it is the error (`Error::DeviceCheck`).
    pub fn synchronize(&self) -> Result<()> {
        let _entered = self.enter();
        self.refuse_while_capturing("a synchronisation (waiting for the GPU)")?;
        self.state.stream.synchronize().map_err(|e| driver_error("stream synchronize", e))?;
        self.take_fault()
    }

    /// The device address of its fault record: four u64 words (code, value, limit, unused), zero while
    /// nothing failed. Kernels whose inputs the host cannot check without waiting for the GPU (an id in
    /// device memory, a position written by an earlier kernel) record the first failed check there and skip
    /// the access; the host reports it at the next synchronisation. This keeps steps free of host round trips,
    /// which a CUDA graph cannot contain.
    pub(crate) fn fault_address(&self) -> Result<u64> {
        let mut fault = lock(&self.state.fault);
        if fault.is_none() {
            self.refuse_while_capturing("making the fault record (run the step once before capturing it)")?;
            let zeros = self.state.stream.alloc_zeros::<u64>(4).map_err(|e| driver_error("alloc", e))?;
            *fault = Some(zeros);
        }
        let record = fault.as_ref().expect("made above");
        let (address, _sync) = cudarc::driver::DevicePtr::device_ptr(record, &self.state.stream);
        Ok(address)
    }

    /// The device address of `count` u32 counters that are zero before every kernel that uses them: a kernel
    /// whose blocks count their arrivals (attention's decode splits: the last block of a group merges the
    /// others' partials) leaves each counter it used at zero again when it ends. One buffer of
    /// [`COUNTERS`] counters per GPU, made zero on first use and never moved, so that a CUDA graph replays
    /// with the same address; kernels queued one after another on the one stream use it in turn. Making it
    /// while a graph is captured is an error (the zeroing could not be recorded): the step runs once before
    /// it is captured.
    pub(crate) fn zeroed_counters(&self, count: usize) -> Result<u64> {
        if count > COUNTERS {
            return Err(Error::Cuda {
                op: "counters".into(),
                message: format!("{count} arrival counters asked for, the device keeps {COUNTERS}"),
            });
        }
        let mut counters = lock(&self.state.counters);
        if counters.is_none() {
            if self.is_capturing() {
                return Err(Error::Capture {
                    what: "making the device's arrival counters while capturing a CUDA graph (run the op once before capturing it)".into(),
                });
            }
            let zeros = self.state.stream.alloc_zeros::<u32>(COUNTERS).map_err(|e| driver_error("alloc", e))?;
            *counters = Some(zeros);
        }
        let Some(buffer) = counters.as_ref() else {
            return Err(Error::internal("counters", "no buffer after making it"));
        };
        let (address, _sync) = cudarc::driver::DevicePtr::device_ptr(buffer, &self.state.stream);
        Ok(address)
    }

    /// After a synchronisation: the fault recorded since the last one, if any, as the error (the record is
    /// cleared for the next).
    pub(crate) fn take_fault(&self) -> Result<()> {
        let mut fault = lock(&self.state.fault);
        let Some(record) = fault.as_mut() else { return Ok(()) };
        let words = self.state.stream.clone_dtoh(record).map_err(|e| driver_error("read the fault record", e))?;
        if words[0] == 0 {
            return Ok(());
        }
        self.state.stream.memset_zeros(record).map_err(|e| driver_error("clear the fault record", e))?;
        Err(fault_error(words[0], words[1], words[2]))
    }

    /// The kernel `name` of `source` (whose fingerprint is `source_hash`) specialised by `defines` and
    /// compiled for `arch` (the GPU's own, or `sm_90a` for the wgmma template), loaded on first use.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn kernel(
        &self,
        function: &str,
        name: &str,
        source: &str,
        source_hash: u64,
        defines: &[String],
        arch: &str,
    ) -> Result<CudaFunction> {
        self.state.modules.kernel(&self.state.ctx, function, name, source, source_hash, defines, arch)
    }

    /// What a kernel this device loaded was compiled from (`None`: not loaded through its module cache).
    pub(crate) fn kernel_origin(&self, function: &CudaFunction) -> Option<KernelOrigin> {
        self.state.modules.origin(function)
    }

    /// The launches recorded while a step is captured for one launch (see `recorder.rs`).
    pub(crate) fn recorder(&self) -> &Recorder {
        &self.state.recorder
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
        // SAFETY: only tries to open the driver library; loading it has no other effect. Linked to it instead
        // (`candle-cuda`), the program would not have started without it.
        #[cfg(feature = "cuda")]
        let present = unsafe { sys::is_culib_present() };
        #[cfg(not(feature = "cuda"))]
        let present = true;
        if !present {
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
        let l2_bytes = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(|e| unavailable("reading the L2 size", e))?;
        keep_freed_memory_pooled(&ctx);
        Ok(DeviceState {
            ordinal,
            ctx,
            stream,
            arch: format!("sm_{major}{minor}"),
            sm_count: sm_count.max(1) as usize,
            l2_bytes: l2_bytes.max(0) as usize,
            overlap: AtomicBool::new(major >= 9 && crate::env::launch_overlap()),
            arch_major: major,
            poison: AtomicBool::new(false),
            blas: Mutex::new(None),
            buffers: Mutex::new(BufferCache::default()),
            flush: Mutex::new(None),
            workspace: Mutex::new(None),
            fault: Mutex::new(None),
            counters: Mutex::new(None),
            queueing: Queueing::default(),
            modules: ModuleCache::default(),
            recorder: Recorder::default(),
        })
    }
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
