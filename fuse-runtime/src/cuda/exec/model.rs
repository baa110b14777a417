//! Model groups (`embedding`, `argmax`, `rope`, `attention`: one node, one kernel, two for a prefill
//! attention with split keys, see `attention.rs`), `cat` and `slice_set` (copies: consecutive independent ones,
//! a cat's parts or a decoder's key and value writes, share one launch) on the GPU: the hand-written kernels of
//! `fuse_ir::codegen::ModelKernel`, compiled once per dtype through the module cache and launched through
//! `run_step` like every other kernel. Each takes one struct of 8-byte words (`model_args::Words`), packed
//! here field by field in the order the `.cu` file declares them.
//!
//! Operands are read as the views they are (their strides go to the kernel). Values only the GPU holds are
//! checked by the kernels (an embedding id past the table, a slice_set position held in a tensor): a failed
//! check skips the access and is recorded in the device's fault record, reported at the next
//! synchronisation (`Error::DeviceCheck`), so no step waits for the host. Graphs with these ops are never
//! recorded as launch plans (the steps are queued without patches): every call takes the general path.

use super::launch::KernelDims;
use super::launch_plan::Step;
use super::model_args::{rows_on_16_bytes, Words};
use super::{kernels, Executor};
use crate::call::Value;
use crate::cuda::driver::driver_error;
use crate::{Error, Result, Tensor};
use cudarc::driver::sys::CUfunction_attribute;
use fuse_ir::codegen::{ModelKernel, MODEL_CAT_COPIES, MODEL_RANK};
use fuse_ir::view::{dense_strides, ViewOp};
use fuse_ir::{DType, ModelOp, NodeId, Op};
use std::sync::OnceLock;

/// A copy waiting to be launched with others (`Executor::queue_copy`): its `FuseCatArgs` words.
pub(super) struct PendingCopy {
    dtype: DType,
    blocks: u32,
    words: Vec<u64>,
    _keep: Vec<Tensor>,
}

/// Blocks for a grid-stride loop over `count` items, `per_block` a block (the loop covers any excess).
pub(super) fn blocks(count: usize, per_block: u32) -> u32 {
    count.div_ceil(per_block as usize).clamp(1, 1 << 20) as u32
}

impl Executor<'_> {
    pub(super) fn tensor_arg(&self, id: NodeId, what: &str) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(_) => Err(self.internal(format!("a scalar as the {what} of a model op"))),
        }
    }

    /// `all_reduce_sum`: NCCL's sum over this thread's GPU group (`fuse::parallel`), queued on the device's
    /// stream from x into a fresh output.
    fn run_all_reduce(&mut self, id: NodeId) -> Result<()> {
        if self.device.recorder().is_on() {
            // A recorded step replays kernels, fills and copies: a sum through NCCL would be left out.
            let reason = "cannot be part of a step recorded for one launch (its sum is NCCL's, not a kernel)";
            return Err(Error::unsupported(self.function, "all_reduce_sum", reason));
        }
        let x = self.tensor_arg(self.graph.node(id).args[0], "x")?;
        if !x.is_contiguous() {
            let reason = "sums a dense tensor on the GPU, not a strided view: call .contiguous() on it first";
            return Err(Error::unsupported(self.function, "all_reduce_sum", reason));
        }
        let out = self.allocate(id)?;
        if x.numel() > 0 {
            let (send, recv) = (self.address(&x)?, self.address(&out)?);
            #[cfg(feature = "cuda")]
            crate::parallel::nccl_all_reduce_sum(send, recv, x.numel(), x.dtype(), self.device)?;
            #[cfg(not(feature = "cuda"))]
            {
                let _ = (send, recv);
                let reason = "this build links CUDA as candle does, without NCCL (the `cuda` feature brings it)";
                return Err(Error::unsupported(self.function, "all_reduce_sum", reason));
            }
            self.queued = true;
        }
        self.values[id.index()] = Some(Value::Tensor(out));
        Ok(())
    }

    /// Rank checks the kernels' fixed layouts need (inference allows any rank).
    pub(super) fn fits_layout(&self, op: &'static str, t: &Tensor) -> Result<()> {
        if t.shape().len() > MODEL_RANK {
            return Err(Error::unsupported(
                self.function,
                op,
                format!("operands of more than {MODEL_RANK} axes on the GPU"),
            ));
        }
        Ok(())
    }

    /// Compiles (once) and queues `kernel` for `dtype` with `grid` blocks and the packed `words`.
    fn launch_model_kernel(&mut self, kernel: ModelKernel, dtype: DType, grid: u32, words: Words) -> Result<()> {
        self.launch_model_kernel_with(kernel, &ModelKernel::defines(dtype), grid, 0, words)
    }

    /// [`Self::launch_model_kernel`] with the defines given and `shared_bytes` of dynamic shared memory.
    pub(super) fn launch_model_kernel_with(
        &mut self,
        kernel: ModelKernel,
        defines: &[String],
        grid: u32,
        shared_bytes: u32,
        words: Words,
    ) -> Result<()> {
        self.launch_model_kernel_in(kernel, defines, grid, 1, shared_bytes, words)
    }

    /// [`Self::launch_model_kernel_with`] in clusters of `cluster` blocks (1: none).
    pub(super) fn launch_model_kernel_in(
        &mut self,
        kernel: ModelKernel,
        defines: &[String],
        grid: u32,
        cluster: u32,
        shared_bytes: u32,
        words: Words,
    ) -> Result<()> {
        let block = kernel.block_threads();
        self.launch_model_kernel_block(
            kernel,
            defines,
            KernelDims { grid, block, cluster, shared_bytes, overlap: true },
            words,
        )
    }

    /// The same with `dims.block` threads a block (the defines build the kernel for that many).
    pub(super) fn launch_model_kernel_block(
        &mut self,
        kernel: ModelKernel,
        defines: &[String],
        dims: KernelDims,
        words: Words,
    ) -> Result<()> {
        let (source, shared_bytes) = (kernel.source(), dims.shared_bytes);
        let function = self.device.kernel(
            self.function,
            kernel.name(),
            source,
            model_fingerprint(kernel),
            defines,
            self.device.arch(),
        )?;
        // A block gets more than 48 KB of dynamic shared memory only once the function allows it.
        if shared_bytes > 48 * 1024 {
            let bytes = i32::try_from(shared_bytes).map_err(|_| self.internal("a shared memory size past i32"))?;
            function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)
                .map_err(|e| {
                    driver_error(&format!("{}: allow {shared_bytes} bytes of shared memory", kernel.name()), e)
                })?;
        }
        // The launch may overlap the kernel before it (dims.overlap): each model kernel waits for it first
        // (common.cuh's fuse_model_grid_sync), so only its launch and set-up overlap.
        self.queue(Step::Kernel {
            name: kernel.name().to_string(),
            function,
            dims,
            words: words.0,
            patches: Vec::new(),
            maps: Vec::new(),
        })
    }

    /// Runs one model op, `cat` or `slice_set` node by its hand-written kernel (a group of its own, or a
    /// member of a rope_append_attention group run one by one). Consecutive copies that do not read one
    /// another's results launch together.
    pub(super) fn run_hand_written(&mut self, node: NodeId) -> Result<()> {
        let op = self.graph.op(node);
        let (is_cat, is_write) = (matches!(op, Op::View(ViewOp::Cat { .. })), op.writes_in_place());
        if !(is_cat || is_write) || self.reads_queued_copy(node) {
            self.flush_copies()?;
        }
        if is_cat {
            self.run_cat(node)
        } else if is_write {
            self.run_slice_set(node)
        } else {
            self.run_model(node)
        }
    }

    /// Runs the one model node of a Model group into a fresh dense output.
    fn run_model(&mut self, id: NodeId) -> Result<()> {
        self.unreplayable();
        let Op::Model(op) = self.graph.op(id) else {
            return Err(self.internal(format!("%{} in a model group is no model op", id.0)));
        };
        if let ModelOp::Attention { .. } = op {
            // Two launches and scratch memory of its own (`attention.rs`).
            return self.run_attention_node(id, None);
        }
        if op == ModelOp::AllReduceSum {
            return self.run_all_reduce(id);
        }
        if let ModelOp::ArgSort { .. } | ModelOp::ArgTopK = op {
            // Launches of their own (`sort.rs`).
            return self.run_sort(id);
        }
        let args = self.graph.node(id).args.clone();
        let out = self.allocate(id)?;
        let out_address = if out.numel() == 0 { 0 } else { self.address(&out)? };
        let mut words = Words::default();
        let (kernel, dtype, grid, items) = match op {
            ModelOp::Embedding => {
                let (ids, table) = (self.tensor_arg(args[0], "ids")?, self.tensor_arg(args[1], "table")?);
                let (vocab, hidden) = (table.shape()[0], table.shape()[1]);
                let count = ids.numel() * hidden;
                // The kernel reads ids densely and checks them itself (the fault record: no host round trip).
                // A strided view of ids is rare: it goes through the host as a dense copy.
                let ids = if ids.is_contiguous() {
                    ids
                } else {
                    Tensor::from_vec(ids.to_vec::<u32>()?, ids.shape(), &crate::Device::Cuda(self.device.clone()))?
                };
                if count > 0 {
                    words.address(self.address(&ids)?).address(self.address(&table)?).address(out_address);
                    words.counts(&[count, hidden, vocab]).counts(table.strides()).address(self.device.fault_address()?);
                }
                (ModelKernel::Embedding, table.dtype(), blocks(count, ModelKernel::Embedding.block_threads()), count)
            }
            ModelOp::Argmax => {
                let x = self.tensor_arg(args[0], "x")?;
                self.fits_layout("argmax", &x)?;
                let r = x.shape().len();
                let (columns, rows) = (x.shape()[r - 1], out.numel());
                if rows > 0 {
                    // 16-byte loads: unit column stride, every row starting on a 16-byte boundary.
                    let address = self.address(&x)?;
                    let vector = rows_on_16_bytes(&x, address);
                    words.address(address).address(out_address).counts(&[
                        rows,
                        columns,
                        x.strides()[r - 1],
                        vector as usize,
                    ]);
                    words.layout(&x.shape()[..r - 1], &x.strides()[..r - 1]);
                }
                (ModelKernel::Argmax, x.dtype(), rows.clamp(1, 1 << 20) as u32, rows)
            }
            ModelOp::Cumsum => {
                let x = self.tensor_arg(args[0], "x")?;
                self.fits_layout("cumsum", &x)?;
                let r = x.shape().len();
                let columns = x.shape()[r - 1];
                let rows = if columns == 0 { 0 } else { out.numel() / columns };
                if rows > 0 {
                    words.address(self.address(&x)?).address(out_address).counts(&[rows, columns, x.strides()[r - 1]]);
                    words.layout(&x.shape()[..r - 1], &x.strides()[..r - 1]);
                }
                (ModelKernel::Cumsum, x.dtype(), rows.clamp(1, 1 << 20) as u32, rows)
            }
            ModelOp::Gather => {
                let (x, indexes) = (self.tensor_arg(args[0], "x")?, self.tensor_arg(args[1], "indexes")?);
                self.fits_layout("gather", &x)?;
                self.fits_layout("gather", &indexes)?;
                let r = x.shape().len();
                let count = out.numel();
                if count > 0 {
                    // The indexes live on the device: the kernel checks them (the fault record).
                    words.address(self.address(&x)?).address(self.address(&indexes)?).address(out_address);
                    words.counts(&[count, indexes.shape()[r - 1], x.shape()[r - 1], x.strides()[r - 1]]);
                    words.address(self.device.fault_address()?);
                    words.layout(&x.shape()[..r - 1], &x.strides()[..r - 1]).layout(indexes.shape(), indexes.strides());
                }
                (ModelKernel::Gather, x.dtype(), blocks(count, ModelKernel::Gather.block_threads()), count)
            }
            ModelOp::Unfold { spatial } => {
                let x = self.tensor_arg(args[0], "x")?;
                let sizes = (0..args.len())
                    .map(|i| match self.resolve(args[i])? {
                        Value::Scalar(v) => Ok(Some(v)),
                        Value::Tensor(_) => Ok(None),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let w = self.tensor_arg(args[1], "weights")?;
                let u = fuse_ir::model_op::unfold::Unfold::of(spatial, x.shape(), w.shape(), &sizes)
                    .map_err(|e| self.internal(format!("unfold: {e}")))?;
                let count = out.numel();
                if count > 0 {
                    // x's strides as [b, c, h, w]: a 1-D x has one row (stride 0).
                    let st = x.strides();
                    let strides = if u.spatial == 1 { [st[0], st[1], 0, st[2]] } else { [st[0], st[1], st[2], st[3]] };
                    words.address(self.address(&x)?).address(out_address);
                    words.counts(&[count, u.batch, u.channels, u.groups]).counts(&u.input).counts(&u.kernel);
                    words.counts(&u.output).counts(&u.padding).counts(&u.stride).count(u.dilation).counts(&strides);
                }
                (ModelKernel::Unfold, x.dtype(), blocks(count, ModelKernel::Unfold.block_threads()), count)
            }
            ModelOp::Rope => {
                let (x, cos, sin) = (
                    self.tensor_arg(args[0], "x")?,
                    self.tensor_arg(args[1], "cos")?,
                    self.tensor_arg(args[2], "sin")?,
                );
                self.fits_layout("rope", &x)?;
                let r = x.shape().len();
                let (seq, half) = (x.shape()[r - 2], x.shape()[r - 1] / 2);
                let pairs = out.numel() / 2;
                if pairs > 0 {
                    words
                        .address(self.address(&x)?)
                        .address(self.address(&cos)?)
                        .address(self.address(&sin)?)
                        .address(out_address);
                    // [b, seq, d/2] tables: each batch's block of rows apart (RopeTable says which row).
                    let (cs, ss) = (cos.strides(), sin.strides());
                    let (cos_batch, cos_rows) = if cs.len() == 3 { (cs[0], &cs[1..]) } else { (0, cs) };
                    let (sin_batch, sin_rows) = if ss.len() == 3 { (ss[0], &ss[1..]) } else { (0, ss) };
                    words.counts(&[pairs, half, seq, x.strides()[r - 1]]).counts(cos_rows).counts(sin_rows);
                    words.layout(&x.shape()[..r - 1], &x.strides()[..r - 1]);
                    let table = fuse_ir::model_op::RopeTable::of(x.shape(), cos.shape());
                    words.counts(&[cos_batch, sin_batch, table.rows_per_batch]);
                }
                (ModelKernel::Rope, x.dtype(), blocks(pairs, ModelKernel::Rope.block_threads()), pairs)
            }
            ModelOp::Attention { .. } | ModelOp::ArgSort { .. } | ModelOp::ArgTopK | ModelOp::AllReduceSum => {
                return Err(self.internal("attention, the sorts and the sum are run on their own"))
            }
        };
        if items > 0 {
            self.launch_model_kernel(kernel, dtype, grid, words)?;
        }
        self.values[id.index()] = Some(Value::Tensor(out));
        Ok(())
    }

    /// A copy of `count` elements (one `FuseCatArgs` in `words`), launched with the copies queued before it
    /// when it can join them (`flush_copies` launches them): up to [`MODEL_CAT_COPIES`] of one element size.
    /// `keep`: the tensors it reads and writes, held until it is launched (a dense copy made for a view
    /// would otherwise be freed, in stream order, before the kernel that reads it).
    fn queue_copy(&mut self, dtype: DType, count: usize, words: Words, keep: Vec<Tensor>) -> Result<()> {
        let joins = |p: &PendingCopy| p.dtype.size_bytes() == dtype.size_bytes();
        if self.pending_copies.len() == MODEL_CAT_COPIES || !self.pending_copies.iter().all(joins) {
            self.flush_copies()?;
        }
        let blocks = blocks(count, ModelKernel::Cat.block_threads());
        self.pending_copies.push(PendingCopy { dtype, blocks, words: words.0, _keep: keep });
        Ok(())
    }

    /// Launches the queued copies as one cat kernel. Called before any other group runs, and at the end.
    pub(super) fn flush_copies(&mut self) -> Result<()> {
        let copies = std::mem::take(&mut self.pending_copies);
        self.pending_writers.clear();
        let Some(first) = copies.first() else { return Ok(()) };
        let (dtype, per_copy) = (first.dtype, first.words.len());
        let mut words = Words::default();
        let mut first_blocks = vec![0usize];
        for copy in &copies {
            words.0.extend_from_slice(&copy.words);
            first_blocks.push(first_blocks.last().copied().unwrap_or(0) + copy.blocks as usize);
        }
        // The unused copies: zeros, never read (their blocks are none).
        words.0.resize(per_copy * MODEL_CAT_COPIES, 0);
        let grid = *first_blocks.last().unwrap_or(&0);
        first_blocks.resize(MODEL_CAT_COPIES + 1, grid);
        words.counts(&first_blocks).count(copies.len());
        let grid = u32::try_from(grid).map_err(|_| self.internal(format!("{grid} blocks of copies")))?;
        self.launch_model_kernel(ModelKernel::Cat, dtype, grid, words)
    }

    /// Whether `node` (a cat or slice_set) reads what a queued copy writes (the nodes the queued copies
    /// compute, seen through views): it must wait for their launch.
    fn reads_queued_copy(&self, node: NodeId) -> bool {
        let written = |id: NodeId| self.pending_writers.contains(&id);
        let mut stack: Vec<NodeId> = self.graph.node(node).args.clone();
        while let Some(id) = stack.pop() {
            if written(id) {
                return true;
            }
            if matches!(self.graph.op(id), Op::Transpose) || matches!(self.graph.op(id), Op::View(v) if !v.is_copy()) {
                stack.extend(self.graph.node(id).args.iter().copied());
            }
        }
        false
    }

    /// `cat(parts, axis)` into a fresh dense output: one copy per non-empty part, into its slice, queued
    /// (`queue_copy`): the parts of one cat cost one launch.
    fn run_cat(&mut self, id: NodeId) -> Result<()> {
        self.unreplayable();
        let Op::View(ViewOp::Cat { axis, .. }) = self.graph.op(id) else {
            return Err(self.internal(format!("%{} is no cat", id.0)));
        };
        let args = self.graph.node(id).args.clone();
        let out = self.allocate(id)?;
        self.fits_layout("cat", &out)?;
        let rank = out.shape().len();
        let axis = if axis < 0 { (rank as i64 + axis as i64) as usize } else { axis as usize };
        let out_strides = dense_strides(out.shape());
        let element = out.dtype().size_bytes() as u64;
        let mut start = 0;
        for &part_id in &args {
            let part = self.tensor_arg(part_id, "part")?;
            let (count, along) = (part.numel(), part.shape()[axis]);
            if count > 0 {
                let slice = self.address(&out)? + (start * out_strides[axis]) as u64 * element;
                let mut words = Words::default();
                words.address(self.address(&part)?).address(slice).count(count).layout(part.shape(), part.strides());
                let pad = MODEL_RANK - rank;
                words.counts(&[vec![0; pad], out_strides.clone()].concat());
                words.address(0).counts(&[0, 0]).address(0).count(0); // no device offset, no fault record
                self.queue_copy(out.dtype(), count, words, vec![part, out.clone()])?;
            }
            start += along;
        }
        self.pending_writers.push(id);
        self.values[id.index()] = Some(Value::Tensor(out));
        Ok(())
    }
}

impl Executor<'_> {
    /// `dest.slice_set(&src, axis, offset)`: the cat kernel copies `src` into `dest`'s own memory (rows
    /// `offset ..` along `axis`, through `dest`'s strides); the node's value is `dest`, which now holds them.
    /// An offset held in a u32 tensor is read by the kernel (checked there against the room left), so the
    /// launch is the same for every position: what a captured decode step needs.
    fn run_slice_set(&mut self, id: NodeId) -> Result<()> {
        self.unreplayable();
        let Op::View(ViewOp::SliceSet { axis, at_tensor }) = self.graph.op(id) else {
            return Err(self.internal(format!("%{} is no slice_set", id.0)));
        };
        let args = self.graph.node(id).args.clone();
        let (dest, src) = (self.tensor_arg(args[0], "destination")?, self.tensor_arg(args[1], "source")?);
        self.fits_layout("slice_set", &dest)?;
        let rank = dest.shape().len();
        let axis = if axis < 0 { (rank as i64 + axis as i64) as usize } else { axis as usize };
        let element = dest.dtype().size_bytes() as u64;
        let (start, device_offset) = if at_tensor {
            (self.address(&dest)?, Some(self.tensor_arg(args[2], "offset")?))
        } else {
            let offset = match self.resolve(args[2])? {
                Value::Scalar(v) => v as usize,
                Value::Tensor(_) => return Err(self.internal("slice_set: a tensor offset")),
            };
            (self.address(&dest)? + (offset * dest.strides()[axis]) as u64 * element, None)
        };
        let count = src.numel();
        if count > 0 {
            let pad = MODEL_RANK - rank;
            let mut words = Words::default();
            words.address(self.address(&src)?).address(start).count(count).layout(src.shape(), src.strides());
            words.counts(&[vec![0; pad], dest.strides().to_vec()].concat());
            match &device_offset {
                Some(offset) => {
                    let room = dest.shape()[axis] - src.shape()[axis];
                    // One offset for each index of the first axis (inference checked their number).
                    let per_batch = if offset.numel() > 1 { count / src.shape()[0] } else { 0 };
                    words
                        .address(self.address(offset)?)
                        .counts(&[dest.strides()[axis], room])
                        .address(self.device.fault_address()?)
                        .count(per_batch);
                }
                None => {
                    words.address(0).counts(&[0, 0]).address(0).count(0);
                }
            }
            let keep = vec![src, dest.clone()].into_iter().chain(device_offset.clone()).collect();
            self.queue_copy(dest.dtype(), count, words, keep)?;
        }
        self.addresses[id.index()] = if dest.numel() == 0 { 0 } else { self.address(&dest)? };
        self.pending_writers.push(id);
        self.values[id.index()] = Some(Value::Tensor(dest));
        Ok(())
    }
}

/// Each model kernel's source fingerprint, made once (hashing the text on every launch would cost more
/// than the launch).
fn model_fingerprint(kernel: ModelKernel) -> u64 {
    static FINGERPRINTS: OnceLock<Vec<(ModelKernel, u64)>> = OnceLock::new();
    let all =
        FINGERPRINTS.get_or_init(|| ModelKernel::ALL.iter().map(|&k| (k, kernels::fingerprint(k.source()))).collect());
    all.iter().find(|(k, _)| *k == kernel).map_or_else(|| kernels::fingerprint(kernel.source()), |(_, f)| *f)
}
