//! Where a tensor lives. Only the CPU backend is built into this version; the CUDA backend will add a
//! `Cuda` variant, so code that picks a device goes through [`Device::cuda_if_available`].

use crate::{Error, Result};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
}

impl Device {
    /// The `ordinal`-th GPU. Always an error in this version: the CUDA backend is not built in.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Err(Error::CudaUnavailable {
            reason: format!("the CUDA backend is not built into this version of fuse (asked for GPU {ordinal})"),
        })
    }

    /// The `ordinal`-th GPU when there is one, else the CPU.
    pub fn cuda_if_available(ordinal: usize) -> Device {
        Device::cuda(ordinal).unwrap_or(Device::Cpu)
    }

    pub fn is_cuda(&self) -> bool {
        match self {
            Device::Cpu => false,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
        }
    }
}
