//! Host memory of a tensor: one typed vector, plus an f32 copy made on first need for the GEMM (which
//! runs in f32), kept so that weights are converted once across calls rather than on every call.

use crate::element::Element;
use fuse_ir::DType;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::any::Any;
use std::sync::OnceLock;

pub(crate) enum CpuData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    U32(Vec<u32>),
}

pub(crate) struct CpuStorage {
    data: CpuData,
    f32_shadow: OnceLock<Vec<f32>>,
}

/// A borrowed typed slice: what kernels read.
#[derive(Clone, Copy)]
pub(crate) enum CpuSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    U32(&'a [u32]),
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

    /// A zero-filled vector of `len` elements of `dtype`.
    pub(crate) fn zeros(dtype: DType, len: usize) -> CpuData {
        match dtype {
            DType::F32 => CpuData::F32(vec![0.0; len]),
            DType::F16 => CpuData::F16(vec![f16::ZERO; len]),
            DType::BF16 => CpuData::BF16(vec![bf16::ZERO; len]),
            DType::U32 => CpuData::U32(vec![0; len]),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            CpuData::F32(_) => DType::F32,
            CpuData::F16(_) => DType::F16,
            CpuData::BF16(_) => DType::BF16,
            CpuData::U32(_) => DType::U32,
        }
    }

    pub(crate) fn as_slice(&self) -> CpuSlice<'_> {
        match self {
            CpuData::F32(v) => CpuSlice::F32(v),
            CpuData::F16(v) => CpuSlice::F16(v),
            CpuData::BF16(v) => CpuSlice::BF16(v),
            CpuData::U32(v) => CpuSlice::U32(v),
        }
    }
}

impl CpuStorage {
    pub(crate) fn new(data: CpuData) -> CpuStorage {
        CpuStorage { data, f32_shadow: OnceLock::new() }
    }

    pub(crate) fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub(crate) fn slice(&self) -> CpuSlice<'_> {
        self.data.as_slice()
    }

    /// The storage as f32, same layout: the data itself for f32, else a converted copy made once.
    pub(crate) fn f32_data(&self) -> &[f32] {
        match &self.data {
            CpuData::F32(v) => v,
            CpuData::F16(v) => self.f32_shadow.get_or_init(|| v.as_slice().to_f32_vec()),
            CpuData::BF16(v) => self.f32_shadow.get_or_init(|| v.as_slice().to_f32_vec()),
            CpuData::U32(v) => self.f32_shadow.get_or_init(|| v.iter().map(|&id| id as f32).collect()),
        }
    }

    /// The whole vector as `T` when that is its type (no conversion).
    pub(crate) fn typed<T: Element>(&self) -> Option<&[T]> {
        let any: &dyn Any = match &self.data {
            CpuData::F32(v) => v,
            CpuData::F16(v) => v,
            CpuData::BF16(v) => v,
            CpuData::U32(v) => v,
        };
        any.downcast_ref::<Vec<T>>().map(|v| v.as_slice())
    }
}

impl CpuSlice<'_> {
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
        }
    }
}

#[inline]
fn gather<T: Copy>(v: &[T], start: usize, stride: usize, out: &mut [f32], conv: impl Fn(T) -> f32) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = conv(v[start + i * stride]);
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
