//! Handing device memory to and from other cudarc code without a trip through the host.

use super::driver::driver_error;
use super::storage::CudaStorage;
use crate::tensor::checked_numel;
use crate::{Device, Error, Result, Tensor};
use cudarc::driver::CudaSlice;
use fuse_ir::DType;

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
}
