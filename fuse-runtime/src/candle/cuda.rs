//! candle's CUDA tensors (feature `candle-cuda`): read in place by fuse's kernels, and results handed to
//! candle, both without copies. The two libraries keep their own streams in one context (the device's
//! primary context, which cudarc gives both); events order them, never a host wait: fuse's stream waits for
//! candle's before reading candle's memory, and candle's waits for fuse's before it touches that memory
//! again or reads what fuse wrote.

use super::{dtype_of, CANDLE};
use crate::cuda::storage::{CudaStorage, ForeignStream};
use crate::fused::Prepared;
use crate::{CudaDevice, Device, Error, Result, Tensor};
use candle_core as candle;
use candle_core::cuda_backend::CudaStorageSlice;
use cudarc::driver::DevicePtr;
use fuse_ir::DType;
use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    /// The candle device of each GPU whose tensors this thread last passed to a `#[fuse]` call: where that
    /// call's results go when the function returns candle tensors.
    static CANDLE_DEVICES: RefCell<BTreeMap<usize, candle::CudaDevice>> = const { RefCell::new(BTreeMap::new()) };
}

fn ordinal_of(t: &candle::Tensor) -> Result<usize> {
    match t.device().location() {
        candle::DeviceLocation::Cuda { gpu_id } => Ok(gpu_id),
        other => Err(Error::internal(CANDLE, format!("a candle CUDA tensor located on {other:?}"))),
    }
}

/// A fuse view of a candle CUDA tensor's memory, with its layout, and candle's read lock on it for the call.
pub(super) fn prepare<'a>(t: &'a candle::Tensor, op: &'static str) -> Result<Prepared<'a>> {
    let dtype = dtype_of(t, op)?;
    let ordinal = ordinal_of(t)?;
    let Device::Cuda(gpu) = Device::cuda(ordinal)? else {
        return Err(Error::internal(CANDLE, "Device::cuda gave another device"));
    };
    let (storage, layout) = t.storage_and_layout();
    let candle::Storage::Cuda(theirs) = &*storage else {
        return Err(Error::internal(CANDLE, "a candle tensor on a GPU without CUDA storage"));
    };
    let stream = theirs.device.cuda_stream();
    let (address, len) = match &theirs.slice {
        CudaStorageSlice::F32(s) => (s.device_ptr(&stream).0, s.len()),
        CudaStorageSlice::F16(s) => (s.device_ptr(&stream).0, s.len()),
        CudaStorageSlice::BF16(s) => (s.device_ptr(&stream).0, s.len()),
        CudaStorageSlice::U32(s) => (s.device_ptr(&stream).0, s.len()),
        _ => return Err(Error::internal(CANDLE, format!("candle CUDA storage that is not of dtype {dtype}"))),
    };
    // SAFETY: candle's stream lives as long as `t`, which the storage below keeps.
    unsafe { gpu.wait_for_stream(stream.cu_stream()) }?;
    let owned = CudaStorage::external(
        &gpu,
        address,
        len * dtype.size_bytes(),
        dtype,
        Box::new(t.clone()),
        Some(ForeignStream(stream.cu_stream())),
    );
    let tensor = Tensor::cuda_view(owned, layout.dims().to_vec(), layout.stride().to_vec(), layout.start_offset());
    CANDLE_DEVICES.with(|d| d.borrow_mut().insert(ordinal, theirs.device.clone()));
    Ok(Prepared::Held { tensor, _lock: Box::new(storage) })
}

/// `t` (on `gpu`) as a candle tensor on the candle device this thread last passed to a `#[fuse]` call for
/// that GPU.
pub(super) fn into_candle(t: Tensor, gpu: &CudaDevice) -> Result<candle::Tensor> {
    let ordinal = gpu.ordinal();
    let Some(device) = CANDLE_DEVICES.with(|d| d.borrow().get(&ordinal).cloned()) else {
        return Err(Error::unsupported(
            CANDLE,
            "into_candle",
            format!(
                "a tensor on cuda:{ordinal}, and no candle device of that GPU passed to a #[fuse] call on this thread: \
                 use `into_candle_on(&candle_device)`"
            ),
        ));
    };
    into_candle_on(t, gpu, &device)
}

/// `t` (on `gpu`) as a candle tensor on `device` (a candle device of the same GPU): its pool buffer handed
/// to candle when it is the only handle to a dense one, else a dense copy of it (on the GPU).
pub(super) fn into_candle_on(t: Tensor, gpu: &CudaDevice, device: &candle::CudaDevice) -> Result<candle::Tensor> {
    let (shape, dtype) = (t.shape().to_vec(), t.dtype());
    if dtype.is_quantized() {
        return Err(super::blocks_to_candle(dtype));
    }
    let len = t.numel();
    let buffer = match t.into_cuda_buffer() {
        Ok(buffer) => buffer,
        Err(t) => t.contiguous()?.to_cuda_slice()?,
    };
    let stream = device.cuda_stream();
    // SAFETY: candle's stream lives as long as `device`.
    unsafe { gpu.make_stream_wait(stream.cu_stream()) }?;
    let address = buffer.leak();
    // SAFETY: `address` is a live allocation of `len` elements of `dtype` (a pool buffer of exactly them, now
    // candle's to free on its stream, which waits for fuse's writes above).
    let storage = unsafe {
        match dtype {
            DType::F32 => {
                candle::CudaStorage::wrap_cuda_slice(stream.upgrade_device_ptr::<f32>(address, len), device.clone())
            }
            DType::F16 => candle::CudaStorage::wrap_cuda_slice(
                stream.upgrade_device_ptr::<half::f16>(address, len),
                device.clone(),
            ),
            DType::BF16 => candle::CudaStorage::wrap_cuda_slice(
                stream.upgrade_device_ptr::<half::bf16>(address, len),
                device.clone(),
            ),
            DType::U32 => {
                candle::CudaStorage::wrap_cuda_slice(stream.upgrade_device_ptr::<u32>(address, len), device.clone())
            }
            _ => unreachable!("block dtypes were refused above"),
        }
    };
    Ok(candle::Tensor::from_storage(candle::Storage::Cuda(storage), shape, candle::op::BackpropOp::none(), false))
}
