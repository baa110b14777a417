//! Host memory of a tensor: one typed vector, plus an f32 copy made on first need for the GEMM (which
//! runs in f32), kept so that weights are converted once across calls rather than on every call.
//!
//! The vector sits behind a lock because one op writes into its operand in place (`slice_set`, a key/value
//! cache's append): readers hold a read guard while they run, the write holds the write guard and drops the
//! f32 copy, so a reader never sees a half-written vector nor a stale copy.

use crate::element::Element;
use fuse_ir::DType;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::any::Any;
use std::ops::Deref;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

pub(crate) enum CpuData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    U32(Vec<u32>),
    /// Another library's memory, read in place for the length of one `#[fuse]` call (`candle.rs`).
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    Borrowed(Borrowed),
    /// Block-quantized weights as a file stores them (`Tensor::from_blocks`).
    Blocks(Blocks),
}

/// Whole blocks of a block-quantized `dtype`, the tensor's elements in row-major order: a vector of fuse's own
/// or bytes another owner keeps alive and unchanged (a memory-mapped model file), read in place.
pub(crate) struct Blocks {
    dtype: DType,
    bytes: BlockBytes,
}

pub(crate) enum BlockBytes {
    Owned(Vec<u8>),
    /// `len` bytes from `start` of what `owner` holds.
    Shared {
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        start: usize,
        len: usize,
    },
}

impl Blocks {
    /// The caller checked that `bytes` are whole blocks of `dtype`, a block type.
    pub(crate) fn new(dtype: DType, bytes: BlockBytes) -> Blocks {
        Blocks { dtype, bytes }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.bytes {
            BlockBytes::Owned(v) => v,
            BlockBytes::Shared { owner, start, len } => &(**owner).as_ref()[*start..*start + *len],
        }
    }

    /// Whether the bytes are another owner's, read in place.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.bytes, BlockBytes::Shared { .. })
    }
}

/// `len` elements of `dtype` at `ptr`, owned by another library: read only (a write first copies them into
/// a vector of fuse's own). Whoever makes one keeps the memory alive and unwritten for as long as it is read
/// (`_owner`, and the lock the caller holds); see `CpuData::borrowed`.
pub(crate) struct Borrowed {
    ptr: *const u8,
    len: usize,
    dtype: DType,
    _owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: the memory is only read through shared references while its owner's lock is held (see
// `CpuData::borrowed`); the raw pointer is what keeps the type from being Send and Sync by itself.
unsafe impl Send for Borrowed {}
unsafe impl Sync for Borrowed {}

pub(crate) struct CpuStorage {
    data: RwLock<CpuData>,
    /// The data as f32 when it is of another dtype, made on first need; dropped by a write.
    f32_shadow: Mutex<Option<Arc<Vec<f32>>>>,
}

/// Read access to a storage's vector for as long as it lives.
pub(crate) struct CpuRead<'a>(RwLockReadGuard<'a, CpuData>);

impl CpuRead<'_> {
    pub(crate) fn slice(&self) -> CpuSlice<'_> {
        self.0.as_slice()
    }

    /// The whole vector as `T` when that is its type (no conversion).
    pub(crate) fn typed<T: Element>(&self) -> Option<&[T]> {
        self.0.typed()
    }

    /// Whether this is another library's memory, read in place.
    pub(crate) fn is_borrowed(&self) -> bool {
        self.0.is_borrowed()
    }

    /// Whether this is block-quantized bytes another owner holds, read in place.
    pub(crate) fn is_shared_blocks(&self) -> bool {
        matches!(&*self.0, CpuData::Blocks(b) if b.is_shared())
    }
}

/// A storage's elements as f32: the vector itself (read-locked) or its converted copy.
pub(crate) enum F32Read<'a> {
    Data(RwLockReadGuard<'a, CpuData>),
    Copy(Arc<Vec<f32>>),
}

impl Deref for F32Read<'_> {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            F32Read::Data(guard) => match guard.as_slice() {
                CpuSlice::F32(v) => v,
                _ => unreachable!("F32Read::Data holds f32 data only"),
            },
            F32Read::Copy(v) => v,
        }
    }
}

/// A borrowed typed slice: what kernels read.
#[derive(Clone, Copy)]
pub(crate) enum CpuSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    U32(&'a [u32]),
    /// Whole blocks of a block-quantized dtype.
    Blocks(DType, &'a [u8]),
}

impl CpuData {
    /// Wraps a vector of any element type without copying it.
    pub(crate) fn from_vec<T: Element>(data: Vec<T>) -> CpuData {
        let any: Box<dyn Any> = Box::new(data);
        // The element trait is sealed to these three types, so one downcast succeeds.
        match any.downcast::<Vec<f32>>() {
            Ok(v) => CpuData::F32(*v),
            Err(any) => match any.downcast::<Vec<f16>>() {
                Ok(v) => CpuData::F16(*v),
                Err(any) => match any.downcast::<Vec<bf16>>() {
                    Ok(v) => CpuData::BF16(*v),
                    Err(any) => match any.downcast::<Vec<u32>>() {
                        Ok(v) => CpuData::U32(*v),
                        Err(_) => unreachable!("Element is sealed to f32, f16, bf16 and u32"),
                    },
                },
            },
        }
    }

    /// `values` read in place, without a copy, kept alive by `owner`.
    ///
    /// # Safety
    /// `values` must stay valid and unwritten for as long as the returned data (or any tensor over it) is
    /// read: `owner` keeps the allocation alive, and the caller holds its library's read lock meanwhile.
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    pub(crate) unsafe fn borrowed<T: Element>(values: &[T], owner: Box<dyn Any + Send + Sync>) -> CpuData {
        CpuData::Borrowed(Borrowed { ptr: values.as_ptr().cast(), len: values.len(), dtype: T::DTYPE, _owner: owner })
    }

    /// Whether this is another library's memory (`CpuData::borrowed`).
    pub(crate) fn is_borrowed(&self) -> bool {
        matches!(self, CpuData::Borrowed(_))
    }

    /// The data as a vector of fuse's own: borrowed memory is copied first (nothing writes into it).
    pub(crate) fn owned_mut(&mut self) -> &mut CpuData {
        if let CpuData::Borrowed(b) = self {
            *self = match b.slice() {
                CpuSlice::F32(v) => CpuData::F32(v.to_vec()),
                CpuSlice::F16(v) => CpuData::F16(v.to_vec()),
                CpuSlice::BF16(v) => CpuData::BF16(v.to_vec()),
                CpuSlice::U32(v) => CpuData::U32(v.to_vec()),
                CpuSlice::Blocks(..) => unreachable!("borrowed memory holds element types only"),
            };
        }
        self
    }

    /// A vector of `len` elements of `dtype` for a caller that writes every element before any is read: f32
    /// from the kept vectors (`recycle.rs`) as they were left, other dtypes zeros.
    pub(crate) fn for_overwrite(dtype: DType, len: usize) -> CpuData {
        match dtype {
            DType::F32 => CpuData::F32(crate::recycle::for_overwrite_f32(len)),
            _ => CpuData::zeros(dtype, len),
        }
    }

    /// A zero-filled vector of `len` elements of `dtype`.
    pub(crate) fn zeros(dtype: DType, len: usize) -> CpuData {
        match dtype {
            DType::F32 => CpuData::F32(crate::recycle::zeros_f32(len)),
            DType::F16 => CpuData::F16(vec![f16::ZERO; len]),
            DType::BF16 => CpuData::BF16(vec![bf16::ZERO; len]),
            DType::U32 => CpuData::U32(vec![0; len]),
            q => CpuData::Blocks(Blocks::new(q, BlockBytes::Owned(vec![0; q.storage_bytes(len).unwrap_or(0)]))),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            CpuData::F32(_) => DType::F32,
            CpuData::F16(_) => DType::F16,
            CpuData::BF16(_) => DType::BF16,
            CpuData::U32(_) => DType::U32,
            CpuData::Borrowed(b) => b.dtype,
            CpuData::Blocks(b) => b.dtype,
        }
    }

    pub(crate) fn as_slice(&self) -> CpuSlice<'_> {
        match self {
            CpuData::F32(v) => CpuSlice::F32(v),
            CpuData::F16(v) => CpuSlice::F16(v),
            CpuData::BF16(v) => CpuSlice::BF16(v),
            CpuData::U32(v) => CpuSlice::U32(v),
            CpuData::Borrowed(b) => b.slice(),
            CpuData::Blocks(b) => CpuSlice::Blocks(b.dtype, b.bytes()),
        }
    }

    /// The whole vector as `T` when that is its type (no conversion).
    pub(crate) fn typed<T: Element>(&self) -> Option<&[T]> {
        let (ptr, len, dtype): (*const u8, usize, DType) = match self.as_slice() {
            CpuSlice::F32(v) => (v.as_ptr().cast(), v.len(), DType::F32),
            CpuSlice::F16(v) => (v.as_ptr().cast(), v.len(), DType::F16),
            CpuSlice::BF16(v) => (v.as_ptr().cast(), v.len(), DType::BF16),
            CpuSlice::U32(v) => (v.as_ptr().cast(), v.len(), DType::U32),
            CpuSlice::Blocks(..) => return None,
        };
        // SAFETY: Element is sealed to one Rust type a dtype (f32, f16, bf16, u32), so equal dtypes mean the
        // slice's elements are T; the slice lives as long as `self`.
        (dtype == T::DTYPE).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), len) })
    }

    /// The whole vector as `T`, mutable, when that is its type (borrowed memory is copied first).
    pub(crate) fn typed_mut<T: Element>(&mut self) -> Option<&mut [T]> {
        let any: &mut dyn Any = match self.owned_mut() {
            CpuData::F32(v) => v,
            CpuData::F16(v) => v,
            CpuData::BF16(v) => v,
            CpuData::U32(v) => v,
            CpuData::Borrowed(_) => unreachable!("owned_mut copies borrowed memory"),
            CpuData::Blocks(_) => return None,
        };
        any.downcast_mut::<Vec<T>>().map(|v| v.as_mut_slice())
    }

    fn to_f32(&self) -> Vec<f32> {
        match self.as_slice() {
            CpuSlice::F32(v) => v.to_vec(),
            CpuSlice::F16(v) => v.to_f32_vec(),
            CpuSlice::BF16(v) => v.to_f32_vec(),
            CpuSlice::U32(v) => v.iter().map(|&id| id as f32).collect(),
            CpuSlice::Blocks(dtype, bytes) => {
                fuse_ir::quant::dequantize_to_vec(dtype, bytes).expect("storage holds whole blocks")
            }
        }
    }
}

impl Borrowed {
    fn slice(&self) -> CpuSlice<'_> {
        // SAFETY: `CpuData::borrowed`'s contract: `len` valid, unwritten elements of `dtype` at `ptr` for as
        // long as this lives; the pointer came from a slice of that type, so it is aligned.
        unsafe {
            match self.dtype {
                DType::F32 => CpuSlice::F32(std::slice::from_raw_parts(self.ptr.cast(), self.len)),
                DType::F16 => CpuSlice::F16(std::slice::from_raw_parts(self.ptr.cast(), self.len)),
                DType::BF16 => CpuSlice::BF16(std::slice::from_raw_parts(self.ptr.cast(), self.len)),
                DType::U32 => CpuSlice::U32(std::slice::from_raw_parts(self.ptr.cast(), self.len)),
                q => unreachable!("borrowed memory of the block type {q}"),
            }
        }
    }
}

impl Drop for CpuStorage {
    /// A large f32 vector is kept for the next one of its length (`recycle.rs`).
    fn drop(&mut self) {
        if let CpuData::F32(v) = self.data.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            crate::recycle::give_f32(std::mem::take(v));
        }
    }
}

impl CpuStorage {
    pub(crate) fn new(data: CpuData) -> CpuStorage {
        CpuStorage { data: RwLock::new(data), f32_shadow: Mutex::new(None) }
    }

    /// The vector, read-locked (a panic while another thread wrote cannot leave it torn: writes copy
    /// plain numbers, so the lock's poison is ignored).
    pub(crate) fn read(&self) -> CpuRead<'_> {
        CpuRead(self.data.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    pub(crate) fn dtype(&self) -> DType {
        self.read().0.dtype()
    }

    /// The vector itself, when this was its last handle.
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    pub(crate) fn into_data(mut self) -> CpuData {
        std::mem::replace(
            self.data.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()),
            CpuData::F32(Vec::new()),
        )
    }

    /// The storage as f32, same layout: the data itself for f32, else a converted copy made once (until the
    /// next write).
    pub(crate) fn f32_data(&self) -> F32Read<'_> {
        let guard = self.data.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.dtype() == DType::F32 {
            return F32Read::Data(guard);
        }
        let mut shadow = self.f32_shadow.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        F32Read::Copy(shadow.get_or_insert_with(|| Arc::new(guard.to_f32())).clone())
    }

    /// Changes the vector in place (`f` gets it write-locked); the f32 copy, now stale, is dropped.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut CpuData) -> R) -> R {
        let mut guard = self.data.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let result = f(guard.owned_mut());
        *self.f32_shadow.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        result
    }
}

impl CpuSlice<'_> {
    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            CpuSlice::F32(v) => v.len(),
            CpuSlice::F16(v) => v.len(),
            CpuSlice::BF16(v) => v.len(),
            CpuSlice::U32(v) => v.len(),
            CpuSlice::Blocks(dtype, bytes) => {
                let b = dtype.block().expect("a block type");
                bytes.len() / b.bytes * b.elements
            }
        }
    }

    /// Reads `out.len()` elements starting at `start`, `stride` apart, as f32.
    #[inline]
    pub(crate) fn read_f32(&self, start: usize, stride: usize, out: &mut [f32]) {
        let n = out.len();
        if n == 0 {
            return;
        }
        match (self, stride) {
            (CpuSlice::F32(v), 1) => out.copy_from_slice(&v[start..start + n]),
            (CpuSlice::F16(v), 1) => v[start..start + n].convert_to_f32_slice(out),
            (CpuSlice::BF16(v), 1) => v[start..start + n].convert_to_f32_slice(out),
            (CpuSlice::F32(v), _) => gather(v, start, stride, out, |x| x),
            (CpuSlice::F16(v), _) => gather(v, start, stride, out, f16::to_f32),
            (CpuSlice::BF16(v), _) => gather(v, start, stride, out, bf16::to_f32),
            (CpuSlice::U32(v), _) => gather(v, start, stride, out, |id| id as f32),
            (CpuSlice::Blocks(dtype, bytes), 1) => read_blocks(*dtype, bytes, start, out),
            (CpuSlice::Blocks(..), _) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = self.get_f32(start + i * stride);
                }
            }
        }
    }

    /// One element as f32.
    #[inline]
    pub(crate) fn get_f32(&self, index: usize) -> f32 {
        match self {
            CpuSlice::F32(v) => v[index],
            CpuSlice::F16(v) => v[index].to_f32(),
            CpuSlice::BF16(v) => v[index].to_f32(),
            CpuSlice::U32(v) => v[index] as f32,
            CpuSlice::Blocks(dtype, bytes) => fuse_ir::quant::dequantize_element(*dtype, bytes, index),
        }
    }
}

/// Elements `start .. start + out.len()` of whole blocks of `dtype`, each block they touch decoded once.
fn read_blocks(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    let b = dtype.block().expect("a block type");
    let mut values = [0.0f32; 256];
    let mut at = start;
    let mut filled = 0;
    while filled < out.len() {
        let (block, inner) = (at / b.elements, at % b.elements);
        fuse_ir::quant::dequantize_block(dtype, &bytes[block * b.bytes..][..b.bytes], &mut values[..b.elements]);
        let take = (b.elements - inner).min(out.len() - filled);
        out[filled..filled + take].copy_from_slice(&values[inner..inner + take]);
        filled += take;
        at += take;
    }
}

#[inline]
fn gather<T: Copy>(v: &[T], start: usize, stride: usize, out: &mut [f32], conv: impl Fn(T) -> f32) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = conv(v[start + i * stride]);
    }
}

/// [`for_each_offset`] by runs: `f(start, len)` for each run of `len` consecutive elements (the last axis where
/// its stride is 1, else single elements), in the same order.
pub(crate) fn for_each_run(shape: &[usize], strides: &[usize], offset: usize, mut f: impl FnMut(usize, usize)) {
    match (shape.split_last(), strides.split_last()) {
        (Some((&len, outer)), Some((1, outer_strides))) => {
            if len > 0 {
                for_each_offset(outer, outer_strides, offset, |at| f(at, len));
            }
        }
        _ => for_each_offset(shape, strides, offset, |at| f(at, 1)),
    }
}

/// Calls `f` with the storage offset of every element of a strided view, in row-major order.
pub(crate) fn for_each_offset(shape: &[usize], strides: &[usize], offset: usize, mut f: impl FnMut(usize)) {
    if shape.contains(&0) {
        return;
    }
    let rank = shape.len();
    let mut index = vec![0usize; rank];
    let mut at = offset;
    loop {
        f(at);
        // Odometer increment from the last axis.
        let mut axis = rank;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            at += strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            at -= strides[axis] * shape[axis];
            index[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs expand to exactly the offsets, in their order: contiguous and transposed layouts, broadcast axes,
    /// one axis, empty extents.
    #[test]
    fn runs_cover_the_offsets_in_order() {
        let cases: [(&[usize], &[usize], usize); 7] = [
            (&[2, 3, 4], &[12, 4, 1], 0),
            (&[1, 9, 5, 4], &[180, 4, 36, 1], 3),
            (&[3, 4], &[1, 3], 0),
            (&[2, 3], &[0, 1], 5),
            (&[6], &[1], 2),
            (&[2, 0, 4], &[0, 4, 1], 0),
            (&[3, 1], &[1, 1], 0),
        ];
        for (shape, strides, offset) in cases {
            let mut want = Vec::new();
            for_each_offset(shape, strides, offset, |at| want.push(at));
            let mut got = Vec::new();
            for_each_run(shape, strides, offset, |at, len| got.extend(at..at + len));
            assert_eq!(got, want, "shape {shape:?} strides {strides:?}");
        }
    }
}
