//! Iteration domains: broadcasting values onto a domain, and merging axes that every operand walks through
//! as one (so a dense [1024, 4096] pointwise group runs as one long row, not 1024 short ones).

/// Strides of a value (`shape`, `strides` in elements) broadcast onto `domain`, right-aligned: 0 on axes
/// the value lacks or has with size 1.
pub(crate) fn broadcast_strides(shape: &[usize], strides: &[usize], domain: &[usize]) -> Vec<usize> {
    let pad = domain.len() - shape.len();
    (0..domain.len()).map(|axis| if axis < pad || shape[axis - pad] == 1 { 0 } else { strides[axis - pad] }).collect()
}

/// Drops axes of size 1 and merges neighbouring axes that every operand (given by its strides over `dims`)
/// steps through as one axis. With `keep_last` the last axis stays as it is (reductions run along it).
/// Returns the new dims (at least one axis) and each operand's strides over them.
pub(crate) fn coalesce(dims: &[usize], operands: &[Vec<usize>], keep_last: bool) -> (Vec<usize>, Vec<Vec<usize>>) {
    let rank = dims.len();
    let mut out_dims: Vec<usize> = Vec::with_capacity(rank);
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::with_capacity(rank); operands.len()];
    for axis in 0..rank {
        let pinned = keep_last && axis + 1 == rank;
        if dims[axis] == 1 && !pinned {
            continue;
        }
        let mergeable = !pinned
            && !out_dims.is_empty()
            && operands.iter().zip(&out_strides).all(|(s, out)| out.last() == Some(&(s[axis] * dims[axis])));
        if mergeable {
            if let Some(last) = out_dims.last_mut() {
                *last *= dims[axis];
            }
            for (s, out) in operands.iter().zip(out_strides.iter_mut()) {
                if let Some(last) = out.last_mut() {
                    *last = s[axis];
                }
            }
        } else {
            out_dims.push(dims[axis]);
            for (s, out) in operands.iter().zip(out_strides.iter_mut()) {
                out.push(s[axis]);
            }
        }
    }
    if out_dims.is_empty() {
        out_dims.push(1);
        out_strides.iter_mut().for_each(|s| s.push(0));
    }
    (out_dims, out_strides)
}

/// Decomposes a row index over `prefix` dims and returns the element offset under `strides`.
#[inline]
pub(crate) fn row_offset(mut row: usize, prefix: &[usize], strides: &[usize]) -> usize {
    let mut offset = 0;
    for (&d, &s) in prefix.iter().zip(strides).rev() {
        offset += (row % d) * s;
        row /= d;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_operands_merge_into_one_axis() {
        let (dims, strides) = coalesce(&[3, 5, 7], &[vec![35, 7, 1], vec![35, 7, 1]], false);
        assert_eq!(dims, vec![105]);
        assert_eq!(strides, vec![vec![1], vec![1]]);
    }

    #[test]
    fn a_broadcast_column_keeps_the_last_axis_apart() {
        // x [3, 5, 7] with a per-row scale [3, 5, 1]: rows merge, the last axis does not.
        let (dims, strides) = coalesce(&[3, 5, 7], &[vec![35, 7, 1], vec![5, 1, 0]], false);
        assert_eq!(dims, vec![15, 7]);
        assert_eq!(strides, vec![vec![7, 1], vec![1, 0]]);
    }

    #[test]
    fn pinned_last_axis_survives_size_one() {
        let (dims, _) = coalesce(&[4, 1], &[vec![1, 1]], true);
        assert_eq!(dims, vec![4, 1]);
        let (dims, _) = coalesce(&[], &[vec![]], false);
        assert_eq!(dims, vec![1]);
    }

    #[test]
    fn row_offsets_follow_strides() {
        // A transposed [2, 3] view of a [3, 2] tensor: strides [1, 2].
        assert_eq!(row_offset(4, &[2, 3], &[1, 2]), 1 + 2);
        assert_eq!(broadcast_strides(&[3, 1], &[1, 1], &[2, 3, 4]), vec![0, 1, 0]);
    }
}
