//! Device memory of a tensor: one allocation of bytes and the dtype they hold. Copies between host and
//! device are ordered on the device's one stream; a copy to the host waits for it.
//!
//! Memory comes from the stream-ordered pool, except while a CUDA graph is being captured (`capture.rs`):
//! then it is carved from the capture's arena (`arena.rs`), which lives as long as the graph and every tensor
//! made during the capture (what the graph writes on each replay), and pool memory dropped during the capture
//! is freed once it has ended (a free recorded into the graph would be replayed).

use super::arena::Arena;
use super::device::CudaDevice;
use super::driver::driver_error;
use super::recorder::RecordedOp;
use crate::host::{BlockBytes, Blocks, CpuData, CpuSlice};
use crate::{Error, Result};
use cudarc::driver::{CudaSlice, DevicePtr};
use fuse_ir::DType;
use half::{bf16, f16};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

enum Memory {
    /// Stream-ordered pool memory (`None` only while being dropped).
    Pool(Option<CudaSlice<u8>>),
    /// `bytes` at `address` in a capture's arena, kept alive by this handle.
    Arena { _arena: Arc<Arena>, address: u64 },
    /// Memory another library allocated (`Tensor::from_cuda_ptr`), kept alive by its owner, which is dropped
    /// once the work queued on the stream has finished with it.
    External { address: u64, owner: Option<Box<dyn Any + Send + Sync>>, then: Option<ForeignStream> },
}

/// Another library's stream that owns memory fuse reads: ordered after fuse's work when fuse lets the memory
/// go, instead of a host wait (its owner keeps the stream alive until then).
pub(crate) struct ForeignStream(pub(crate) cudarc::driver::sys::CUstream);

// SAFETY: a stream handle may be used from any thread; the owner stored beside it keeps it alive.
unsafe impl Send for ForeignStream {}
unsafe impl Sync for ForeignStream {}

pub(crate) struct CudaStorage {
    memory: Memory,
    bytes: usize,
    dtype: DType,
    device: CudaDevice,
    /// Only copies from the host have written this memory (`upload`) and no kernel will before it is
    /// cleared (`mark_kernel_written`, for the destination of an in-place write): a kernel may then read it
    /// before it waits for the kernel before it (programmatic dependent launch), whatever that kernel is.
    host_written: AtomicBool,
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        match &mut self.memory {
            Memory::Pool(buffer) => {
                if let Some(buffer) = buffer.take() {
                    self.device.release(buffer);
                }
            }
            Memory::External { owner, then, .. } => {
                if let Some(owner) = owner.take() {
                    self.device.release_external(owner, then.take().map(|stream| stream.0));
                }
            }
            Memory::Arena { .. } => {}
        }
    }
}

/// The bytes of a slice of plain numbers.
fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: T is f32, f16 or bf16 here: plain data without padding, any byte pattern readable as u8.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
}

/// Numbers from little-endian bytes (the GPU's and the host's order).
fn from_bytes<T: Copy + Default>(bytes: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let mut out = vec![T::default(); bytes.len() / size];
    // SAFETY: `out` has room for exactly bytes.len() / size elements; the types are plain data, so any bytes
    // make valid values; the regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), out.len() * size) };
    out
}

/// The bytes `alloc` reserves for `bytes` of data: whole 16-byte units, at least one.
fn padded_bytes(bytes: usize) -> usize {
    bytes.max(1).next_multiple_of(16)
}

impl CudaStorage {
    /// Uninitialised memory for `len` elements of `dtype` (every kernel writes all of its outputs).
    pub(crate) fn alloc(device: &CudaDevice, dtype: DType, len: usize) -> Result<CudaStorage> {
        let bytes = dtype.storage_bytes(len).ok_or_else(|| Error::Cuda {
            op: "alloc".into(),
            message: format!("{len} elements of {dtype} overflow the address space or are not whole blocks"),
        })?;
        let _entered = device.enter();
        // Whole 16-byte units: a kernel may copy a tensor's last bytes as one 16-byte unit (the streaming
        // quantized GEMM's cp.async, which compute-sanitizer counts whole even where it reads fewer bytes).
        let padded = padded_bytes(bytes);
        let memory = match device.capture_arena() {
            Some(arena) => Memory::Arena { address: arena.take(padded)?, _arena: arena },
            // Uninitialised (or a released tensor's): every caller writes it before reading it.
            None => Memory::Pool(Some(device.pool_buffer(padded)?)),
        };
        let storage = CudaStorage {
            memory,
            bytes: bytes.max(1),
            dtype,
            device: device.clone(),
            host_written: AtomicBool::new(false),
        };
        if device.poisons_allocations() {
            storage.fill_bytes(0xFF)?;
        }
        Ok(storage)
    }

    /// A copy of host data on the device.
    pub(crate) fn upload(device: &CudaDevice, data: &CpuData) -> Result<CudaStorage> {
        let (bytes, dtype) = match data.as_slice() {
            CpuSlice::F32(v) => (as_bytes(v), DType::F32),
            CpuSlice::F16(v) => (as_bytes(v), DType::F16),
            CpuSlice::BF16(v) => (as_bytes(v), DType::BF16),
            CpuSlice::U32(v) => (as_bytes(v), DType::U32),
            CpuSlice::Blocks(dtype, bytes) => (bytes, dtype),
        };
        let _entered = device.enter();
        device.refuse_while_capturing("a copy from the host (Tensor::from_vec, to_device)")?;
        let storage = CudaStorage::alloc(device, dtype, data.as_slice().len())?;
        storage.host_written.store(true, Ordering::Relaxed);
        if !bytes.is_empty() {
            // SAFETY: `bytes` bytes at the allocation's start; the host slice outlives the copy, which
            // memcpy_htod_async from pageable memory stages before returning.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(storage.base_address(), bytes, device.stream().cu_stream())
            }
            .map_err(|e| driver_error("copy to the GPU", e))?;
        }
        // The padding past the data zeroed: a kernel copying the last 16-byte unit whole (see `alloc`) then
        // reads initialised bytes (compute-sanitizer's initcheck), however it got its memory.
        let tail = padded_bytes(storage.bytes) - bytes.len();
        if tail > 0 {
            let at = storage.base_address() + bytes.len() as u64;
            // SAFETY: [at, at + tail) is the padding of this live allocation (`alloc` reserved it).
            unsafe { cudarc::driver::result::memset_d8_async(at, 0, tail, device.stream().cu_stream()) }
                .map_err(|e| driver_error("memset", e))?;
        }
        Ok(storage)
    }

    /// Copies `values` over elements `at ..` (the caller checked that they fit and are of this dtype).
    pub(crate) fn write_from_host<T: Copy>(&self, at: usize, values: &[T]) -> Result<()> {
        let _entered = self.device.enter();
        self.device.refuse_while_capturing("a copy from the host (copy_from_host)")?;
        if values.is_empty() {
            return Ok(());
        }
        let to = self.base_address() + (at * self.dtype.size_bytes()) as u64;
        // SAFETY: the range lies inside this live allocation (checked by the caller); from pageable memory the
        // driver stages `values` before returning, so the slice may go right after.
        unsafe { cudarc::driver::result::memcpy_htod_async(to, values, self.device.stream().cu_stream()) }
            .map_err(|e| driver_error("copy to the GPU", e))
    }

    /// Whether only copies from the host have written this memory (see the field).
    pub(crate) fn host_written(&self) -> bool {
        self.host_written.load(Ordering::Relaxed)
    }

    /// A kernel is about to write this memory in place (before it is launched).
    pub(crate) fn mark_kernel_written(&self) {
        self.host_written.store(false, Ordering::Relaxed);
    }

    /// Wraps memory made elsewhere (interop). The caller guarantees it holds `dtype` values.
    pub(crate) fn from_buffer(device: &CudaDevice, buffer: CudaSlice<u8>, dtype: DType) -> CudaStorage {
        CudaStorage {
            bytes: buffer.len(),
            memory: Memory::Pool(Some(buffer)),
            dtype,
            device: device.clone(),
            host_written: AtomicBool::new(false),
        }
    }

    /// Wraps `bytes` of another library's memory at `address` (the caller guarantees it holds `dtype` values
    /// and stays valid while `owner` lives).
    /// With `then`, the owner's stream waits for fuse's work when fuse lets go (no host wait).
    pub(crate) fn external(
        device: &CudaDevice,
        address: u64,
        bytes: usize,
        dtype: DType,
        owner: Box<dyn Any + Send + Sync>,
        then: Option<ForeignStream>,
    ) -> CudaStorage {
        let memory = Memory::External { address, owner: Some(owner), then };
        CudaStorage { memory, bytes, dtype, device: device.clone(), host_written: AtomicBool::new(false) }
    }

    /// Whether this is stream-ordered pool memory (which can be handed to another owner).
    #[cfg(feature = "candle-cuda")]
    pub(crate) fn is_pool(&self) -> bool {
        matches!(self.memory, Memory::Pool(Some(_)))
    }

    /// The pool buffer itself, when this storage holds one (not arena or another library's memory).
    #[cfg(feature = "candle-cuda")]
    pub(crate) fn take_pool_buffer(mut self) -> Option<CudaSlice<u8>> {
        match &mut self.memory {
            Memory::Pool(buffer) => buffer.take(),
            _ => None,
        }
    }

    /// Fills the allocation with zero bytes (zero in every dtype).
    pub(crate) fn zero(&self) -> Result<()> {
        self.fill_bytes(0)
    }

    /// Sets every byte of the allocation, in stream order.
    fn fill_bytes(&self, value: u8) -> Result<()> {
        if self.device.is_capturing() {
            self.device.check_capture(&|| "an op before this memset".to_string())?;
        }
        if self.device.recorder().is_on() {
            self.device.recorder().record(RecordedOp::Fill { address: self.base_address(), bytes: self.bytes, value });
        }
        let stream = self.device.stream();
        // SAFETY: the address and byte count are this live allocation's; the memset is queued on the stream
        // every use of the allocation is ordered on.
        unsafe { cudarc::driver::result::memset_d8_async(self.base_address(), value, self.bytes, stream.cu_stream()) }
            .map_err(|e| driver_error("memset", e))
    }

    /// The whole allocation copied to the host (after the work queued before it).
    pub(crate) fn download(&self) -> Result<CpuData> {
        self.download_range(0, self.len())
    }

    /// Elements `start..start + len` (clamped to the allocation) copied to the host.
    pub(crate) fn download_range(&self, start: usize, len: usize) -> Result<CpuData> {
        let start = start.min(self.len());
        let len = len.min(self.len() - start);
        let (start_bytes, bytes_len) = match self.dtype.block() {
            None => (start * self.dtype.size_bytes(), len * self.dtype.size_bytes()),
            Some(b) if start % b.elements == 0 && len % b.elements == 0 => {
                (start / b.elements * b.bytes, len / b.elements * b.bytes)
            }
            Some(_) => {
                return Err(Error::Cuda {
                    op: "copy to the host".into(),
                    message: format!("elements {start}.. ({len}) of {} are not whole blocks", self.dtype),
                })
            }
        };
        let mut bytes = vec![0u8; bytes_len];
        let _entered = self.device.enter();
        if bytes_len > 0 {
            self.device
                .refuse_while_capturing("a copy to the host (to_vec, or an op that reads values on the host)")?;
            let from = self.base_address() + start_bytes as u64;
            // SAFETY: `bytes_len` bytes inside this live allocation into a host buffer of that length, which
            // stays alive until the synchronisation below.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut bytes, from, self.device.stream().cu_stream()) }
                .map_err(|e| driver_error("copy to the host", e))?;
            // Also reports a check a kernel failed (the values copied may then be zeros it wrote instead).
            self.device.synchronize()?;
        }
        Ok(match self.dtype {
            DType::F32 => CpuData::F32(from_bytes::<f32>(&bytes)),
            DType::F16 => CpuData::F16(from_bytes::<u16>(&bytes).into_iter().map(f16::from_bits).collect()),
            DType::BF16 => CpuData::BF16(from_bytes::<u16>(&bytes).into_iter().map(bf16::from_bits).collect()),
            DType::U32 => CpuData::U32(from_bytes::<u32>(&bytes)),
            q => CpuData::Blocks(Blocks::new(q, BlockBytes::Owned(bytes))),
        })
    }

    /// A copy of the whole allocation in a new one, on the same stream.
    pub(crate) fn duplicate(&self) -> Result<CudaSlice<u8>> {
        let stream = self.device.stream();
        // SAFETY: uninitialised, then every byte written by the copy below, in stream order.
        let copy = unsafe { stream.alloc::<u8>(self.bytes) }.map_err(|e| driver_error("alloc", e))?;
        let to = copy.device_ptr(stream).0;
        if self.device.recorder().is_on() {
            self.device.recorder().record(RecordedOp::Copy { from: self.base_address(), to, bytes: self.bytes });
        }
        // SAFETY: both ranges are `bytes` long inside live allocations, ordered on the one stream.
        unsafe { cudarc::driver::result::memcpy_dtod_async(to, self.base_address(), self.bytes, stream.cu_stream()) }
            .map_err(|e| driver_error("device copy", e))?;
        Ok(copy)
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        match self.dtype.block() {
            None => self.bytes / self.dtype.size_bytes(),
            Some(b) => self.bytes / b.bytes * b.elements,
        }
    }

    /// The device address of element `element`: for quantized blocks that of the block it starts (`None` where
    /// it does not start one: a view of blocks must begin at a whole block).
    pub(crate) fn element_address(&self, element: usize) -> Option<u64> {
        Some(self.base_address() + self.dtype.storage_bytes(element)? as u64)
    }

    /// The device address of element 0.
    pub(crate) fn base_address(&self) -> u64 {
        match &self.memory {
            Memory::Pool(Some(buffer)) => buffer.device_ptr(self.device.stream()).0,
            Memory::Pool(None) => 0,
            Memory::Arena { address, .. } | Memory::External { address, .. } => *address,
        }
    }
}
