//! Where a tensor lives: the CPU, or a GPU through the CUDA backend.

use crate::cuda::CudaDevice;
use crate::Result;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(CudaDevice),
}

impl Device {
    /// The `ordinal`-th GPU. Errors (`Error::CudaUnavailable`, with the reason) when there is no NVIDIA
    /// driver, no such GPU, or its context cannot be created.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        CudaDevice::new(ordinal).map(Device::Cuda)
    }

    /// The `ordinal`-th GPU when there is one, else the CPU.
    pub fn cuda_if_available(ordinal: usize) -> Device {
        Device::cuda(ordinal).unwrap_or(Device::Cpu)
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    /// Waits for all queued work on this device (a no-op on the CPU, whose work is synchronous).
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(d) => d.synchronize(),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(d) => write!(f, "cuda:{}", d.ordinal()),
        }
    }
}
