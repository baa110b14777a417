//! CUDA graphs: the GPU work that a closure queues on one device, recorded once (stream capture) and
//! replayed as one launch, so that a step of hundreds of small kernels costs one host call.
//!
//! While capturing, nothing may make the GPU wait for the host or read host memory later: a
//! synchronisation, a copy to or from the host, or the autotuner's timing is an error that names what was
//! attempted (the capture is then abandoned). Memory the captured work allocates comes from the capture's
//! arena (`arena.rs`), not from the stream-ordered pool: its addresses are fixed in the graph, every replay
//! writes the same places, and tensors made during the capture (a step's logits, say) hold the arena and
//! show what the last replay wrote. Pool memory dropped during the capture is freed after it ends.
//!
//! Run the step once before capturing it: kernels compile and GEMM paths are tuned on
//! first use, which a capture cannot do. Scratch memory a captured step uses is its own (from the arena).

use super::arena::Arena;
use super::device::CudaDevice;
use super::driver::driver_error;
use crate::{Error, Result};
use cudarc::driver::sys;
use std::sync::Arc;

/// A captured graph ready to replay, with the arena its nodes write.
pub(crate) struct CapturedGraph {
    graph: cudarc::driver::CudaGraph,
    arena: Arc<Arena>,
    device: CudaDevice,
    /// What the nodes point into beyond the arena (a one-launch step's tables, the graph it was made from).
    kept: Vec<Box<dyn std::any::Any>>,
}

impl CapturedGraph {
    /// Queues one replay on the device's stream.
    pub(crate) fn launch(&self) -> Result<()> {
        let _entered = self.device.enter();
        self.graph.launch().map_err(|e| driver_error("graph launch", e))
    }

    /// Bytes of the capture's arena.
    pub(crate) fn arena_bytes(&self) -> usize {
        self.arena.used()
    }

    /// The kernels among the graph's nodes, by function name ("?" where the driver gives none), in the
    /// driver's node order: a step's kernel count; copies and memsets are not counted.
    pub(crate) fn kernel_names(&self) -> Result<Vec<String>> {
        Ok(self.kernels_and_others()?.0)
    }

    /// The graph's kernel nodes by function name and the count of its other nodes (copies, memsets, ...),
    /// from one listing.
    pub(crate) fn kernels_and_others(&self) -> Result<(Vec<String>, usize)> {
        let nodes = self.nodes()?;
        let others = nodes.iter().filter(|(kernel, _)| !*kernel).count();
        Ok((nodes.into_iter().filter_map(|(kind, name)| kind.then_some(name)).collect(), others))
    }

    /// Every node in the driver's order: whether it is a kernel, and a kernel's function name.
    fn nodes(&self) -> Result<Vec<(bool, String)>> {
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
        let mut out = Vec::with_capacity(count);
        for &node in &nodes[..count] {
            let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` is one of the graph's nodes, listed above.
            unsafe { sys::cuGraphNodeGetType(node, &mut kind) }
                .result()
                .map_err(|e| driver_error("graph node type", e))?;
            match kind {
                sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => {
                    out.push((true, kernel_node_name(node).unwrap_or_else(|| "?".into())))
                }
                sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY => {}
                _ => out.push((false, String::new())),
            }
        }
        Ok(out)
    }

    /// The same graph, also keeping `value` alive as long as it is (what its nodes' arguments point to).
    pub(crate) fn keeping(mut self, value: Box<dyn std::any::Any>) -> CapturedGraph {
        self.kept.push(value);
        self
    }
}

/// The function name of a kernel node, when the driver gives one.
fn kernel_node_name(node: sys::CUgraphNode) -> Option<String> {
    // SAFETY: plain-old-data parameters the driver fills.
    let function = unsafe {
        let mut params: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        sys::cuGraphKernelNodeGetParams_v2(node, &mut params).result().ok()?;
        params.func
    };
    function_name(function)
}

/// A kernel function's name as the driver gives it (`None` for a null function or where it gives none).
pub(crate) fn function_name(function: sys::CUfunction) -> Option<String> {
    if function.is_null() {
        return None;
    }
    // SAFETY: `function` is a loaded kernel; the name the driver returns is a C string it owns.
    unsafe {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        sys::cuFuncGetName(&mut name, function).result().ok()?;
        (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

impl CudaDevice {
    /// Runs `step`, recording the GPU work it queues instead of running it.
    pub(crate) fn capture_graph(&self, step: &mut dyn FnMut() -> Result<()>) -> Result<CapturedGraph> {
        self.context().bind_to_thread().map_err(|e| driver_error("bind the context", e))?;
        let arena = Arc::new(Arena::new(self.context(), self.stream())?);
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
        Ok(CapturedGraph { graph, arena, device: self.clone(), kept: Vec::new() })
    }
}
