//! `arg_sort_last_dim`, `arg_topk` and `gather` on the CPU: rows sorted (a top-k selected first) under
//! torch's order with ties by index, a total order, so that the result is the GPU's, and elements picked by
//! u32 indexes, checked before anything is copied.

use super::dense::{dense_f32, from_f32};
use crate::host::CpuData;
use crate::{Error, Result, Tensor};
use fuse_ir::infer::InferError;
use fuse_ir::DType;
use std::cmp::Ordering;

/// torch's order of two columns of `row`: by value (ascending or not), a NaN above every number, equal
/// values by index (so the order is total: an unstable sort or a selection gives the stable sort's result).
fn column_order(row: &[f32], ascending: bool) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&i, &j| {
        let (a, b) = (row[i as usize], row[j as usize]);
        let by_value = match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        };
        (if ascending { by_value } else { by_value.reverse() }).then(i.cmp(&j))
    }
}

/// Each row's indices ordered by value: ascending or not, equal values by index, a NaN above every number.
pub(super) fn arg_sort(x: &Tensor, ascending: bool) -> Result<Vec<u32>> {
    let n = x.shape().last().copied().unwrap_or(1).max(1);
    let data = dense_f32(x)?;
    let mut out = Vec::with_capacity(data.len());
    for row in data.chunks(n) {
        let mut order: Vec<u32> = (0..row.len() as u32).collect();
        order.sort_unstable_by(column_order(row, ascending));
        out.extend(order);
    }
    Ok(out)
}

/// The first `k` of each row's descending order: selected, then only those k sorted.
pub(super) fn arg_topk(x: &Tensor, k: usize) -> Result<Vec<u32>> {
    let n = x.shape().last().copied().unwrap_or(1).max(1);
    let data = dense_f32(x)?;
    let mut out = Vec::with_capacity(data.len() / n * k);
    for row in data.chunks(n) {
        let mut order: Vec<u32> = (0..row.len() as u32).collect();
        let before = column_order(row, false);
        if k > 0 && k < order.len() {
            order.select_nth_unstable_by(k - 1, &before);
        }
        order.truncate(k);
        order.sort_unstable_by(&before);
        out.extend(order);
    }
    Ok(out)
}

/// `out[.., j] = x[.., indexes[.., j]]` in x's dtype (`dtype`); an index past x's last axis is the error
/// `fail` makes, found before anything is copied.
pub(super) fn gather(
    x: &Tensor,
    indexes: &Tensor,
    dtype: DType,
    fail: impl Fn(InferError) -> Error,
) -> Result<CpuData> {
    let n = x.shape().last().copied().unwrap_or(0);
    let m = indexes.shape().last().copied().unwrap_or(1);
    let indexes = indexes.to_vec::<u32>()?;
    if let Some(&index) = indexes.iter().find(|&&i| i as usize >= n) {
        return Err(fail(InferError::IndexOutOfRange { index: index as u64, size: n }));
    }
    // Element k of the output: row k / m of x, at the column its index names.
    let source = |k: usize| (k / m) * n + indexes[k] as usize;
    Ok(if dtype == DType::U32 {
        let v = x.to_vec::<u32>()?;
        CpuData::U32((0..indexes.len()).map(|k| v[source(k)]).collect())
    } else {
        let v = dense_f32(x)?;
        from_f32(dtype, (0..indexes.len()).map(|k| v[source(k)]).collect())
    })
}
