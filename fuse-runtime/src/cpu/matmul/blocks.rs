//! Products with block-quantized weights read as stored (a GGUF file's `[n, k]` rows of whole blocks): the
//! left operand's rows handed to `cpu::quant` in place where they lie densely, else gathered once.

use super::{gemm_into, GemmGroup, LeftOperand, MatRef};
use crate::host::CpuSlice;
use crate::layout::row_offset;
use crate::{Error, Result, Tensor};
use std::ops::Range;

impl GemmGroup {
    /// `product = A[rows] x weights[j]` for block-quantized weights read as stored: `w.t()` of a `[n, k]` matrix
    /// of whole blocks (a file's layout), one matrix for every batch. Other layouts of blocks are refused (they
    /// would need the weights decoded into memory).
    pub(super) fn multiply_blocks(
        &self,
        function: &str,
        rows: &Range<usize>,
        a_buffer: &[f32],
        j: usize,
        product: &mut [f32],
    ) -> Result<()> {
        let (k, n, w) = (self.k, self.n, &self.weights[j]);
        let (dtype, ws, wr) = (w.dtype(), w.strides(), w.rank());
        let block = dtype.block().expect("a block type");
        let e = block.elements;
        let rows_of_blocks = ws[wr - 2] == 1 && (ws[wr - 1] == k || n == 1) && w.offset() % e == 0;
        // `x.matmul(&w)` of a [k, n] matrix (or a column range of one) whose rows are blocks along n.
        let columns_of_blocks = ws[wr - 1] == 1 && ws[wr - 2] % e == 0 && w.offset() % e == 0 && n % e == 0;
        if !(rows_of_blocks || columns_of_blocks) || self.weight_batch_strides[j].iter().any(|&s| s != 0) {
            return Err(Error::Unsupported {
                function: function.into(),
                op: "matmul",
                reason: format!(
                    "{dtype} weights are read as `x.matmul(&w.t())` of a [n, k] matrix of whole blocks or as \
                     `x.matmul(&w)` of a [k, n] one, one for every batch; this one has shape {:?} and strides \
                     {ws:?}: dequantize it first with .to_dtype(..)",
                    w.shape()
                ),
            });
        }
        let count = rows.len();
        let left = self.direct_left_data();
        let gathered: Vec<f32>;
        let x: &[f32] = match (&self.left, left.as_deref()) {
            (LeftOperand::Direct(t), Some(data)) => match self.left_rows_in_place(t, data, rows) {
                Some(x) => x,
                None => {
                    gathered = self.gather_left_rows(t, data, rows);
                    &gathered
                }
            },
            _ => a_buffer,
        };
        let read = w.cpu_storage().read();
        let CpuSlice::Blocks(_, bytes) = read.slice() else { unreachable!("a block dtype's storage holds blocks") };
        if !rows_of_blocks {
            let row_stride = if k == 1 { n } else { ws[wr - 2] };
            return multiply_column_blocks(function, dtype, bytes, w.offset(), row_stride, x, count, k, n, product);
        }
        let first = w.offset() / block.elements * block.bytes;
        let len = dtype.storage_bytes(n * k).expect("whole blocks");
        crate::cpu::quant::matmul_quantized(dtype, x, count, k, &bytes[first..first + len], n, product)
            .map_err(|reason| Error::internal(function, reason))
    }

    /// Where a direct left operand's rows of `rows` lie one after another, dense, in its storage (one row of
    /// decode always does): that slice, read in place.
    fn left_rows_in_place<'d>(&self, t: &Tensor, data: &'d [f32], rows: &Range<usize>) -> Option<&'d [f32]> {
        let (k, s) = (self.k, t.strides());
        if s[t.rank() - 1] != 1 && k > 1 {
            return None;
        }
        let first = self.left_row_start(t, rows.start);
        let dense = rows.clone().enumerate().all(|(i, r)| self.left_row_start(t, r) == first + i * k);
        dense.then(|| data.get(first..first + rows.len() * k)).flatten()
    }

    /// A direct left operand's rows of `rows` copied into one dense buffer.
    fn gather_left_rows(&self, t: &Tensor, data: &[f32], rows: &Range<usize>) -> Vec<f32> {
        let (k, cs) = (self.k, t.strides()[t.rank() - 1]);
        let mut x = vec![0.0f32; rows.len() * k];
        for (row, r) in x.chunks_exact_mut(k.max(1)).zip(rows.clone()) {
            let start = self.left_row_start(t, r);
            for (kk, v) in row.iter_mut().enumerate() {
                *v = data[start + kk * cs];
            }
        }
        x
    }

    /// Where row `r` (of all batches' rows) of a direct left operand starts in its storage.
    fn left_row_start(&self, t: &Tensor, r: usize) -> usize {
        let rs = t.strides()[t.rank() - 2];
        t.offset() + row_offset(r / self.m, &self.batch_dims, &self.left_batch_strides) + (r % self.m) * rs
    }
}

/// Columns of the product a task (a multiple of every block's values).
const PANEL_COLUMNS: usize = 256;
/// Rows of the weights a panel decoded at once: 256 x 256 f32 (256 KB), within a core's L2.
const PANEL_ROWS: usize = 256;

/// `product (count x n) = x (count x k, dense) x W` for W a [k, n] matrix of blocks along its rows (row r's
/// values from element `offset + r * row_stride` of `bytes`): tasks of [`PANEL_COLUMNS`] columns on the spin
/// pool, each decoding [`PANEL_ROWS`] x its columns at a time into f32 and accumulating their product with
/// `gemm`. The decoded panels are the tasks' own scratch, never the whole matrix.
#[allow(clippy::too_many_arguments)]
fn multiply_column_blocks(
    function: &str,
    dtype: fuse_ir::DType,
    bytes: &[u8],
    offset: usize,
    row_stride: usize,
    x: &[f32],
    count: usize,
    k: usize,
    n: usize,
    product: &mut [f32],
) -> Result<()> {
    let block = dtype.block().expect("a block type");
    let out = crate::cpu::quant::Out::new(product);
    let failed = std::sync::Mutex::new(None);
    crate::cpu::spin_pool::for_each_task(n.div_ceil(PANEL_COLUMNS), &|p| {
        let (c0, width) = (p * PANEL_COLUMNS, PANEL_COLUMNS.min(n - p * PANEL_COLUMNS));
        let (mut panel, mut acc) = (vec![0.0f32; PANEL_ROWS * width], vec![0.0f32; count * width]);
        for r0 in (0..k).step_by(PANEL_ROWS) {
            let rows = PANEL_ROWS.min(k - r0);
            for (r, values) in panel.chunks_exact_mut(width).take(rows).enumerate() {
                let start = (offset + (r0 + r) * row_stride + c0) / block.elements * block.bytes;
                let blocks = &bytes[start..start + width / block.elements * block.bytes];
                fuse_ir::quant::dequantize(dtype, blocks, values).expect("whole blocks");
            }
            let a = MatRef { data: x, offset: r0, row_stride: k, col_stride: 1 };
            let b = MatRef { data: &panel, offset: 0, row_stride: width, col_stride: 1 };
            if let Err(e) = gemm_into(function, &mut acc, r0 > 0, count, width, rows, a, b, false) {
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return;
            }
        }
        for (i, row) in acc.chunks_exact(width).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                // Safety: (i, c0 + c) < (count, n), and each column is one task's.
                unsafe { out.set(i * n + c0 + c, v) };
            }
        }
    });
    failed.into_inner().unwrap_or_else(|p| p.into_inner()).map_or(Ok(()), Err)
}
