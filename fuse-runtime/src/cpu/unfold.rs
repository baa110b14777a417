//! `unfold` on the CPU: a convolution's columns (fuse-ir's `model_op::unfold`), each element the x element
//! its receptive field puts there or 0 in the padding, in x's dtype (values copied, not rounded).

use super::dense::{dense_f32, from_f32};
use super::PARALLEL_MIN_ELEMENTS;
use crate::host::CpuData;
use crate::{Result, Tensor};
use fuse_ir::model_op::unfold::Unfold;
use fuse_ir::DType;

pub(super) fn unfold(x: &Tensor, geometry: &Unfold, dtype: DType) -> Result<CpuData> {
    let data = dense_f32(x)?;
    let count: usize = geometry.shape().iter().product();
    let fill = |start: usize, out: &mut [f32]| {
        for (k, o) in out.iter_mut().enumerate() {
            *o = geometry.source(start + k).map_or(0.0, |j| data[j]);
        }
    };
    let mut out = vec![0.0f32; count];
    let row = geometry.columns().max(1);
    if count >= PARALLEL_MIN_ELEMENTS {
        super::spin_pool::for_each_chunk_mut(&mut out, row, &|i, chunk| fill(i * row, chunk));
    } else {
        fill(0, &mut out);
    }
    Ok(from_f32(dtype, out))
}
