//! `Tensor`: a strided view of shared storage. Cloning is cheap (the storage is behind an `Arc`); views
//! such as `.t()` change shape and strides only.

use crate::cuda::storage::CudaStorage;
use crate::element::Element;
use crate::error::EAGER;
use crate::host::{for_each_offset, for_each_run, BlockBytes, Blocks, CpuData, CpuSlice, CpuStorage};
use crate::layout::row_offset;
use crate::{Device, Error, Result};
use fuse_ir::infer::InferError;
use fuse_ir::view::Layout;
use fuse_ir::DType;
use std::fmt;
use std::sync::Arc;

/// The memory behind tensors, one variant per backend.
pub(crate) enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    shape: Vec<usize>,
    /// In elements; 0 on broadcast axes.
    strides: Vec<usize>,
    offset: usize,
    device: Device,
}

/// Row-major strides of a dense tensor of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut step = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step *= d;
    }
    strides
}

/// Number of elements of `shape`, or `None` if it overflows `usize`.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl Tensor {
    /// A tensor holding `data` in row-major order. Errors if `data.len()` is not the product of `shape`.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize], device: &Device) -> Result<Tensor> {
        let expected = checked_numel(shape);
        if expected != Some(data.len()) {
            return Err(Error::DataLength {
                shape: shape.to_vec(),
                len: data.len(),
                expected: expected.unwrap_or(usize::MAX),
            });
        }
        match device {
            Device::Cpu => Ok(Tensor::from_cpu(CpuData::from_vec(data), shape.to_vec())),
            Device::Cuda(d) => Ok(Tensor::from_cuda(CudaStorage::upload(d, &CpuData::from_vec(data))?, shape.to_vec())),
        }
    }

    /// Overwrites this tensor's elements, in place, with `values` (row-major, as many as it has, of its
    /// dtype); the tensor must be dense. Every clone and view of it sees the new values: how a step's inputs
    /// (token ids, positions) change between replays of a `CudaGraph`, with one copy and no kernel. On a GPU
    /// the copy is queued on the device's stream, after the work already queued.
    pub fn copy_from_host<T: Element>(&self, values: &[T]) -> Result<()> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DType {
                function: EAGER.into(),
                op: "copy_from_host",
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        if values.len() != self.numel() || !self.is_contiguous() {
            return Err(Error::DataLength { shape: self.shape.clone(), len: values.len(), expected: self.numel() });
        }
        match self.storage.as_ref() {
            Storage::Cpu(cpu) => cpu.write(|data| {
                let all = data.typed_mut::<T>().expect("the dtype was checked above");
                all[self.offset..self.offset + values.len()].copy_from_slice(values);
            }),
            Storage::Cuda(gpu) => gpu.write_from_host(self.offset, values)?,
        }
        Ok(())
    }

    /// A dense tensor over device memory holding at least the shape's elements (the caller guarantees it).
    pub(crate) fn from_cuda(storage: CudaStorage, shape: Vec<usize>) -> Tensor {
        let strides = contiguous_strides(&shape);
        let device = Device::Cuda(storage.device().clone());
        Tensor { storage: Arc::new(Storage::Cuda(storage)), shape, strides, offset: 0, device }
    }

    /// A dense view of `shape` over the same storage, starting `offset` elements in (the caller guarantees
    /// the storage holds it).
    pub(crate) fn at_offset(&self, offset: usize, shape: Vec<usize>) -> Tensor {
        let strides = contiguous_strides(&shape);
        Tensor { storage: self.storage.clone(), shape, strides, offset, device: self.device.clone() }
    }

    /// The view of index `i` of the first axis, that axis kept with size 1 (the caller guarantees `i` is in
    /// range).
    pub(crate) fn first_axis_index(&self, i: usize) -> Tensor {
        let mut shape = self.shape.clone();
        shape[0] = 1;
        let offset = self.offset + i * self.strides[0];
        Tensor {
            storage: self.storage.clone(),
            shape,
            strides: self.strides.clone(),
            offset,
            device: self.device.clone(),
        }
    }

    /// A view of `shape` with `strides` from `offset` over CPU data (which the caller guarantees holds it).
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    pub(crate) fn cpu_view(data: CpuData, shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Tensor {
        Tensor { storage: Arc::new(Storage::Cpu(CpuStorage::new(data))), shape, strides, offset, device: Device::Cpu }
    }

    /// A view of `shape` with `strides` from `offset` over device memory (which the caller guarantees holds it).
    pub(crate) fn cuda_view(storage: CudaStorage, shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Tensor {
        let device = Device::Cuda(storage.device().clone());
        Tensor { storage: Arc::new(Storage::Cuda(storage)), shape, strides, offset, device }
    }

    /// The pool buffer of a GPU tensor that is its only handle and holds exactly it, in order; else the
    /// tensor back.
    #[cfg(feature = "candle-cuda")]
    pub(crate) fn into_cuda_buffer(self) -> std::result::Result<cudarc::driver::CudaSlice<u8>, Tensor> {
        let whole = self.is_contiguous() && self.offset == 0;
        let numel = self.numel();
        let Tensor { storage, shape, strides, offset, device } = self;
        match Arc::try_unwrap(storage) {
            Ok(Storage::Cuda(gpu)) if whole && gpu.len() == numel && gpu.is_pool() => {
                gpu.take_pool_buffer().ok_or_else(|| unreachable!("a pool storage without its buffer"))
            }
            Ok(storage) => Err(Tensor { storage: Arc::new(storage), shape, strides, offset, device }),
            Err(storage) => Err(Tensor { storage, shape, strides, offset, device }),
        }
    }

    /// Whether this reads another library's memory in place (a candle tensor inside a `#[fuse]` call).
    pub(crate) fn is_borrowed(&self) -> bool {
        matches!(self.storage.as_ref(), Storage::Cpu(cpu) if cpu.read().is_borrowed())
    }

    /// The dense vector of this tensor when it is the only handle to a storage that holds exactly it, in
    /// order; else the tensor back.
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    pub(crate) fn into_dense_data(self) -> std::result::Result<CpuData, Tensor> {
        let whole = self.is_contiguous() && self.offset == 0;
        let Tensor { storage, shape, strides, offset, device } = self;
        match Arc::try_unwrap(storage) {
            Ok(Storage::Cpu(cpu))
                if whole
                    && cpu.read().slice().len() == checked_numel(&shape).unwrap_or(0)
                    && !cpu.read().is_borrowed() =>
            {
                Ok(cpu.into_data())
            }
            Ok(storage) => Err(Tensor { storage: Arc::new(storage), shape, strides, offset, device }),
            Err(storage) => Err(Tensor { storage, shape, strides, offset, device }),
        }
    }

    /// A dense tensor over freshly computed CPU data (whose length the caller guarantees).
    pub(crate) fn from_cpu(data: CpuData, shape: Vec<usize>) -> Tensor {
        let strides = contiguous_strides(&shape);
        Tensor {
            storage: Arc::new(Storage::Cpu(CpuStorage::new(data))),
            shape,
            strides,
            offset: 0,
            device: Device::Cpu,
        }
    }

    /// The elements in row-major order, converted to `T` (bf16 -> f32 is exact; f32 -> bf16 rounds; u32 ids
    /// -> f32 is exact below 2^24). Reading a float tensor as `u32` is an error: floats are not ids.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE == DType::U32 && self.dtype() != DType::U32 {
            return Err(Error::DType { function: EAGER.into(), op: "to_vec", expected: DType::U32, got: self.dtype() });
        }
        let cpu = match self.storage.as_ref() {
            Storage::Cpu(cpu) => cpu,
            Storage::Cuda(_) => return self.to_device(&Device::Cpu)?.to_vec(),
        };
        let cpu = cpu.read();
        if let Some(all) = cpu.typed::<T>() {
            if self.is_contiguous() {
                return Ok(all[self.offset..self.offset + self.numel()].to_vec());
            }
            let mut out = Vec::with_capacity(self.numel());
            for_each_run(&self.shape, &self.strides, self.offset, |at, len| out.extend_from_slice(&all[at..at + len]));
            return Ok(out);
        }
        let data = cpu.slice();
        if self.is_contiguous() {
            // One pass over the run (a block type decodes each block once, not once an element).
            let mut values = vec![0.0f32; self.numel()];
            data.read_f32(self.offset, 1, &mut values);
            return Ok(values.into_iter().map(T::from_f32).collect());
        }
        let mut out = Vec::with_capacity(self.numel());
        for_each_offset(&self.shape, &self.strides, self.offset, |i| out.push(T::from_f32(data.get_f32(i))));
        Ok(out)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Strides in elements (0 on broadcast axes).
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    pub fn dtype(&self) -> DType {
        match self.storage.as_ref() {
            Storage::Cpu(cpu) => cpu.dtype(),
            Storage::Cuda(gpu) => gpu.dtype(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Whether the elements lie in row-major order without gaps (axes of size 1 do not count).
    pub fn is_contiguous(&self) -> bool {
        let dense = contiguous_strides(&self.shape);
        self.shape.iter().zip(&self.strides).zip(&dense).all(|((&d, &s), &want)| d == 1 || s == want)
    }

    /// The last two axes swapped: a view, nothing is copied.
    pub fn t(&self) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::Shape {
                function: EAGER.into(),
                op: "t",
                label: "t()".into(),
                error: InferError::Rank { needs: "at least two axes to transpose", shape: self.shape.clone() },
            });
        }
        let mut view = self.clone();
        view.shape.swap(r - 2, r - 1);
        view.strides.swap(r - 2, r - 1);
        Ok(view)
    }

    /// Where this tensor's elements lie in its storage.
    pub(crate) fn layout(&self) -> Layout {
        Layout { shape: self.shape.clone(), strides: self.strides.clone(), offset: self.offset }
    }

    /// A view of the same storage with another layout (the caller guarantees the storage holds it).
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        let Layout { shape, strides, offset } = layout;
        Tensor { storage: self.storage.clone(), shape, strides, offset, device: self.device.clone() }
    }

    /// The same tensor on `device` (a cheap clone when it is already there). A copy to the host keeps the
    /// view (shape, strides, offset) over a copy of the whole allocation; a copy to a GPU is dense.
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if &self.device == device {
            return Ok(self.clone());
        }
        match (self.storage.as_ref(), device) {
            (Storage::Cuda(gpu), Device::Cpu) => {
                let storage = Arc::new(Storage::Cpu(CpuStorage::new(gpu.download()?)));
                Ok(Tensor {
                    storage,
                    shape: self.shape.clone(),
                    strides: self.strides.clone(),
                    offset: self.offset,
                    device: Device::Cpu,
                })
            }
            (Storage::Cpu(_), Device::Cuda(d)) => {
                let dense = self.dense_cpu_data()?;
                Ok(Tensor::from_cuda(CudaStorage::upload(d, &dense)?, self.shape.clone()))
            }
            // Between GPUs: through the host (peer copies are a later optimisation).
            (Storage::Cuda(_), Device::Cuda(_)) => self.to_device(&Device::Cpu)?.to_device(device),
            (Storage::Cpu(_), Device::Cpu) => Ok(self.clone()),
        }
    }

    /// A dense copy in host memory, in the tensor's own dtype (for kernels that read rows in place).
    pub(crate) fn dense_copy(&self) -> Result<Tensor> {
        Ok(Tensor::from_cpu(self.dense_cpu_data()?, self.shape.clone()))
    }

    /// The elements in row-major order, in the tensor's own dtype, on the host.
    pub(crate) fn dense_cpu_data(&self) -> Result<CpuData> {
        Ok(match self.dtype() {
            DType::F32 => CpuData::F32(self.to_vec()?),
            DType::F16 => CpuData::F16(self.to_vec()?),
            DType::BF16 => CpuData::BF16(self.to_vec()?),
            DType::U32 => CpuData::U32(self.to_vec()?),
            q => CpuData::Blocks(dense_blocks(self, q)?),
        })
    }

    /// Host memory of a CPU tensor. The CPU backend only ever receives CPU tensors: the executor checks
    /// the device of every argument before choosing the backend.
    pub(crate) fn cpu_storage(&self) -> &CpuStorage {
        match self.storage.as_ref() {
            Storage::Cpu(cpu) => cpu,
            Storage::Cuda(_) => {
                unreachable!("a GPU tensor reached the CPU backend (exec::execute dispatches by device)")
            }
        }
    }

    /// The memory behind this tensor.
    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Device memory of a GPU tensor, `None` for a CPU tensor.
    pub(crate) fn cuda_storage(&self) -> Option<&CudaStorage> {
        match self.storage.as_ref() {
            Storage::Cuda(gpu) => Some(gpu),
            Storage::Cpu(_) => None,
        }
    }

    /// Whether both are views of the same memory.
    pub(crate) fn shares_memory_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    pub(crate) fn offset(&self) -> usize {
        self.offset
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        write!(f, "Tensor({:?}, {}, {}", self.shape, self.dtype(), self.device)?;
        let host;
        let on_host = match self.storage.as_ref() {
            Storage::Cpu(_) => self,
            Storage::Cuda(_) => match self.to_device(&Device::Cpu) {
                Ok(t) => {
                    host = t;
                    &host
                }
                Err(e) => return write!(f, ", <unreadable: {e}>)"),
            },
        };
        let guard = on_host.cpu_storage().read();
        let data = guard.slice();
        let shown: Vec<String> = (0..self.numel().min(SHOWN))
            .map(|i| {
                let at = self.offset + row_offset(i, &self.shape, &self.strides);
                match data {
                    CpuSlice::U32(ids) => ids[at].to_string(),
                    _ => data.get_f32(at).to_string(),
                }
            })
            .collect();
        let more = if self.numel() > SHOWN { ", ..." } else { "" };
        write!(f, ", [{}{more}])", shown.join(", "))
    }
}

/// The blocks of a dense, block-aligned view of a block-quantized tensor, copied (what moving one between
/// devices needs). A transposed or strided view has no such bytes: it is an error saying so.
fn dense_blocks(t: &Tensor, dtype: DType) -> Result<Blocks> {
    let bytes = with_dense_blocks(t, "to_device", <[u8]>::to_vec)?;
    Ok(Blocks::new(dtype, BlockBytes::Owned(bytes)))
}

/// `f` of the bytes of `t`, a dense, block-aligned view of a block-quantized tensor (read in place on the
/// CPU, downloaded from a GPU): what copying its blocks, whole or in parts, reads. A transposed or strided view
/// has no such bytes: an error saying so, `op` the caller.
pub(crate) fn with_dense_blocks<R>(t: &Tensor, op: &'static str, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let dtype = t.dtype();
    let Some(block) = dtype.block() else {
        return Err(Error::InvalidArgument { op, reason: format!("a {dtype} tensor is not block-quantized") });
    };
    if !t.is_contiguous() || t.layout().offset % block.elements != 0 {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "a {dtype} view of shape {:?} that is not dense whole blocks (a transposed or strided view) cannot \
                 be copied as blocks: copy the tensor it views, or dequantize it first with .to_dtype(..)",
                t.shape()
            ),
        });
    }
    let first = t.layout().offset / block.elements * block.bytes;
    let len = dtype.storage_bytes(t.numel()).expect("whole blocks");
    Ok(match t.storage() {
        Storage::Cpu(cpu) => match cpu.read().slice() {
            CpuSlice::Blocks(_, bytes) => f(&bytes[first..first + len]),
            _ => unreachable!("a block dtype's storage holds blocks"),
        },
        Storage::Cuda(gpu) => match gpu.download_range(t.layout().offset, t.numel())? {
            CpuData::Blocks(b) => f(b.bytes()),
            _ => unreachable!("a block dtype's storage holds blocks"),
        },
    })
}
