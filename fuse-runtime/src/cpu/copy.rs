//! `cat` on the CPU: each part's elements, in row-major order, into its slice of every outer row of the
//! result (a copy in the parts' own dtype). `slice_set`: the source's elements written into the
//! destination's storage in place, through the destination's strides. `contiguous` needs no code of its own: it is the identity in
//! a row program, whose one pass reads through strides and writes densely (`rowprog.rs`).

use super::rowprog::CallInfo;
use crate::call::node_error;
use crate::call::Value;
use crate::element::Element;
use crate::host::{for_each_run, CpuData};
use crate::{Error, Result, Tensor};
use fuse_ir::infer::NodeError;
use fuse_ir::view::{check_slice_set_offset, normalize_axis, ViewOp};
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
        q => return Err(Error::internal(info.function, format!("cat of {q} blocks (inference refuses it)"))),
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

/// Writes `slice_set` node `id`'s source into its destination's memory (rows `offset ..` along the axis)
/// and returns the destination, which now holds them.
pub(crate) fn slice_set(info: &CallInfo<'_>, id: NodeId, resolve: &dyn Fn(NodeId) -> Result<Value>) -> Result<Tensor> {
    let g = info.graph;
    let Op::View(ViewOp::SliceSet { axis, .. }) = g.op(id) else {
        return Err(Error::internal(info.function, format!("%{} is not a slice_set", id.0)));
    };
    let args = &g.node(id).args;
    let (Value::Tensor(dest), Value::Tensor(src)) = (resolve(args[0])?, resolve(args[1])?) else {
        return Err(Error::internal(info.function, "slice_set of a scalar"));
    };
    let axis = normalize_axis(axis as i64, dest.shape().len())
        .ok_or_else(|| Error::internal(info.function, format!("%{}: axis {axis} unchecked", id.0)))?;
    let offsets = match resolve(args[2])? {
        Value::Scalar(v) => vec![v as usize],
        // Positions held in a tensor (one, or one for each index of the first axis): inference could not
        // check them against the room left.
        Value::Tensor(t) => t
            .to_vec::<u32>()?
            .into_iter()
            .map(|value| check_slice_set_offset(Some(value as f64), axis, src.shape(), dest.shape()))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|error| node_error(info.function, g, NodeError { node: id, error }))?,
    };
    // The source is read out first (it may share the destination's storage), then written under the lock.
    let write = |dest: &Tensor, src: &Tensor, offset: usize| match dest.dtype() {
        DType::F32 => write_rows::<f32>(dest, src, axis, offset),
        DType::F16 => write_rows::<f16>(dest, src, axis, offset),
        DType::BF16 => write_rows::<bf16>(dest, src, axis, offset),
        DType::U32 => write_rows::<u32>(dest, src, axis, offset),
        q => Err(Error::internal(info.function, format!("slice_set of {q} blocks (inference refuses it)"))),
    };
    match offsets[..] {
        [offset] => write(&dest, &src, offset)?,
        // One position for each index of the first axis (inference checked there are as many).
        _ => {
            for (b, &offset) in offsets.iter().enumerate() {
                write(&dest.first_axis_index(b), &src.first_axis_index(b), offset)?;
            }
        }
    }
    Ok(dest)
}

fn write_rows<T: Element>(dest: &Tensor, src: &Tensor, axis: usize, offset: usize) -> Result<()> {
    let values = src.to_vec::<T>()?;
    // The destination's elements that the source covers: its view narrowed to the written rows.
    let mut shape = dest.shape().to_vec();
    shape[axis] = src.shape()[axis];
    let start = dest.offset() + offset * dest.strides()[axis];
    let strides = dest.strides();
    dest.cpu_storage().write(|data| {
        let all = data.typed_mut::<T>().expect("inference checked that source and destination dtypes agree");
        // Rows along a dense last axis are copied whole (a decode step's new keys: one row a head).
        let mut next = 0;
        for_each_run(&shape, strides, start, |i, len| {
            all[i..i + len].copy_from_slice(&values[next..next + len]);
            next += len;
        });
    });
    Ok(())
}
