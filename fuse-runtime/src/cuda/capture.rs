//! CUDA graphs: the GPU work that a closure queues on one device, recorded once (stream capture) and
//! replayed as one launch, so that a step of hundreds of small kernels costs one host call.
//!
//! While capturing, nothing may make the GPU wait for the host or read host memory later: a
//! synchronisation, a copy to or from the host, or the autotuner's timing is an error that names what was
//! attempted (the capture is then abandoned). Memory the captured work allocates comes from the capture's
//! arena (`Arena`), not from the stream-ordered pool: its addresses are fixed in the graph, every replay
//! writes the same places, and tensors made during the capture (a step's logits, say) hold the arena and
//! show what the last replay wrote. Pool memory dropped during the capture is freed after it ends.
//!
//! Run the step once before capturing it: kernels compile and GEMM paths are tuned on
//! first use, which a capture cannot do. Scratch memory a captured step uses is its own (from the arena).

use super::device::CudaDevice;
use super::driver::{driver_error, lock};
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::sync::Mutex;

/// Device memory for the allocations of one capture: chunks taken with `cuMemAlloc` (allowed during a
/// relaxed capture, unlike the pool's stream-ordered allocations, which would become graph nodes), handed
/// out in order and never reused; freed when the graph and every tensor made during the capture are gone.
pub(crate) struct Arena {
    device: CudaDevice,
    /// (address, size, bytes used) of each chunk.
    chunks: Mutex<Vec<(u64, usize, usize)>>,
}

/// Bytes of a fresh chunk (more if one allocation needs it).
const CHUNK_BYTES: usize = 64 << 20;
/// Every allocation starts on this boundary (the pool's alignment, enough for any vector access).
const ALIGN: usize = 256;

impl Arena {
    /// An arena with its first chunk, taken before the capture begins (an allocation during it may make
    /// the driver wait, which would end the capture).
    pub(crate) fn new(device: &CudaDevice) -> Result<Arena> {
        // SAFETY: a plain allocation in the device's context (bound on this thread by the caller).
        let first =
            unsafe { result::malloc_sync(CHUNK_BYTES) }.map_err(|e| driver_error("alloc (capture arena)", e))?;
        Ok(Arena { device: device.clone(), chunks: Mutex::new(vec![(first, CHUNK_BYTES, 0)]) })
    }

    /// The address of `bytes` fresh bytes.
    pub(crate) fn take(&self, bytes: usize) -> Result<u64> {
        let bytes = bytes.next_multiple_of(ALIGN);
        let mut chunks = lock(&self.chunks);
        if let Some((address, size, used)) = chunks.last_mut() {
            if *size - *used >= bytes {
                let at = *address + *used as u64;
                *used += bytes;
                return Ok(at);
            }
        }
        let size = bytes.max(CHUNK_BYTES);
        // SAFETY: a plain allocation in the device's context (bound on this thread by the capture).
        let address = unsafe { result::malloc_sync(size) }.map_err(|e| driver_error("alloc (capture arena)", e))?;
        chunks.push((address, size, bytes));
        self.device.check_capture(&|| format!("growing the capture's memory by {size} bytes"))?;
        Ok(address)
    }

    /// Bytes handed out.
    pub(crate) fn used(&self) -> usize {
        lock(&self.chunks).iter().map(|c| c.2).sum()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.device.context().bind_to_thread().is_err() {
            return;
        }
        for &(address, _, _) in lock(&self.chunks).iter() {
            // SAFETY: allocated by `take` with cuMemAlloc; nothing refers to it any more (every tensor in it
            // holds the arena, and so does the graph that writes it). A replay queued before the last
            // handle went away may still run: wait for it first.
            unsafe {
                let _ = result::stream::synchronize(self.device.stream().cu_stream());
                let _ = result::free_sync(address);
            }
        }
    }
}

/// A captured graph ready to replay, with the arena its nodes write.
pub(crate) struct CapturedGraph {
    graph: cudarc::driver::CudaGraph,
    arena: std::sync::Arc<Arena>,
}

impl CapturedGraph {
    /// Queues one replay on the device's stream.
    pub(crate) fn launch(&self) -> Result<()> {
        let _entered = self.arena.device.enter();
        self.graph.launch().map_err(|e| driver_error("graph launch", e))
    }

    /// Bytes of the capture's arena.
    pub(crate) fn arena_bytes(&self) -> usize {
        self.arena.used()
    }

    /// The kernels among the graph's nodes, by function name ("?" where the driver gives none), in the
    /// driver's node order: a step's kernel count; copies and memsets are not counted.
    pub(crate) fn kernel_names(&self) -> Result<Vec<String>> {
        let graph = self.graph.cu_graph();
        let mut count = 0usize;
        // SAFETY: a null node array asks for the count only; the second call fills `count` nodes.
        unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }
            .result()
            .map_err(|e| driver_error("count graph nodes", e))?;
        let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
        unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }
            .result()
            .map_err(|e| driver_error("list graph nodes", e))?;
        let mut names = Vec::new();
        for &node in &nodes[..count] {
            let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` is one of the graph's nodes, listed above.
            unsafe { sys::cuGraphNodeGetType(node, &mut kind) }
                .result()
                .map_err(|e| driver_error("graph node type", e))?;
            if kind == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
                names.push(kernel_node_name(node).unwrap_or_else(|| "?".into()));
            }
        }
        Ok(names)
    }
}

/// The function name of a kernel node, when the driver gives one.
fn kernel_node_name(node: sys::CUgraphNode) -> Option<String> {
    // SAFETY: plain-old-data parameters the driver fills; the name it returns is a C string it owns.
    unsafe {
        let mut params: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        sys::cuGraphKernelNodeGetParams_v2(node, &mut params).result().ok()?;
        if params.func.is_null() {
            return None;
        }
        let mut name: *const std::ffi::c_char = std::ptr::null();
        sys::cuFuncGetName(&mut name, params.func).result().ok()?;
        (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

impl CudaDevice {
    /// Runs `step`, recording the GPU work it queues instead of running it.
    pub(crate) fn capture_graph(&self, step: &mut dyn FnMut() -> Result<()>) -> Result<CapturedGraph> {
        self.context().bind_to_thread().map_err(|e| driver_error("bind the context", e))?;
        let arena = std::sync::Arc::new(Arena::new(self)?);
        self.begin_capture(arena.clone())?;
        let began = self.stream().begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        let ran = began.map_err(|e| driver_error("begin capture", e)).and_then(|()| step());
        // The capture ends whatever happened, so the stream is usable again.
        let ended = if ran.is_ok()
            || self
                .stream()
                .capture_status()
                .is_ok_and(|s| s != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        {
            Some(self.stream().end_capture(sys::CUgraphInstantiate_flags(0)))
        } else {
            None
        };
        self.end_capture();
        ran?;
        let graph = match ended {
            Some(Ok(Some(graph))) => graph,
            Some(Ok(None)) => return Err(Error::Capture { what: "the capture recorded nothing".into() }),
            Some(Err(e)) => {
                return Err(Error::Capture { what: format!("the driver refused the captured work ({e}): an op inside made the GPU wait or used memory a graph cannot") })
            }
            None => return Err(Error::Capture { what: "the capture was lost".into() }),
        };
        graph.upload().map_err(|e| driver_error("graph upload", e))?;
        Ok(CapturedGraph { graph, arena })
    }
}
