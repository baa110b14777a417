//! Model groups on the CPU: `embedding`, `argmax`, `cumsum`, `rope` and `all_reduce_sum` (through
//! `parallel.rs`) here, `arg_sort_last_dim` and
//! `gather` in `sort.rs`, `unfold` in `unfold.rs`, `attention` in `attention.rs` (the key
//! counts of `attention_len` are read and checked here). Each group is one model op; it reads its operands
//! densely in f32 (ids and key counts as u32, embedding rows in their own dtype), computes with rayon when
//! the work is large enough to pay for it, and writes one output.

use super::attention::attention;
use super::dense::{dense_f32, from_f32};
use super::rowprog::CallInfo;
use super::PARALLEL_MIN_ELEMENTS;
use crate::call::{node_error, Value};
use crate::host::{CpuData, CpuSlice};
use crate::{Error, Result, Tensor};
use fuse_ir::infer::{InferError, NodeError};
use fuse_ir::model_op::{check_key_count, RopeTable};
use fuse_ir::{DType, ModelOp, NodeId, Op};

/// Computes model node `id` (the only node of its group), reading its operands through `resolve`.
pub(super) fn run_model(info: &CallInfo<'_>, resolve: &dyn Fn(NodeId) -> Result<Value>, id: NodeId) -> Result<Tensor> {
    let (g, function) = (info.graph, info.function);
    let Op::Model(op) = g.op(id) else {
        return Err(Error::internal(function, format!("%{} in a model group is no model op", id.0)));
    };
    let args = &g.node(id).args;
    let tensor = |i: usize| match resolve(args[i])? {
        Value::Tensor(t) => Ok(t),
        Value::Scalar(_) => Err(Error::internal(function, format!("a scalar as operand {i} of {}", op.name()))),
    };
    let dtype = info.dtypes[id.index()].unwrap_or(DType::F32);
    let data = match op {
        ModelOp::Embedding => {
            let (ids, table) = (tensor(0)?.to_vec::<u32>()?, tensor(1)?);
            // A table with gaps (a transposed view) is copied densely once; a dense one is read in place.
            let table = if table.is_contiguous() { table } else { table.dense_copy()? };
            embedding(&ids, &table).map_err(|error| node_error(function, g, NodeError { node: id, error }))?
        }
        ModelOp::Argmax => CpuData::U32(argmax(&tensor(0)?)?),
        ModelOp::ArgSort { ascending } => CpuData::U32(super::sort::arg_sort(&tensor(0)?, ascending)?),
        ModelOp::ArgTopK => {
            let k = info.shapes[id.index()].last().copied().unwrap_or(0);
            CpuData::U32(super::sort::arg_topk(&tensor(0)?, k)?)
        }
        ModelOp::Unfold { spatial } => {
            let sizes = (0..args.len())
                .map(|i| match resolve(args[i])? {
                    Value::Scalar(v) => Ok(Some(v)),
                    Value::Tensor(_) => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?;
            let x = tensor(0)?;
            let geometry = fuse_ir::model_op::unfold::Unfold::of(spatial, x.shape(), tensor(1)?.shape(), &sizes)
                .map_err(|error| node_error(function, g, NodeError { node: id, error }))?;
            super::unfold::unfold(&x, &geometry, dtype)?
        }
        ModelOp::Gather => super::sort::gather(&tensor(0)?, &tensor(1)?, dtype, |error| {
            node_error(function, g, NodeError { node: id, error })
        })?,
        ModelOp::AllReduceSum => {
            let x = tensor(0)?;
            from_f32(dtype, crate::parallel::all_reduce_sum_f32(dense_f32(&x)?, x.shape(), dtype)?)
        }
        ModelOp::Cumsum => {
            let x = tensor(0)?;
            from_f32(dtype, cumsum(&dense_f32(&x)?, x.shape().last().copied().unwrap_or(1)))
        }
        ModelOp::Rope => {
            let (x, cos, sin) = (tensor(0)?, tensor(1)?, tensor(2)?);
            let table = RopeTable::of(x.shape(), cos.shape());
            from_f32(dtype, rope(&dense_f32(&x)?, &dense_f32(&cos)?, &dense_f32(&sin)?, x.shape(), table))
        }
        ModelOp::Attention { causal, with_lens } => {
            let scale = match resolve(args[3])? {
                Value::Scalar(v) => v as f32,
                Value::Tensor(t) => {
                    t.to_vec::<f32>()?.first().copied().ok_or_else(|| Error::internal(function, "an empty scale"))?
                }
            };
            let (q, k, v) = (tensor(0)?, tensor(1)?, tensor(2)?);
            let (batch, queries, keys) = (q.shape()[0], q.shape()[2], k.shape()[2]);
            let key_counts = if with_lens {
                let lens = tensor(4)?.to_vec::<u32>()?;
                let check = |(b, &len): (usize, &u32)| check_key_count(b, len as u64, queries, keys, causal);
                lens.iter()
                    .enumerate()
                    .map(check)
                    .collect::<std::result::Result<Vec<usize>, InferError>>()
                    .map_err(|error| node_error(function, g, NodeError { node: id, error }))?
            } else {
                vec![keys; batch]
            };
            let q_data = dense_f32(&q)?;
            let out = match (dense_f32_in_place(&k), dense_f32_in_place(&v)) {
                // A dense f32 cache is read where it lies (a decode step would otherwise copy every cached
                // key and value of the layer); attention reads only the first key_counts[b] keys of it.
                (Some(k_data), Some(v_data)) => {
                    attention(&q_data, &k_data, &v_data, q.shape(), k.shape(), &key_counts, scale, causal)
                }
                _ => {
                    // Only the keys some batch counts are copied: the unused tail of a cache is never read.
                    let read = key_counts.iter().copied().max().unwrap_or(0);
                    let (k, v) = (first_keys(&k, read), first_keys(&v, read));
                    let (k_data, v_data) = (dense_f32(&k)?, dense_f32(&v)?);
                    attention(&q_data, &k_data, &v_data, q.shape(), k.shape(), &key_counts, scale, causal)
                }
            };
            from_f32(dtype, out)
        }
    };
    Ok(Tensor::from_cpu(data, info.shapes[id.index()].clone()))
}

/// The elements of a contiguous f32 tensor that starts its storage, borrowed in place (a read lock on the
/// storage while it lives); `None` for any other tensor.
fn dense_f32_in_place(t: &Tensor) -> Option<crate::host::F32Read<'_>> {
    if t.dtype() != DType::F32 || !t.is_contiguous() || t.offset() != 0 {
        return None;
    }
    let data = t.cpu_storage().f32_data();
    (data.len() == t.numel()).then_some(data)
}

/// The view of keys 0 .. `n` of k or v [b, h, skv, d] (`n` <= skv).
fn first_keys(t: &Tensor, n: usize) -> Tensor {
    let mut layout = t.layout();
    layout.shape[2] = n;
    t.with_layout(layout)
}

/// The rows of a dense `table` picked by `ids`, copied in the table's own dtype (no rounding). An id out of
/// range is the error, found before anything is copied.
fn embedding(ids: &[u32], table: &Tensor) -> std::result::Result<CpuData, InferError> {
    let (vocab, hidden) = (table.shape()[0], table.shape()[1]);
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(InferError::IdOutOfRange { id: id as u64, vocab });
    }
    let (guard, start) = (table.cpu_storage().read(), table.offset());
    Ok(match guard.slice() {
        CpuSlice::F32(v) => CpuData::F32(gather_rows(&v[start..], ids, hidden)),
        CpuSlice::F16(v) => CpuData::F16(gather_rows(&v[start..], ids, hidden)),
        CpuSlice::BF16(v) => CpuData::BF16(gather_rows(&v[start..], ids, hidden)),
        CpuSlice::U32(v) => CpuData::U32(gather_rows(&v[start..], ids, hidden)),
        // A block-quantized table's rows, dequantized (embedding of blocks gives f32).
        blocks @ CpuSlice::Blocks(..) => {
            let mut out = vec![0.0f32; ids.len() * hidden];
            for (row, &id) in out.chunks_mut(hidden.max(1)).zip(ids) {
                blocks.read_f32(start + id as usize * hidden, 1, row);
            }
            CpuData::F32(out)
        }
    })
}

fn gather_rows<T: Copy + Default + Send + Sync>(table: &[T], ids: &[u32], hidden: usize) -> Vec<T> {
    let mut out = vec![T::default(); ids.len() * hidden];
    if hidden == 0 {
        return out;
    }
    let copy = |(row, &id): (&mut [T], &u32)| row.copy_from_slice(&table[id as usize * hidden..][..hidden]);
    if out.len() >= PARALLEL_MIN_ELEMENTS {
        super::spin_pool::for_each_chunk_mut(&mut out, hidden, &|i, row| copy((row, &ids[i])));
    } else {
        out.chunks_mut(hidden).zip(ids).for_each(copy);
    }
    out
}

/// Running sums along rows of `n`, in f32 in order (as the GPU sums them).
fn cumsum(x: &[f32], n: usize) -> Vec<f32> {
    let mut out = x.to_vec();
    for row in out.chunks_mut(n.max(1)) {
        for i in 1..row.len() {
            row[i] += row[i - 1];
        }
    }
    out
}

/// The index of each row's largest value: ties give the first, a NaN counts as the largest (as torch).
fn argmax(x: &Tensor) -> Result<Vec<u32>> {
    let n = x.shape().last().copied().unwrap_or(1);
    let data = dense_f32(x)?;
    let row_argmax = |row: &[f32]| {
        let mut best = 0;
        for (i, &v) in row.iter().enumerate() {
            if v > row[best] || (v.is_nan() && !row[best].is_nan()) {
                best = i;
            }
        }
        best as u32
    };
    Ok(if data.len() >= PARALLEL_MIN_ELEMENTS {
        let mut best = vec![0u32; data.len() / n.max(1)];
        super::spin_pool::for_each_chunk_mut(&mut best, 1, &|i, b| b[0] = row_argmax(&data[i * n..(i + 1) * n]));
        best
    } else {
        data.chunks(n).map(row_argmax).collect()
    })
}

/// Rotary embedding in the half-split layout, rows of `x` [.., seq, d] against cos/sin [seq, d/2] (or
/// [b, seq, d/2]: `table` says which row a row of x reads).
fn rope(x: &[f32], cos: &[f32], sin: &[f32], shape: &[usize], table: RopeTable) -> Vec<f32> {
    let r = shape.len();
    let (seq, d) = (shape[r - 2], shape[r - 1]);
    let half = d / 2;
    // Every element is written below (inference requires d even); a kept vector (`recycle.rs`).
    let mut out = crate::recycle::for_overwrite_f32(x.len());
    if d == 0 {
        return out;
    }
    let rotate = |(row, dst): (usize, &mut [f32])| {
        let src = &x[row * d..(row + 1) * d];
        let t = table.row(row, seq);
        let (c, s) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        let (lo, hi) = dst.split_at_mut(half);
        for i in 0..half {
            lo[i] = src[i] * c[i] - src[i + half] * s[i];
            hi[i] = src[i + half] * c[i] + src[i] * s[i];
        }
    };
    if out.len() >= PARALLEL_MIN_ELEMENTS {
        super::spin_pool::for_each_chunk_mut(&mut out, d, &|row, dst| rotate((row, dst)));
    } else {
        out.chunks_mut(d).enumerate().for_each(rotate);
    }
    out
}
