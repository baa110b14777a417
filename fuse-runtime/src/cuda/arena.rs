//! The memory of one CUDA graph capture: chunks taken with `cuMemAlloc` (allowed during a relaxed capture,
//! unlike the pool's stream-ordered allocations, which would become graph nodes), handed out in order and
//! never reused, so that a replay writes the same addresses the capture recorded. Knows the context and the
//! stream it belongs to, not the device: the device (`device.rs`), its queueing (`queueing.rs`) and tensor
//! memory (`storage.rs`) all hold arenas, and this file imports none of them.

use super::driver::{driver_error, lock};
use crate::{Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::sync::{Arc, Mutex};

/// Device memory for the allocations of one capture; freed when the graph and every tensor made during the
/// capture are gone.
pub(crate) struct Arena {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// (address, size, bytes used) of each chunk.
    chunks: Mutex<Vec<(u64, usize, usize)>>,
}

/// Bytes of a fresh chunk (more if one allocation needs it).
const CHUNK_BYTES: usize = 64 << 20;
/// Every allocation starts on this boundary (the pool's alignment, enough for any vector access).
const ALIGN: usize = 256;

impl Arena {
    /// An arena for a capture on `stream`, with its first chunk, taken before the capture begins (an
    /// allocation during it may make the driver wait, which would end the capture).
    pub(crate) fn new(context: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Arena> {
        // SAFETY: a plain allocation in the device's context (bound on this thread by the caller).
        let first =
            unsafe { result::malloc_sync(CHUNK_BYTES) }.map_err(|e| driver_error("alloc (capture arena)", e))?;
        Ok(Arena {
            context: context.clone(),
            stream: stream.clone(),
            chunks: Mutex::new(vec![(first, CHUNK_BYTES, 0)]),
        })
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
        check_capture(&self.stream, &|| format!("growing the capture's memory by {size} bytes"))?;
        Ok(address)
    }

    /// Bytes handed out.
    pub(crate) fn used(&self) -> usize {
        lock(&self.chunks).iter().map(|c| c.2).sum()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_err() {
            return;
        }
        for &(address, _, _) in lock(&self.chunks).iter() {
            // SAFETY: allocated by `take` with cuMemAlloc; nothing refers to it any more (every tensor in it
            // holds the arena, and so does the graph that writes it). A replay queued before the last
            // handle went away may still run: wait for it first.
            unsafe {
                let _ = result::stream::synchronize(self.stream.cu_stream());
                let _ = result::free_sync(address);
            }
        }
    }
}

/// While `stream` captures: an error naming `what` if the capture is no longer valid (the driver invalidates a
/// capture, without an error of its own, when a call it cannot record is made).
pub(crate) fn check_capture(stream: &CudaStream, what: &dyn Fn() -> String) -> Result<()> {
    match stream.capture_status() {
        Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED) => {
            Err(Error::Capture { what: format!("{} could not be recorded and ended the capture", what()) })
        }
        _ => Ok(()),
    }
}
