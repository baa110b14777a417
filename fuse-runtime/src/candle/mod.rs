//! candle interop (feature `candle`): `candle_core::Tensor` as the parameters and results of `#[fuse]`
//! functions, and conversions both ways.
//!
//! Memory, in the direction of each conversion:
//! - candle -> fuse inside a `#[fuse]` call: no copy. The call reads the candle tensor's vector in place,
//!   with its layout (strides, offset), holding candle's read lock on it until the function returns, as
//!   candle's own ops do while they read.
//! - candle -> fuse outside a call (`Tensor::from_candle`): one copy, in the tensor's order. The fuse tensor
//!   lives on after the call, and candle has no way to lend its vector for longer than a lock is held.
//! - fuse -> candle (`into_candle`, and a `#[fuse]` function's results): no copy when the fuse tensor is
//!   the only handle to a dense vector (a fused function's outputs are); otherwise one copy.
//!
//! With `candle`, candle tensors are CPU tensors: fuse's `cuda` feature has cudarc load the CUDA libraries at
//! run time, candle's CUDA build has it link them, and cudarc's build refuses both at once. With
//! `candle-cuda` instead (and without `cuda`), fuse's CUDA backend uses candle's linked cudarc, and candle's
//! CUDA tensors are read and returned in place too (`cuda.rs`).

use crate::fused::{FromOutput, PrepareArg, Prepared};
use crate::host::CpuData;
use crate::{Device, Error, Result, Tensor};
use candle_core as candle;
use candle_core::backend::BackendStorage;
use fuse_ir::DType;

#[cfg(feature = "candle-cuda")]
mod cuda;

pub(crate) const CANDLE: &str = "candle";

/// fuse's dtype for a candle dtype, or the error that names the ones fuse takes.
pub(crate) fn dtype_of(t: &candle::Tensor, op: &'static str) -> Result<DType> {
    match t.dtype() {
        candle::DType::F32 => Ok(DType::F32),
        candle::DType::F16 => Ok(DType::F16),
        candle::DType::BF16 => Ok(DType::BF16),
        candle::DType::U32 => Ok(DType::U32),
        other => Err(Error::unsupported(
            CANDLE,
            op,
            format!(
                "a candle tensor of dtype {}: fuse takes f32, f16, bf16 and u32 (convert it with `.to_dtype(..)`)",
                other.as_str()
            ),
        )),
    }
}

fn cpu_only(t: &candle::Tensor, op: &'static str) -> Result<()> {
    match t.device().location() {
        candle::DeviceLocation::Cpu => Ok(()),
        other => Err(Error::unsupported(
            CANDLE,
            op,
            format!(
                "a candle tensor on {other:?}: this build of fuse reads candle's CPU tensors; for candle's CUDA \
                 tensors build fuse with its `candle-cuda` feature (README \"With candle\"), or move the tensor with \
                 `.to_device(&candle_core::Device::Cpu)`"
            ),
        )),
    }
}

/// The candle CPU storage's vector as fuse data, read in place: `owner` keeps it alive, and the caller must
/// hold candle's read lock on it while the result is read (`CpuData::borrowed`).
///
/// # Safety
/// As `CpuData::borrowed`: the caller holds `storage`'s lock for as long as the result is read.
unsafe fn borrow_storage(storage: &candle::CpuStorage, owner: &candle::Tensor) -> Option<CpuData> {
    let owner = Box::new(owner.clone());
    // SAFETY: passed on to the caller.
    unsafe {
        Some(match storage {
            candle::CpuStorage::F32(v) => CpuData::borrowed(v, owner),
            candle::CpuStorage::F16(v) => CpuData::borrowed(v, owner),
            candle::CpuStorage::BF16(v) => CpuData::borrowed(v, owner),
            candle::CpuStorage::U32(v) => CpuData::borrowed(v, owner),
            _ => return None,
        })
    }
}

impl PrepareArg for candle::Tensor {
    const IS_TENSOR: bool = true;

    /// A fuse view of this tensor's memory with its layout, and candle's read lock on it for the call.
    fn prepare(&self) -> Result<Prepared<'_>> {
        view_of(self, "a #[fuse] argument")
    }
}

/// A fuse view of `t`'s memory with its layout, holding candle's read lock on it (`op` names the caller in
/// errors).
fn view_of<'a>(t: &'a candle::Tensor, op: &'static str) -> Result<Prepared<'a>> {
    #[cfg(feature = "candle-cuda")]
    if let candle::Device::Cuda(_) = t.device() {
        return cuda::prepare(t, op);
    }
    cpu_only(t, op)?;
    dtype_of(t, op)?;
    let (storage, layout) = t.storage_and_layout();
    let candle::Storage::Cpu(cpu) = &*storage else {
        return Err(Error::internal(CANDLE, "a candle tensor on the CPU without CPU storage"));
    };
    // SAFETY: `storage` (candle's read guard) moves into the Prepared value beside the view and is dropped
    // after it, when the function returns; outputs that are views of it are copied before then
    // (`FromOutput`), and `from_candle` copies it before returning.
    let Some(data) = (unsafe { borrow_storage(cpu, t) }) else {
        return Err(Error::unsupported(CANDLE, op, format!("candle storage of dtype {}", cpu.dtype().as_str())));
    };
    let tensor = Tensor::cpu_view(data, layout.dims().to_vec(), layout.stride().to_vec(), layout.start_offset());
    Ok(Prepared::Held { tensor, _lock: Box::new(storage) })
}

impl FromOutput for candle::Tensor {
    fn from_output(output: Tensor) -> Result<Self> {
        output.into_candle()
    }
}

/// A fuse error as candle's (`candle_core::Error::Wrapped`): `?` on fuse calls inside candle code, and the
/// errors of `#[fuse]` functions that return `candle_core::Result`.
impl From<Error> for candle::Error {
    fn from(e: Error) -> candle::Error {
        candle::Error::wrap(e)
    }
}

impl Tensor {
    /// A fuse tensor with the values of a candle tensor (f32, f16, bf16 or u32), dense, in its order, on the
    /// same device: one copy (inside a `#[fuse]` function candle arguments are read in place instead). A
    /// candle tensor of another dtype, or on a device this build does not take, is an error that says so.
    pub fn from_candle(t: &candle::Tensor) -> Result<Tensor> {
        let held = view_of(t, "Tensor::from_candle")?;
        let crate::fused::Arg::Tensor(view) = held.arg() else {
            return Err(Error::internal(CANDLE, "a candle tensor prepared as a scalar"));
        };
        match view.device() {
            Device::Cpu => view.dense_copy(),
            // On the GPU, in fuse's memory, ordered after candle's writes.
            #[cfg(feature = "candle-cuda")]
            Device::Cuda(_) => {
                let dense = view.contiguous()?;
                Tensor::from_cuda_slice(dense.to_cuda_slice()?, dense.dtype(), dense.shape(), dense.device())
            }
            #[cfg(not(feature = "candle-cuda"))]
            Device::Cuda(_) => Err(Error::internal(CANDLE, "a candle tensor viewed on a GPU without candle-cuda")),
        }
    }

    /// This tensor as a CPU candle tensor of the same dtype and shape, without a copy when it is the only
    /// handle to a dense vector (what a fused function returns), else with one. A GPU tensor is an error:
    /// move it with `.to_device(&Device::Cpu)` first.
    pub fn into_candle(self) -> Result<candle::Tensor> {
        #[cfg(feature = "candle-cuda")]
        if let Device::Cuda(gpu) = self.device() {
            let gpu = gpu.clone();
            return cuda::into_candle(self, &gpu);
        }
        if self.device() != &Device::Cpu {
            return Err(Error::unsupported(
                CANDLE,
                "into_candle",
                format!(
                    "a tensor on {}: candle tensors from fuse are CPU tensors; call `.to_device(&Device::Cpu)` first",
                    self.device()
                ),
            ));
        }
        let (shape, self_dtype) = (self.shape().to_vec(), self.dtype());
        let data = match self.into_dense_data() {
            Ok(data) => data,
            Err(t) => t
                .dense_copy()?
                .into_dense_data()
                .map_err(|_| Error::internal(CANDLE, "a fresh copy has another handle"))?,
        };
        let made = match data {
            CpuData::F32(v) => candle::Tensor::from_vec(v, shape, &candle::Device::Cpu),
            CpuData::F16(v) => candle::Tensor::from_vec(v, shape, &candle::Device::Cpu),
            CpuData::BF16(v) => candle::Tensor::from_vec(v, shape, &candle::Device::Cpu),
            CpuData::U32(v) => candle::Tensor::from_vec(v, shape, &candle::Device::Cpu),
            CpuData::Borrowed(_) => return Err(Error::internal(CANDLE, "a dense copy still borrows candle's memory")),
            CpuData::Blocks(_) => return Err(blocks_to_candle(self_dtype)),
        };
        made.map_err(|e| Error::internal(CANDLE, format!("candle refused a tensor fuse made: {e}")))
    }

    /// This tensor as a candle tensor on `device`, which must be the device it is on (candle's CPU, or a candle
    /// CUDA device of the same GPU with the `candle-cuda` feature): like [`Tensor::into_candle`], without a
    /// copy when this is the only handle to a dense buffer.
    pub fn into_candle_on(self, device: &candle::Device) -> Result<candle::Tensor> {
        match (device, self.device()) {
            (candle::Device::Cpu, Device::Cpu) => self.into_candle(),
            #[cfg(feature = "candle-cuda")]
            (candle::Device::Cuda(theirs), Device::Cuda(gpu))
                if device.location() == (candle::DeviceLocation::Cuda { gpu_id: gpu.ordinal() }) =>
            {
                let gpu = gpu.clone();
                cuda::into_candle_on(self, &gpu, theirs)
            }
            (theirs, ours) => Err(Error::unsupported(
                CANDLE,
                "into_candle_on",
                format!(
                    "a tensor on {ours} onto candle's {:?}: move it with `.to_device(..)` first",
                    theirs.location()
                ),
            )),
        }
    }

    /// [`Tensor::into_candle`] of a clone: a copy unless the clone is the only handle.
    pub fn to_candle(&self) -> Result<candle::Tensor> {
        self.clone().into_candle()
    }
}

/// A block-quantized tensor has no candle tensor of its own kind here (candle's quantized tensors are another
/// type): the error says to dequantize first.
pub(super) fn blocks_to_candle(dtype: DType) -> Error {
    Error::unsupported(
        CANDLE,
        "into_candle",
        format!("a {dtype} tensor: dequantize it first with `.to_dtype(DType::F32)` (or F16, BF16)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::Arg;

    #[test]
    fn a_candle_argument_is_read_in_place_under_its_lock() {
        let c = candle::Tensor::from_vec((0..24).map(|i| i as f32).collect::<Vec<f32>>(), (4, 6), &candle::Device::Cpu)
            .unwrap();
        let view = c.narrow(1, 1, 3).unwrap();
        let held = view.prepare().unwrap();
        let Arg::Tensor(t) = held.arg() else { panic!("a candle tensor prepared as a scalar") };
        assert!(t.is_borrowed());
        assert_eq!((t.shape(), t.strides(), t.offset()), (&[4, 3][..], &[6, 1][..], 1));
        let (storage, _) = c.storage_and_layout();
        let candle::Storage::Cpu(candle::CpuStorage::F32(theirs)) = &*storage else { panic!("f32 CPU storage") };
        let ours = t.cpu_storage().read().typed::<f32>().unwrap().as_ptr();
        assert_eq!(ours, theirs.as_ptr(), "the view reads candle's vector, not a copy");
        drop(storage);
        assert_eq!(t.to_vec::<f32>().unwrap(), view.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }

    #[test]
    fn a_sole_dense_result_moves_into_candle_and_a_shared_one_is_copied() {
        let ours =
            Tensor::from_vec((0..12).map(|i| i as f32 * 0.5).collect::<Vec<f32>>(), &[3, 4], &Device::Cpu).unwrap();
        let at = ours.cpu_storage().read().typed::<f32>().unwrap().as_ptr();
        let kept = ours.clone();
        let copied = ours.into_candle().unwrap();
        let moved = kept.into_candle().unwrap();
        let address = |c: &candle::Tensor| {
            let (storage, _) = c.storage_and_layout();
            let candle::Storage::Cpu(candle::CpuStorage::F32(v)) = &*storage else { panic!("f32 CPU storage") };
            v.as_ptr()
        };
        assert_ne!(address(&copied), at, "a tensor with another handle was moved, not copied");
        assert_eq!(address(&moved), at, "the last handle's vector was copied, not moved");
        assert_eq!(moved.to_vec2::<f32>().unwrap(), copied.to_vec2::<f32>().unwrap());
    }
}
