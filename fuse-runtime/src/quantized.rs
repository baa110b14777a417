//! Block-quantized tensors (`DType::Q4_0` .. `DType::Q6_K`): made from a model file's bytes as stored.
//!
//! Their elements are the tensor's in row-major order, the last axis in whole blocks (a file's rows always
//! are). On the CPU the bytes are read in place (`from_shared_blocks`: a memory-mapped file stays the only
//! copy); on a GPU they are uploaded once. What reads them: a matmul's right operand (`x.matmul(&w.t())`),
//! `embedding`'s table, `to_dtype` (which dequantizes), and views that keep the elements where they are
//! (`t()`, `narrow`, `reshape` of a dense tensor). See [`fuse_ir::quant`] for each layout.

use crate::host::{BlockBytes, Blocks, CpuData};
use crate::tensor::{checked_numel, Storage};
use crate::{DType, Device, Error, Result, Tensor};
use std::ops::Range;
use std::sync::Arc;

impl Tensor {
    /// A block-quantized tensor of `shape` from `bytes`, whole blocks of `dtype` as GGUF stores them (the
    /// elements in row-major order; the last axis a multiple of the block's values). On a GPU the bytes are
    /// uploaded once.
    ///
    /// ```
    /// // In a user's crate these are `fuse::...`: the facade re-exports this crate.
    /// use fuse_runtime::{DType, Device, Tensor};
    /// // Two rows of 32 values in Q8_0: each block an f16 scale and 32 signed bytes.
    /// let mut bytes = Vec::new();
    /// for row in 0..2u8 {
    ///     bytes.extend_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
    ///     bytes.extend((0..32).map(|i| (i as i8 - row as i8) as u8));
    /// }
    /// let w = Tensor::from_blocks(DType::Q8_0, &[2, 32], bytes, &Device::Cpu)?;
    /// assert_eq!((w.dtype(), w.shape()), (DType::Q8_0, &[2usize, 32][..]));
    /// let values = w.to_dtype(DType::F32)?.to_vec::<f32>()?;
    /// assert_eq!((values[3], values[32 + 3]), (1.5, 1.0));
    /// # Ok::<(), fuse_runtime::Error>(())
    /// ```
    pub fn from_blocks(dtype: DType, shape: &[usize], bytes: Vec<u8>, device: &Device) -> Result<Tensor> {
        check_blocks(dtype, shape, bytes.len())?;
        Tensor::blocks_on(Blocks::new(dtype, BlockBytes::Owned(bytes)), shape, device)
    }

    /// The same from `range` of the bytes `owner` holds (a memory-mapped model file, say), read in place on
    /// the CPU for as long as the tensor or a view of it lives (no copy: `owner` must not change them), and
    /// uploaded once to a GPU.
    pub fn from_shared_blocks(
        dtype: DType,
        shape: &[usize],
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        range: Range<usize>,
        device: &Device,
    ) -> Result<Tensor> {
        let held = (*owner).as_ref().len();
        if range.start > range.end || range.end > held {
            return Err(Error::InvalidArgument {
                op: "from_shared_blocks",
                reason: format!("bytes {range:?} of an owner holding {held}"),
            });
        }
        check_blocks(dtype, shape, range.len())?;
        let bytes = BlockBytes::Shared { owner, start: range.start, len: range.len() };
        Tensor::blocks_on(Blocks::new(dtype, bytes), shape, device)
    }

    fn blocks_on(blocks: Blocks, shape: &[usize], device: &Device) -> Result<Tensor> {
        let data = CpuData::Blocks(blocks);
        match device {
            Device::Cpu => Ok(Tensor::from_cpu(data, shape.to_vec())),
            Device::Cuda(d) => {
                Ok(Tensor::from_cuda(crate::cuda::storage::CudaStorage::upload(d, &data)?, shape.to_vec()))
            }
        }
    }

    /// Columns `start .. start + len` of every row of a dense block-quantized tensor `[.., n]`, as a tensor of its own, the bytes copied: a row-parallel shard of a weight as a file stores it
    /// (`fuse::parallel`). Both ends on block boundaries, else an error naming the shape.
    pub(crate) fn block_columns(&self, start: usize, len: usize) -> Result<Tensor> {
        let (dtype, shape) = (self.dtype(), self.shape());
        let (Some(block), Some(&n)) = (dtype.block(), shape.last()) else {
            return shard_error("Rank::shard", format!("a {dtype} tensor of shape {shape:?} is not block-quantized"));
        };
        if start % block.elements != 0 || len % block.elements != 0 || start + len > n {
            let reason = format!(
                "columns {start}..{} of a {dtype} tensor of shape {shape:?}: a shard of blocks of {} values must \
                 start and end on a block",
                start + len,
                block.elements
            );
            return shard_error("Rank::shard", reason);
        }
        let bytes_of = |elements: usize| elements / block.elements * block.bytes;
        let (first, take, rows) = (bytes_of(start), bytes_of(len), self.numel() / n.max(1));
        let mut part = shape.to_vec();
        *part.last_mut().expect("a last axis") = len;
        self.copied_blocks("Rank::shard", &part, |bytes, row| {
            (0..rows).flat_map(|r| &bytes[r * row + first..r * row + first + take]).copied().collect()
        })
    }

    /// The rows `start .. start + len` of each of `slices`, one after the other, of a dense block-quantized
    /// matrix `[rows, n]`, as a matrix of its own (the bytes copied): a rank's part of a stacked weight as a file
    /// stores it (`fuse::parallel`).
    pub(crate) fn block_rows(&self, slices: &[(usize, usize)]) -> Result<Tensor> {
        let (dtype, shape) = (self.dtype(), self.shape());
        let &[rows, n] = shape else {
            return shard_error("Rank::shard_stacked", format!("a {dtype} tensor of shape {shape:?} is not a matrix"));
        };
        if let Some(&(start, len)) = slices.iter().find(|(start, len)| start + len > rows) {
            let reason = format!("rows {start}..{} of a {dtype} matrix of shape {shape:?}", start + len);
            return shard_error("Rank::shard_stacked", reason);
        }
        let part = [slices.iter().map(|s| s.1).sum(), n];
        self.copied_blocks("Rank::shard_stacked", &part, |bytes, row| {
            slices.iter().flat_map(|&(start, len)| &bytes[start * row..(start + len) * row]).copied().collect()
        })
    }

    /// A tensor of `shape`, on this one's device, holding the bytes `copy` picks from this dense
    /// block-quantized tensor's (given them and a row's bytes): what the shards above share.
    fn copied_blocks(
        &self,
        op: &'static str,
        shape: &[usize],
        copy: impl FnOnce(&[u8], usize) -> Vec<u8>,
    ) -> Result<Tensor> {
        let (dtype, n) = (self.dtype(), self.shape().last().copied().unwrap_or(0));
        let row = dtype.storage_bytes(n).unwrap_or(0);
        let bytes = crate::tensor::with_dense_blocks(self, op, |bytes| copy(bytes, row))?;
        Tensor::from_blocks(dtype, shape, bytes, self.device())
    }

    /// Whether this is a CPU tensor whose block-quantized bytes are another owner's, read in place.
    pub fn reads_blocks_in_place(&self) -> bool {
        match self.storage() {
            Storage::Cpu(cpu) => cpu.read().is_shared_blocks(),
            Storage::Cuda(_) => false,
        }
    }
}

fn shard_error(op: &'static str, reason: String) -> Result<Tensor> {
    Err(Error::InvalidArgument { op, reason })
}

fn check_blocks(dtype: DType, shape: &[usize], bytes: usize) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidArgument { op: "from_blocks", reason });
    let Some(block) = dtype.block() else {
        return invalid(format!("{dtype} is not a block-quantized type (use Tensor::from_vec)"));
    };
    let last = shape.last().copied().unwrap_or(1);
    if shape.is_empty() || last % block.elements != 0 {
        return invalid(format!(
            "shape {shape:?}: the last axis of a {dtype} tensor holds whole blocks of {} values",
            block.elements
        ));
    }
    let expected = checked_numel(shape).and_then(|n| dtype.storage_bytes(n));
    if expected != Some(bytes) {
        let expected = expected.map_or("more than memory holds".to_string(), |e| e.to_string());
        return invalid(format!("{bytes} bytes for a {dtype} tensor of shape {shape:?}, which takes {expected}"));
    }
    Ok(())
}
