//! `cat` on the CPU: each part's elements, in row-major order, into its slice of every outer row of the
//! result (a copy in the parts' own dtype). `contiguous` needs no code of its own: it is the identity in
//! a row program, whose one pass reads through strides and writes densely (`rowprog.rs`).

use super::rowprog::CallInfo;
use crate::call::Value;
use crate::element::Element;
use crate::host::CpuData;
use crate::{Error, Result, Tensor};
use fuse_ir::view::{normalize_axis, ViewOp};
use fuse_ir::{DType, NodeId, Op};
use half::{bf16, f16};

/// Computes `cat` node `id` from its parts' values.
pub(crate) fn cat(info: &CallInfo<'_>, id: NodeId, resolve: &dyn Fn(NodeId) -> Result<Value>) -> Result<Tensor> {
    let g = info.graph;
    let Op::View(ViewOp::Cat { axis, .. }) = g.op(id) else {
        return Err(Error::internal(info.function, format!("%{} is not a cat", id.0)));
    };
    let shape = info.shapes[id.index()].clone();
    let axis = normalize_axis(axis as i64, shape.len())
        .ok_or_else(|| Error::internal(info.function, format!("%{}: axis {axis} unchecked", id.0)))?;
    let mut parts = Vec::with_capacity(g.node(id).args.len());
    for &a in &g.node(id).args {
        match resolve(a)? {
            Value::Tensor(t) => parts.push(t),
            Value::Scalar(_) => return Err(Error::internal(info.function, "cat of a scalar")),
        }
    }
    let data = match info.dtypes[id.index()].unwrap_or(DType::F32) {
        DType::F32 => join::<f32>(&parts, axis)?,
        DType::F16 => join::<f16>(&parts, axis)?,
        DType::BF16 => join::<bf16>(&parts, axis)?,
        DType::U32 => join::<u32>(&parts, axis)?,
    };
    Ok(Tensor::from_cpu(data, shape))
}

fn join<T: Element>(parts: &[Tensor], axis: usize) -> Result<CpuData> {
    let dense: Vec<Vec<T>> = parts.iter().map(|t| t.to_vec::<T>()).collect::<Result<_>>()?;
    let outer: usize = parts.first().map_or(1, |t| t.shape()[..axis].iter().product());
    let mut out = Vec::with_capacity(dense.iter().map(Vec::len).sum());
    for o in 0..outer {
        for (t, values) in parts.iter().zip(&dense) {
            let chunk: usize = t.shape()[axis..].iter().product();
            out.extend_from_slice(&values[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(CpuData::from_vec(out))
}
