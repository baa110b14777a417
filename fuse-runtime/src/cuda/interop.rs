//! Handing device memory to and from other cudarc code, or any CUDA library by raw device pointers and
//! streams, without a trip through the host.

use super::device::CudaDevice;
use super::driver::driver_error;
use super::storage::CudaStorage;
use crate::tensor::checked_numel;
use crate::{Device, Error, Result, Tensor};
use cudarc::driver::{result, sys, CudaSlice};
use fuse_ir::DType;
use std::any::Any;

const INTEROP: &str = "interop";

impl Tensor {
    /// A dense row-major tensor of `shape` over `slice`'s bytes (`dtype` values) on `device`. The slice is
    /// kept without a copy when it lives on the device's stream (`CudaDevice::stream`); otherwise its
    /// stream is synchronised and the bytes are copied onto the device's stream, so that the two streams
    /// never race.
    pub fn from_cuda_slice(slice: CudaSlice<u8>, dtype: DType, shape: &[usize], device: &Device) -> Result<Tensor> {
        let Device::Cuda(gpu) = device else {
            return Err(Error::unsupported(INTEROP, "from_cuda_slice", format!("a CUDA slice onto device {device}")));
        };
        let numel = checked_numel(shape);
        let needed = numel.and_then(|n| n.checked_mul(dtype.size_bytes()));
        if !matches!(needed, Some(bytes) if bytes <= slice.len()) {
            return Err(Error::DataLength {
                shape: shape.to_vec(),
                len: slice.len() / dtype.size_bytes(),
                expected: numel.unwrap_or(usize::MAX),
            });
        }
        if slice.ordinal() != gpu.ordinal() {
            return Err(Error::unsupported(
                INTEROP,
                "from_cuda_slice",
                format!("a slice of GPU {} onto {device}", slice.ordinal()),
            ));
        }
        let buffer = if slice.stream() == gpu.stream() {
            slice
        } else {
            slice.stream().synchronize().map_err(|e| driver_error("synchronize the slice's stream", e))?;
            gpu.stream().clone_dtod(&slice).map_err(|e| driver_error("device copy", e))?
        };
        Ok(Tensor::from_cuda(CudaStorage::from_buffer(gpu, buffer, dtype), shape.to_vec()))
    }

    /// The elements in row-major order as a new device allocation of bytes (`self.dtype()` values) on the
    /// device's stream. A GPU tensor only; strided views are made dense through the host for now.
    pub fn to_cuda_slice(&self) -> Result<CudaSlice<u8>> {
        let Some(storage) = self.cuda_storage() else {
            return Err(Error::unsupported(INTEROP, "to_cuda_slice", format!("a tensor on {}", self.device())));
        };
        if self.is_contiguous() && self.offset() == 0 && storage.len() == self.numel() {
            return storage.duplicate();
        }
        let dense = self.to_device(&Device::Cpu)?.to_device(self.device())?;
        match dense.cuda_storage() {
            Some(s) => s.duplicate(),
            None => Err(Error::internal(INTEROP, "a copy to the GPU landed on the host")),
        }
    }

    /// A dense row-major tensor of `shape` over another library's device memory at `address`, without a
    /// copy: how a tensor of candle's CUDA build, a C library or a framework reached through FFI becomes
    /// a fuse argument. `owner` is whatever keeps the memory alive (the other library's buffer, an `Arc` of
    /// it); fuse drops it when the last view of the tensor is gone, after waiting for the work queued on the
    /// device's stream. If the other library wrote the memory on a stream of its own, order it first with
    /// [`CudaDevice::wait_for_stream`].
    ///
    /// # Safety
    /// `address` must be a device address on `device`'s GPU (same context) of at least
    /// `shape.product() * dtype.size_bytes()` bytes holding `dtype` values, valid while `owner` lives, and
    /// not written by others while fuse may read it (fuse writes into it only through in-place ops such as
    /// `slice_set` on this tensor).
    pub unsafe fn from_cuda_ptr(
        address: u64,
        dtype: DType,
        shape: &[usize],
        device: &Device,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Tensor> {
        let Device::Cuda(gpu) = device else {
            return Err(Error::unsupported(INTEROP, "from_cuda_ptr", format!("a device pointer onto device {device}")));
        };
        let Some(bytes) = checked_numel(shape).and_then(|n| n.checked_mul(dtype.size_bytes())) else {
            return Err(Error::DataLength { shape: shape.to_vec(), len: 0, expected: usize::MAX });
        };
        if address == 0 && bytes > 0 {
            return Err(Error::unsupported(INTEROP, "from_cuda_ptr", "a null device pointer"));
        }
        if address % dtype.size_bytes() as u64 != 0 {
            return Err(Error::unsupported(
                INTEROP,
                "from_cuda_ptr",
                format!("address {address:#x} is not aligned to its {dtype} elements"),
            ));
        }
        Ok(Tensor::from_cuda(CudaStorage::external(gpu, address, bytes, dtype, owner, None), shape.to_vec()))
    }

    /// The device address of element 0 of a dense GPU tensor, for another library to read or write in
    /// place; valid while this tensor (or a clone or view of it) lives. Work fuse queued on it may still be
    /// running: order the other library's stream after it with [`CudaDevice::make_stream_wait`].
    pub fn cuda_ptr(&self) -> Result<u64> {
        let Some(storage) = self.cuda_storage() else {
            return Err(Error::unsupported(INTEROP, "cuda_ptr", format!("a tensor on {}", self.device())));
        };
        if !self.is_contiguous() {
            return Err(Error::unsupported(
                INTEROP,
                "cuda_ptr",
                "a strided view: make it dense with `.contiguous()` first",
            ));
        }
        Ok(storage.base_address() + (self.offset() * self.dtype().size_bytes()) as u64)
    }
}

/// Makes `waiter` wait, on the GPU, for the work queued on `source` so far (an event recorded on one, waited
/// on by the other; the host does not wait).
unsafe fn order_streams(source: sys::CUstream, waiter: sys::CUstream) -> Result<()> {
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| driver_error("create an event", e))?;
    // SAFETY: both streams are live (the caller's contract); the event is ours, destroyed once the wait is
    // queued (the driver keeps it until the wait is done).
    let ordered = unsafe {
        result::event::record(event, source)
            .and_then(|()| result::stream::wait_event(waiter, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT))
    };
    let destroyed = unsafe { result::event::destroy(event) };
    ordered.map_err(|e| driver_error("order two streams", e))?;
    destroyed.map_err(|e| driver_error("destroy an event", e))
}

impl CudaDevice {
    /// fuse's stream waits, on the GPU, for the work queued so far on `stream` (another library's stream in
    /// this device's context): call it before passing that library's memory to fuse
    /// (`Tensor::from_cuda_ptr`) while its writes may still be running.
    ///
    /// # Safety
    /// `stream` must be a live stream of this device's context (or null: the legacy default stream).
    pub unsafe fn wait_for_stream(&self, stream: sys::CUstream) -> Result<()> {
        let _entered = self.enter();
        self.refuse_while_capturing("ordering another library's stream (wait_for_stream)")?;
        // SAFETY: the caller's contract for `stream`; ours is live.
        unsafe { order_streams(stream, self.stream().cu_stream()) }
    }

    /// `stream` (another library's) waits, on the GPU, for the work fuse queued so far: call it before that
    /// library reads what fuse wrote (`Tensor::cuda_ptr`).
    ///
    /// # Safety
    /// As [`CudaDevice::wait_for_stream`].
    pub unsafe fn make_stream_wait(&self, stream: sys::CUstream) -> Result<()> {
        let _entered = self.enter();
        self.refuse_while_capturing("ordering another library's stream (make_stream_wait)")?;
        // SAFETY: as above.
        unsafe { order_streams(self.stream().cu_stream(), stream) }
    }
}
