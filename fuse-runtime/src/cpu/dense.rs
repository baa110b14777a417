//! The model ops' operands read densely as f32, and their f32 results stored in the output's dtype.

use super::kernels::sink_of;
use crate::host::CpuData;
use crate::{Result, Tensor};
use fuse_ir::DType;

/// The tensor's elements in row-major order as f32 (a copy: the ops here read every element more than
/// once, and a copy frees the storage's lock for a write that may follow).
pub(super) fn dense_f32(t: &Tensor) -> Result<Vec<f32>> {
    t.to_vec::<f32>()
}

/// f32 results stored in `dtype` (rounded for the half types).
pub(super) fn from_f32(dtype: DType, values: Vec<f32>) -> CpuData {
    if dtype == DType::F32 {
        return CpuData::F32(values);
    }
    let mut data = CpuData::zeros(dtype, values.len());
    sink_of(&mut data).write(0, &values);
    data
}
