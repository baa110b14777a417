//! Gemm and DualGemm groups: per block of rows, a prologue row program produces the left operand A, the
//! `gemm` crate multiplies it by each weight (read through its strides: a `.t()` weight is never copied)
//! into f32 product buffers, and an epilogue row program turns the products into the group's outputs.
//! Blocks of rows run in parallel for large M; for small M one block runs and the GEMM itself is parallel.

use super::kernels::Sink;
use super::kernels::{allocate_for_overwrite, sink_of};
use super::rowprog::{compile, CallInfo, Compiled, RowProgram, RowSpec};
use super::rowrun::BlockInputs;
use super::Outcome;
use crate::call::operand_name;
use crate::call::Value;
use crate::host::F32Read;
use crate::layout::{broadcast_strides, coalesce, row_offset};
use crate::{Error, Result, Tensor};
use fuse_ir::{DType, Group, NodeId};
use gemm_common::Parallelism;
use std::ops::Range;

mod blocks;

/// Up to this many rows run as one block with a multi-threaded GEMM (decode-sized M).
const SINGLE_BLOCK_ROWS: usize = 64;
const MIN_BLOCK_ROWS: usize = 16;
const MAX_BLOCK_ROWS: usize = 128;
/// The most rows of a block with block-quantized weights (products of 256 x n f32 at a time; each block
/// decodes the weights once).
const QUANTIZED_BLOCK_ROWS: usize = 256;

/// Where the left operand's rows come from.
enum LeftOperand {
    /// Computed (or converted to f32) by a row program into a per-block buffer.
    Program(RowProgram),
    /// An f32 tensor read in place through its strides.
    Direct(Tensor),
}

struct GemmGroup {
    left: LeftOperand,
    /// Outputs of the prologue (group outputs among the prologue nodes); sink i+1 of its program.
    prologue_outputs: Vec<NodeId>,
    weights: Vec<Tensor>,
    /// Which matmuls' products are group outputs (written in their dtype).
    product_outputs: Vec<(usize, NodeId)>,
    epilogue: RowProgram,
    epilogue_outputs: Vec<NodeId>,
    /// Whether one GEMM call may cover rows of several batches: a 2-D weight, and A's rows evenly strided
    /// across batches (a per-block buffer, or a tensor whose batch stride is m row strides).
    fold_batches: bool,
    /// [batch, m, k] of A and n of the products; rows = batch * m. `batch` is the product of the products'
    /// leading axes, `batch_dims`.
    batch: usize,
    batch_dims: Vec<usize>,
    /// Per batch axis, how far a direct left operand and each weight move (0 where they broadcast).
    left_batch_strides: Vec<usize>,
    weight_batch_strides: Vec<Vec<usize>>,
    m: usize,
    k: usize,
    n: usize,
}

/// Runs a Gemm or DualGemm group, or says why its shapes or structure do not fit the fused form. With
/// `paths`, adds how its GEMM calls ran (FUSE_DEBUG>=3).
pub(crate) fn run_gemm_group(
    info: &CallInfo<'_>,
    group: &Group,
    resolve: &dyn Fn(NodeId) -> Result<Value>,
    paths: Option<&mut Vec<String>>,
) -> Result<Outcome> {
    let gg = match build(info, group, resolve)? {
        Ok(gg) => gg,
        Err(reason) => return Ok(Outcome::DoesNotFit(reason)),
    };
    let names = |ids: &mut dyn Iterator<Item = NodeId>| ids.map(|id| operand_name(info.graph, id)).collect::<Vec<_>>();
    let shape = |id: NodeId| info.shapes[id.index()].clone();
    let dtype = |id: NodeId| info.dtypes[id.index()].unwrap_or(DType::F32);
    let order: Vec<NodeId> = gg
        .prologue_outputs
        .iter()
        .chain(gg.product_outputs.iter().map(|(_, id)| id))
        .chain(&gg.epilogue_outputs)
        .copied()
        .collect();
    // Every row of every output is written below (its block's sinks).
    let mut buffers: Vec<_> = order.iter().map(|&id| allocate_for_overwrite(dtype(id), &shape(id))).collect();
    let rows = gg.batch * gg.m;
    let widths: Vec<usize> = gg
        .prologue_outputs
        .iter()
        .map(|_| gg.k)
        .chain(gg.product_outputs.iter().map(|_| gg.n))
        .chain((0..gg.epilogue_outputs.len()).map(|i| gg.epilogue.sink_width(i)))
        .collect();
    // Block-quantized weights: blocks run one after another, each product multi-threaded over the weight rows
    // (`cpu::quant`), so each block decodes the weights once for all its rows.
    let quantized = gg.weights.iter().any(|w| w.dtype().is_quantized());
    let blocks = if quantized { quantized_block_ranges(rows) } else { block_ranges(rows) };
    if let Some(paths) = paths {
        let weights = names(&mut group.matmuls.iter().map(|&mm| info.graph.node(mm).args[1]));
        let left = group.matmuls.first().map(|&mm| operand_name(info.graph, info.graph.node(mm).args[0]));
        paths.push(gg.describe(left.as_deref().unwrap_or("?"), &weights, &blocks));
    }
    let mut sinks: Vec<Sink<'_>> = buffers.iter_mut().map(sink_of).collect();
    let mut work = Vec::with_capacity(blocks.len());
    for block in blocks {
        let mine: Vec<Sink<'_>> = sinks.iter_mut().zip(&widths).map(|(s, &w)| s.take_front(block.len() * w)).collect();
        work.push((block, mine));
    }
    if work.len() == 1 || quantized {
        for (block, mine) in work {
            gg.run_block(info.function, block, mine, true)?;
        }
    } else {
        crate::cpu::spin_pool::try_for_each_item(work, &|(block, mine)| {
            gg.run_block(info.function, block, mine, false)
        })?;
    }
    drop(sinks);
    let tensors = order.iter().zip(buffers).map(|(&id, data)| (id, Tensor::from_cpu(data, shape(id)))).collect();
    Ok(Outcome::Done(tensors))
}

/// Rows per block where the weights are block-quantized: at most [`QUANTIZED_BLOCK_ROWS`], evened out. Blocks
/// of rows on threads of their own (as [`block_ranges`] gives for f32 weights) would each decode every weight
/// on one thread, and below 32 rows leave the AMX tiles: llama-3.2-1b Q4_K_M's prefill of 128 tokens on a
/// 16-core Xeon did not scale past 2 threads that way (190 tokens/s at 2 threads, 95 at 4, 168 at 16).
fn quantized_block_ranges(rows: usize) -> Vec<Range<usize>> {
    if rows <= QUANTIZED_BLOCK_ROWS {
        return std::iter::once(0..rows).collect();
    }
    let size = rows.div_ceil(rows.div_ceil(QUANTIZED_BLOCK_ROWS));
    (0..rows).step_by(size).map(|r| r..(r + size).min(rows)).collect()
}

/// Rows per block: one block for small M, else enough blocks to feed every thread, each small enough for
/// its product buffer to stay near the cache.
fn block_ranges(rows: usize) -> Vec<Range<usize>> {
    if rows <= SINGLE_BLOCK_ROWS {
        return std::iter::once(0..rows).collect();
    }
    let threads = rayon::current_num_threads().max(1);
    let size = rows.div_ceil(threads * 2).clamp(MIN_BLOCK_ROWS, MAX_BLOCK_ROWS);
    (0..rows).step_by(size).map(|r| r..(r + size).min(rows)).collect()
}

/// Checks the group's structure and compiles its prologue and epilogue; `Ok(Err(reason))` when it does
/// not fit (the executor then runs its nodes one at a time).
fn build(
    info: &CallInfo<'_>,
    group: &Group,
    resolve: &dyn Fn(NodeId) -> Result<Value>,
) -> Result<std::result::Result<GemmGroup, String>> {
    let g = info.graph;
    let in_group = |id: NodeId| group.nodes.contains(&id);
    let Some(&first) = group.matmuls.first() else {
        return Ok(Err("a gemm group without a matmul".into()));
    };
    let a = g.node(first).args[0];
    if group.matmuls.iter().any(|&mm| g.node(mm).args[0] != a) {
        return Ok(Err("matmuls with different left operands".into()));
    }
    let weight_nodes: Vec<NodeId> = group.matmuls.iter().map(|&mm| g.node(mm).args[1]).collect();
    if weight_nodes.iter().any(|&w| in_group(w)) {
        return Ok(Err("a matmul's right operand is computed in the same group".into()));
    }
    let mut prologue: Vec<NodeId> = group.prologue.clone();
    prologue.sort_unstable();
    if in_group(a) != prologue.contains(&a) || (!in_group(a) && !prologue.is_empty()) {
        return Ok(Err("the prologue does not compute the matmul's left operand".into()));
    }
    let epilogue: Vec<NodeId> = group.epilogue().collect();
    for &p in &prologue {
        if g.node(p).args.iter().any(|&x| in_group(x) && !prologue.contains(&x)) {
            return Ok(Err("a prologue op reads a value computed after the matmul".into()));
        }
    }
    for &e in &epilogue {
        if g.node(e).args.iter().any(|&x| prologue.contains(&x)) {
            return Ok(Err("an epilogue op reads a prologue value".into()));
        }
    }
    let a_shape = info.shapes[a.index()].clone();
    let product_shape = info.shapes[first.index()].clone();
    if group.matmuls.iter().any(|&mm| info.shapes[mm.index()] != product_shape) {
        return Ok(Err("the two products have different shapes".into()));
    }
    let (ra, rp) = (a_shape.len(), product_shape.len());
    if ra < 2 || rp < 2 {
        return Ok(Err(format!("a left operand of shape {a_shape:?}")));
    }
    let (m, k, n) = (a_shape[ra - 2], a_shape[ra - 1], product_shape[rp - 1]);
    let batch_dims = product_shape[..rp - 2].to_vec();
    let batch: usize = batch_dims.iter().product();
    // A left operand shared by several batches (`[m, k] x [b, k, n]`): its rows are not the product's.
    let left_broadcast = a_shape[..ra - 2].iter().product::<usize>() != batch;
    if left_broadcast && !prologue.is_empty() {
        return Ok(Err("a prologue on a left operand shared by several batches".into()));
    }
    let mut weights = Vec::with_capacity(weight_nodes.len());
    for &w in &weight_nodes {
        match resolve(w)? {
            Value::Tensor(t) => weights.push(t),
            Value::Scalar(_) => return Err(Error::internal(info.function, "a scalar as a matmul operand")),
        }
    }

    let prologue_outputs: Vec<NodeId> = group.outputs.iter().copied().filter(|o| prologue.contains(o)).collect();
    let left = if prologue.is_empty() {
        match resolve(a)? {
            // A left operand shared by several batches is read in place through broadcast strides (other
            // dtypes through the storage's f32 copy), as weights are.
            Value::Tensor(t) if t.dtype() == DType::F32 || left_broadcast => LeftOperand::Direct(t),
            Value::Tensor(_) => match program(info, &prologue, &[a], &a_shape, resolve)? {
                Ok(p) => LeftOperand::Program(p),
                Err(reason) => return Ok(Err(reason)),
            },
            Value::Scalar(_) => return Err(Error::internal(info.function, "a scalar as a matmul operand")),
        }
    } else {
        let mut sinks = vec![a];
        sinks.extend(&prologue_outputs);
        match program(info, &prologue, &sinks, &a_shape, resolve)? {
            Ok(p) => LeftOperand::Program(p),
            Err(reason) => return Ok(Err(reason)),
        }
    };
    let epilogue_outputs: Vec<NodeId> = group.outputs.iter().copied().filter(|o| epilogue.contains(o)).collect();
    let spec = RowSpec {
        nodes: &epilogue,
        sinks: &epilogue_outputs,
        blocks: &group.matmuls,
        domain: Some(&product_shape),
        keep_last_axis: true,
    };
    let epilogue_program = match compile(info, &spec, resolve)? {
        Compiled::Fits(p) => p,
        Compiled::DoesNotFit(reason) => return Ok(Err(format!("epilogue: {reason}"))),
    };
    let product_outputs =
        group.matmuls.iter().enumerate().filter(|(_, mm)| group.outputs.contains(mm)).map(|(j, &mm)| (j, mm)).collect();
    let left_batch_strides = match &left {
        LeftOperand::Program(_) => vec![0; batch_dims.len()],
        LeftOperand::Direct(t) => batch_strides(t, &batch_dims),
    };
    let weight_batch_strides: Vec<Vec<usize>> = weights.iter().map(|w| batch_strides(w, &batch_dims)).collect();
    let rows_evenly_strided = match &left {
        LeftOperand::Program(_) => true,
        LeftOperand::Direct(t) => {
            // The batch axes and the row axis walk as one axis of the row stride.
            let row_stride = t.strides()[t.rank() - 2];
            let mut strides = left_batch_strides.clone();
            strides.push(row_stride);
            let (dims, merged) = coalesce(&[batch_dims.as_slice(), &[m]].concat(), &[strides], false);
            dims.len() == 1 && (dims[0] <= 1 || merged[0][0] == row_stride)
        }
    };
    let shared_weights = weight_batch_strides.iter().all(|s| s.iter().all(|&x| x == 0));
    let fold_batches = rows_evenly_strided && shared_weights;
    Ok(Ok(GemmGroup {
        left,
        fold_batches,
        prologue_outputs,
        weights,
        product_outputs,
        epilogue: epilogue_program,
        epilogue_outputs,
        batch,
        batch_dims,
        left_batch_strides,
        weight_batch_strides,
        m,
        k,
        n,
    }))
}

/// How far `t` moves per step of each batch axis of the product (0 where it broadcasts).
fn batch_strides(t: &Tensor, batch_dims: &[usize]) -> Vec<usize> {
    let r = t.rank();
    broadcast_strides(&t.shape()[..r - 2], &t.strides()[..r - 2], batch_dims)
}

fn program(
    info: &CallInfo<'_>,
    nodes: &[NodeId],
    sinks: &[NodeId],
    domain: &[usize],
    resolve: &dyn Fn(NodeId) -> Result<Value>,
) -> Result<std::result::Result<RowProgram, String>> {
    let spec = RowSpec { nodes, sinks, blocks: &[], domain: Some(domain), keep_last_axis: true };
    Ok(match compile(info, &spec, resolve)? {
        Compiled::Fits(p) => Ok(p),
        Compiled::DoesNotFit(reason) => Err(format!("prologue: {reason}")),
    })
}

/// A strided f32 matrix inside a slice.
#[derive(Clone, Copy)]
pub(super) struct MatRef<'a> {
    data: &'a [f32],
    offset: usize,
    row_stride: usize,
    col_stride: usize,
}

impl MatRef<'_> {
    /// Whether every element of a rows x cols matrix lies inside the slice.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|r| (cols - 1).checked_mul(self.col_stride).and_then(|c| r.checked_add(c)))
            .and_then(|x| x.checked_add(self.offset));
        last.is_some_and(|l| l < self.data.len())
    }
}

impl GemmGroup {
    /// The GEMM calls this group makes, for FUSE_DEBUG>=3: `left` and `weights` name the operands, `blocks`
    /// are the row blocks it runs. Begins with "the CPU backend's f32 GEMM".
    fn describe(&self, left: &str, weights: &[String], blocks: &[Range<usize>]) -> String {
        let rows = self.batch * self.m;
        let (calls, m) = if self.fold_batches || self.batch == 1 {
            let m = if blocks.len() == 1 {
                format!("m={rows}")
            } else {
                format!("m<={}", blocks.iter().map(Range::len).max().unwrap_or(0))
            };
            (blocks.len(), m)
        } else {
            let per = self.m.max(1);
            (blocks.iter().map(|b| b.end.div_ceil(per) - b.start / per).sum(), format!("m<={}", self.m))
        };
        let a = match &self.left {
            LeftOperand::Program(_) => {
                format!("A = {left} as f32 rows made per block by the prologue (row stride {})", self.k)
            }
            LeftOperand::Direct(t) => {
                let s = t.strides();
                format!("A = {left} read in place (strides {}, {})", s[t.rank() - 2], s[t.rank() - 1])
            }
        };
        let b: Vec<String> = self
            .weights
            .iter()
            .zip(weights)
            .map(|(w, name)| {
                let s = w.strides();
                let (rs, cs) = (s[w.rank() - 2], s[w.rank() - 1]);
                let how = if cs == 1 { "row-major" } else { "column-major, read in place" };
                format!("{name} (strides {rs}, {cs}: {how})")
            })
            .collect();
        let dual = if self.weights.len() == 2 {
            format!(" (dual {}, one call per weight)", weights.join("|"))
        } else {
            String::new()
        };
        let threads = if blocks.len() == 1 {
            "one block, each GEMM multi-threaded (rayon)".to_string()
        } else {
            format!("{} row blocks in parallel, each GEMM single-threaded", blocks.len())
        };
        let batches = if self.batch > 1 && !self.fold_batches { ", one call per batch" } else { "" };
        format!(
            "the CPU backend's f32 GEMM: gemm::gemm x{}{dual}, {m} n={} k={}, {a}, B = {}{batches}, {threads}",
            calls * self.weights.len(),
            self.n,
            self.k,
            b.join(" and "),
        )
    }

    /// Prologue, GEMM(s) and epilogue for one block of rows; `sinks` hold this block's rows of every
    /// output (prologue outputs, then products, then epilogue outputs).
    fn run_block(&self, function: &str, rows: Range<usize>, mut sinks: Vec<Sink<'_>>, parallel: bool) -> Result<()> {
        let count = rows.len();
        let mut epilogue_sinks = sinks.split_off(self.prologue_outputs.len() + self.product_outputs.len());
        let mut product_sinks = sinks.split_off(self.prologue_outputs.len());
        let prologue_sinks = sinks;
        // The products and the left operand's rows are written whole before they are read, and kept for the
        // next call's (`recycle.rs`).
        let mut a_buffer: Vec<f32> = Vec::new();
        if let LeftOperand::Program(p) = &self.left {
            a_buffer = crate::recycle::for_overwrite_f32(count * self.k);
            let mut all = vec![Sink::F32(&mut a_buffer)];
            all.extend(prologue_sinks);
            p.run(rows.clone(), all, &BlockInputs { first_row: rows.start, buffers: &[] }, parallel);
        }
        if self.epilogue_outputs.is_empty() {
            // Nothing reads the products but their outputs (a plain matmul): f32 ones are written in place.
            for (&(j, _), sink) in self.product_outputs.iter().zip(product_sinks.iter_mut()) {
                if let Sink::F32(dst) = sink {
                    self.multiply(function, &rows, &a_buffer, j, dst, parallel)?;
                } else {
                    let mut product = crate::recycle::for_overwrite_f32(count * self.n);
                    self.multiply(function, &rows, &a_buffer, j, &mut product, parallel)?;
                    sink.write(0, &product);
                    crate::recycle::give_f32(product);
                }
            }
            crate::recycle::give_f32(a_buffer);
            return Ok(());
        }
        let mut products: Vec<Vec<f32>> = Vec::with_capacity(self.weights.len());
        for j in 0..self.weights.len() {
            let mut product = crate::recycle::for_overwrite_f32(count * self.n);
            self.multiply(function, &rows, &a_buffer, j, &mut product, parallel)?;
            products.push(product);
        }
        for ((j, _), sink) in self.product_outputs.iter().zip(product_sinks.iter_mut()) {
            sink.write(0, &products[*j]);
        }
        let buffers: Vec<&[f32]> = products.iter().map(|p| p.as_slice()).collect();
        let blocks = BlockInputs { first_row: rows.start, buffers: &buffers };
        self.epilogue.run(rows, std::mem::take(&mut epilogue_sinks), &blocks, parallel);
        products.into_iter().chain([a_buffer]).for_each(crate::recycle::give_f32);
        Ok(())
    }

    /// A direct left operand's values as f32 (`None` where a row program computes the left operand).
    fn direct_left_data(&self) -> Option<F32Read<'_>> {
        match &self.left {
            LeftOperand::Direct(t) => Some(t.cpu_storage().f32_data()),
            LeftOperand::Program(_) => None,
        }
    }

    /// `product = A[rows] x weights[j]`: one GEMM call, or one per batch the rows touch when batches cannot
    /// fold.
    fn multiply(
        &self,
        function: &str,
        rows: &Range<usize>,
        a_buffer: &[f32],
        j: usize,
        product: &mut [f32],
        parallel: bool,
    ) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let (w, w_batch) = (&self.weights[j], &self.weight_batch_strides[j]);
        if w.dtype().is_quantized() {
            return self.multiply_blocks(function, rows, a_buffer, j, product);
        }
        let w_data = w.cpu_storage().f32_data();
        let left_data = self.direct_left_data();
        let ws = w.strides();
        let wr = w.rank();
        let mut r = rows.start;
        while r < rows.end {
            let b = r / self.m;
            let end = if self.fold_batches { rows.end } else { rows.end.min((b + 1) * self.m) };
            let a = match &self.left {
                LeftOperand::Program(_) => {
                    MatRef { data: a_buffer, offset: (r - rows.start) * k, row_stride: k, col_stride: 1 }
                }
                LeftOperand::Direct(t) => {
                    let s = t.strides();
                    let batch_offset = row_offset(b, &self.batch_dims, &self.left_batch_strides);
                    let row_stride = s[t.rank() - 2];
                    MatRef {
                        data: left_data.as_deref().unwrap_or_default(),
                        offset: t.offset() + batch_offset + (r % self.m) * row_stride,
                        row_stride,
                        col_stride: s[t.rank() - 1],
                    }
                }
            };
            let batch_offset = row_offset(b, &self.batch_dims, w_batch);
            let wm = MatRef {
                data: &w_data,
                offset: w.offset() + batch_offset,
                row_stride: ws[wr - 2],
                col_stride: ws[wr - 1],
            };
            let dst = &mut product[(r - rows.start) * n..(end - rows.start) * n];
            gemm_into(function, dst, false, end - r, n, k, a, wm, parallel)?;
            r = end;
        }
        Ok(())
    }
}

/// `dst (m x n, dense) = a (m x k) x b (k x n)` (`+=` where `accumulate`) with `gemm-f32` (the `gemm` crate's f32
/// kernels alone), after checking every index the call will touch lies inside its slice.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_into(
    function: &str,
    dst: &mut [f32],
    accumulate: bool,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    parallel: bool,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return Ok(());
    }
    if dst.len() < m * n || !a.fits(m, k) || !b.fits(k, n) {
        return Err(Error::internal(function, format!("gemm operands out of bounds ({m}x{k} by {k}x{n})")));
    }
    let parallelism = if parallel {
        crate::cpu::spin_pool::park_helpers();
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // The microkernels prefer a column-major destination, so (as `gemm::gemm` does before it dispatches) a
    // row-major `dst` is computed as its transpose, dst^T = b^T a^T: swap m and n, the operands, and every
    // pair of strides. All strides here are non-negative, `gemm::gemm`'s other normalisation.
    let (dst_cs, dst_rs) = (1isize, n as isize);
    let a_ptr = a.data.as_ptr().wrapping_add(a.offset);
    let b_ptr = b.data.as_ptr().wrapping_add(b.offset);
    let (a_cs, a_rs, b_cs, b_rs) =
        (a.col_stride as isize, a.row_stride as isize, b.col_stride as isize, b.row_stride as isize);
    let (m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) = if dst_cs < dst_rs {
        (n, m, dst_rs, dst_cs, b_ptr, b_rs, b_cs, a_ptr, a_rs, a_cs)
    } else {
        (m, n, dst_cs, dst_rs, a_ptr, a_cs, a_rs, b_ptr, b_cs, b_rs)
    };
    // SAFETY: the three matrices were checked to lie inside their slices above; `dst` is borrowed
    // mutably and so cannot alias `a` or `b`. Arguments: dst = alpha * dst (read where `accumulate`) + 1 * lhs *
    // rhs, no conjugation.
    unsafe {
        gemm_f32::gemm::f32::get_gemm_fn()(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_cs,
            dst_rs,
            accumulate,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            if accumulate { 1.0f32 } else { 0.0 },
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantized groups' blocks cover the rows in order, none empty and none over the limit, one block up to it.
    #[test]
    fn quantized_blocks_cover_the_rows_once() {
        for rows in [0, 1, 31, 128, 256, 257, 600, 4097] {
            let blocks = quantized_block_ranges(rows);
            assert_eq!(blocks.len(), rows.div_ceil(QUANTIZED_BLOCK_ROWS).max(1), "{rows} rows: {blocks:?}");
            assert_eq!(blocks.first().map(|b| b.start), Some(0));
            assert_eq!(blocks.last().map(|b| b.end), Some(rows));
            assert!(blocks.windows(2).all(|w| w[0].end == w[1].start), "{rows} rows: {blocks:?}");
            assert!(blocks.iter().all(|b| b.len() <= QUANTIZED_BLOCK_ROWS && (rows == 0 || !b.is_empty())));
        }
    }
}
