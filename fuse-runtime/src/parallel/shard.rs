//! A rank's shards of the weights: equal slices along an axis (column- and row-parallel products), and the
//! slices of each part of a stacked weight (q|k|v in one matrix); block-quantized weights kept as stored.

use super::Rank;
use crate::{Error, Result, Tensor};

impl Rank {
    /// This rank's part of `w` along `axis`: the `index()`-th of `world()` equal slices. A slice that is
    /// already dense (rows of a row-major matrix) is a view of `w`, no copy (moved to another device, only the
    /// slice travels); any other is a dense copy. Block-quantized weights keep their blocks as stored; cut
    /// along their last axis, each part must hold whole blocks. An error names the shape when the axis does
    /// not divide by the group's size, cuts a block, or does not exist.
    pub fn shard(&self, w: &Tensor, axis: usize) -> Result<Tensor> {
        let shape = w.shape();
        let Some(&n) = shape.get(axis) else {
            return Err(Error::InvalidArgument {
                op: "Rank::shard",
                reason: format!("axis {axis} of a tensor of shape {shape:?}"),
            });
        };
        if n % self.world != 0 {
            return Err(Error::InvalidArgument {
                op: "Rank::shard",
                reason: format!(
                    "axis {axis} of shape {shape:?} ({n}) does not divide into {} equal parts, one a rank",
                    self.world
                ),
            });
        }
        let part = n / self.world;
        // Blocks cut along their rows' axis are copied block by block (`contiguous` reads no blocks); along
        // any other they are whole rows, a view that is already dense.
        if w.dtype().block().is_some() && axis + 1 == shape.len() {
            return w.block_columns(self.index * part, part);
        }
        w.narrow(axis, self.index * part, part)?.contiguous()
    }

    /// A column-parallel product's weight in the `[out, in]` layout checkpoints store (`x.matmul(&w.t())`):
    /// this rank's rows of it, so its product is this rank's slice of the output's columns (gate, up, and
    /// the query, key and value projections, whose heads then split with them).
    pub fn column_parallel(&self, w: &Tensor) -> Result<Tensor> {
        self.shard(w, 0)
    }

    /// A row-parallel product's weight in the `[out, in]` layout: this rank's columns of it (the inputs the
    /// column-parallel product before it left on this rank), so its product is this rank's part of every
    /// output, summed over the ranks by `all_reduce_sum` (down, and the attention's output projection).
    pub fn row_parallel(&self, w: &Tensor) -> Result<Tensor> {
        self.shard(w, w.shape().len().max(1) - 1)
    }
}

impl Rank {
    /// A weight made of `parts` stacked along `axis` (their sizes along it, summing to its length: the q, k
    /// and v projections in one matrix, or their biases), cut so that this rank holds its slice of each part,
    /// in the parts' order: what one rank's heads need of a stacked q|k|v. Each part must divide by the
    /// group's size; block-quantized weights stack along their rows (axis 0) only, their blocks copied as
    /// stored. An error names the shape and the parts otherwise.
    pub fn shard_stacked(&self, w: &Tensor, axis: usize, parts: &[usize]) -> Result<Tensor> {
        let shape = w.shape();
        let invalid = |reason: String| Err(Error::InvalidArgument { op: "Rank::shard_stacked", reason });
        let Some(&n) = shape.get(axis) else {
            return invalid(format!("axis {axis} of a tensor of shape {shape:?}"));
        };
        if parts.iter().sum::<usize>() != n || parts.iter().any(|p| p % self.world != 0) {
            return invalid(format!(
                "parts {parts:?} along axis {axis} of shape {shape:?}: they must add up to {n} and each divide into \
                 {} equal slices, one a rank",
                self.world
            ));
        }
        let slices: Vec<(usize, usize)> = parts
            .iter()
            .scan(0, |start, &p| {
                let slice = (*start + self.index * p / self.world, p / self.world);
                *start += p;
                Some(slice)
            })
            .collect();
        if w.dtype().block().is_some() {
            if axis != 0 || shape.len() != 2 {
                return invalid(format!("{} blocks of shape {shape:?} stack along the rows (axis 0) only", w.dtype()));
            }
            return w.block_rows(&slices);
        }
        let pieces = slices.iter().map(|&(start, len)| w.narrow(axis, start, len)).collect::<Result<Vec<_>>>()?;
        crate::cat(&pieces.iter().collect::<Vec<_>>(), axis)?.contiguous()
    }
}
