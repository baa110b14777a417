//! The model ops in f64, written plainly: the definition the CPU and GPU kernels are compared against.
//! Shapes were checked by `ModelOp::infer_shape`; only values (token ids, key counts) can still be wrong here.

use super::{check_key_count, ModelOp, RopeTable};
use crate::array::Array;
use crate::error::InferError;

/// Computes `op` on `args` into an array of `shape` (the inferred result shape).
pub fn eval(op: ModelOp, args: &[&Array], shape: Vec<usize>) -> Result<Array, InferError> {
    let data = match op {
        ModelOp::Embedding => embedding(args[0], args[1])?,
        ModelOp::Argmax => argmax(args[0]),
        ModelOp::Rope => rope(args[0], args[1], args[2]),
        ModelOp::Cumsum => cumsum(args[0]),
        // One rank's sum is its own part: the reference is a group of one.
        ModelOp::AllReduceSum => args[0].data.clone(),
        ModelOp::ArgSort { ascending } => arg_sort(args[0], ascending),
        ModelOp::ArgTopK => {
            let (n, k) = (args[0].shape.last().copied().unwrap_or(1).max(1), *shape.last().unwrap_or(&0));
            arg_sort(args[0], false).chunks(n).flat_map(|row| row[..k].to_vec()).collect()
        }
        ModelOp::Gather => gather(args[0], args[1])?,
        ModelOp::Unfold { spatial } => {
            let sizes: Vec<Option<f64>> = args.iter().map(|a| a.data.first().copied()).collect();
            let geometry = super::unfold::Unfold::of(spatial, &args[0].shape, &args[1].shape, &sizes)?;
            let count: usize = shape.iter().product();
            (0..count).map(|i| geometry.source(i).map_or(0.0, |j| args[0].data[j])).collect()
        }
        ModelOp::Attention { causal, with_lens } => {
            let key_counts = key_counts(args[0], args[1], with_lens.then(|| args[4]), causal)?;
            attention(args[0], args[1], args[2], args[3].data[0], causal, &key_counts)
        }
    };
    Ok(Array::new(shape, data))
}

fn embedding(ids: &Array, table: &Array) -> Result<Vec<f64>, InferError> {
    let (vocab, hidden) = (table.shape[0], table.shape[1]);
    let mut data = Vec::with_capacity(ids.data.len() * hidden);
    for &id in &ids.data {
        if !(id >= 0.0 && id < vocab as f64 && id.fract() == 0.0) {
            return Err(InferError::IdOutOfRange { id: id as u64, vocab });
        }
        let row = id as usize;
        data.extend_from_slice(&table.data[row * hidden..(row + 1) * hidden]);
    }
    Ok(data)
}

fn argmax(x: &Array) -> Vec<f64> {
    let n = x.shape.last().copied().unwrap_or(1);
    x.data
        .chunks(n)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                let b = row[best];
                if v > b || (v.is_nan() && !b.is_nan()) {
                    best = i;
                }
            }
            best as f64
        })
        .collect()
}

fn cumsum(x: &Array) -> Vec<f64> {
    let n = x.shape.last().copied().unwrap_or(1).max(1);
    let mut data = x.data.clone();
    for row in data.chunks_mut(n) {
        for i in 1..row.len() {
            row[i] += row[i - 1];
        }
    }
    data
}

/// Each row's indices in torch's stable order: equal values by index, NaN above every number.
fn arg_sort(x: &Array, ascending: bool) -> Vec<f64> {
    let n = x.shape.last().copied().unwrap_or(1).max(1);
    let mut data = Vec::with_capacity(x.data.len());
    for row in x.data.chunks(n) {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&i, &j| {
            let by_value = row[i].total_cmp(&row[j]);
            // total_cmp puts -NaN first; every NaN is the largest here, and -0 equals 0.
            let by_value = match (row[i].is_nan(), row[j].is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ if row[i] == row[j] => std::cmp::Ordering::Equal,
                _ => by_value,
            };
            if ascending {
                by_value
            } else {
                by_value.reverse()
            }
        });
        data.extend(order.into_iter().map(|i| i as f64));
    }
    data
}

fn gather(x: &Array, indexes: &Array) -> Result<Vec<f64>, InferError> {
    let n = x.shape.last().copied().unwrap_or(0);
    let m = indexes.shape.last().copied().unwrap_or(1).max(1);
    let mut data = Vec::with_capacity(indexes.data.len());
    for (row, picks) in indexes.data.chunks(m).enumerate() {
        for &index in picks {
            if !(index >= 0.0 && index < n as f64) {
                return Err(InferError::IndexOutOfRange { index: index as u64, size: n });
            }
            data.push(x.data[row * n + index as usize]);
        }
    }
    Ok(data)
}

fn rope(x: &Array, cos: &Array, sin: &Array) -> Vec<f64> {
    let r = x.shape.len();
    let (seq, d) = (x.shape[r - 2], x.shape[r - 1]);
    let half = d / 2;
    let mut data = vec![0.0; x.data.len()];
    if d == 0 {
        return data;
    }
    let table = RopeTable::of(&x.shape, &cos.shape);
    for (row, (src, out)) in x.data.chunks(d).zip(data.chunks_mut(d)).enumerate() {
        let t = table.row(row, seq);
        let c = &cos.data[t * half..(t + 1) * half];
        let s = &sin.data[t * half..(t + 1) * half];
        for i in 0..half {
            out[i] = src[i] * c[i] - src[i + half] * s[i];
            out[i + half] = src[i + half] * c[i] + src[i] * s[i];
        }
    }
    data
}

/// The keys each batch attends over: `lens` checked against k's skv (and, causal, q's sq), or skv for all.
fn key_counts(q: &Array, k: &Array, lens: Option<&Array>, causal: bool) -> Result<Vec<usize>, InferError> {
    let (queries, keys) = (q.shape[2], k.shape[2]);
    let Some(lens) = lens else { return Ok(vec![keys; q.shape[0]]) };
    // Counts come from u32 tensors: whole and non-negative, so the cast keeps them.
    lens.data
        .iter()
        .enumerate()
        .map(|(batch, &len)| check_key_count(batch, len as u64, queries, keys, causal))
        .collect()
}

/// Batch b reads keys 0 .. key_counts[b] of its skv; causal query i sees keys 0 ..= key_counts[b] - sq + i.
fn attention(q: &Array, k: &Array, v: &Array, scale: f64, causal: bool, key_counts: &[usize]) -> Vec<f64> {
    let [q_heads, queries, d] = [q.shape[1], q.shape[2], q.shape[3]];
    let [kv_heads, keys] = [k.shape[1], k.shape[2]];
    let per_kv_head = q_heads / kv_heads;
    let mut data = Vec::with_capacity(q.data.len());
    let row = |a: &Array, index: usize| a.data[index * d..(index + 1) * d].to_vec();
    for (b, &counted) in key_counts.iter().enumerate() {
        for h in 0..q_heads {
            let kv = b * kv_heads + h / per_kv_head;
            for i in 0..queries {
                let query = row(q, (b * q_heads + h) * queries + i);
                let visible = if causal { counted - queries + i + 1 } else { counted };
                let scores: Vec<f64> = (0..visible)
                    .map(|j| row(k, kv * keys + j).iter().zip(&query).map(|(x, y)| x * y).sum::<f64>() * scale)
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                let mut out = vec![0.0; d];
                for (j, w) in weights.iter().enumerate() {
                    for (o, x) in out.iter_mut().zip(row(v, kv * keys + j)) {
                        *o += w / total * x;
                    }
                }
                data.extend(out);
            }
        }
    }
    data
}
