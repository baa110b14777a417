//! `attention(q, k, v, scale, causal)` on the GPU, one of two paths that `fuse_ir::codegen::attention_launch`
//! picks (with the tiles, splits, shared memory and the head dimension the build holds):
//! - decode, when the rows of a key/value head (queries x group) fit one block: `fuse_model_attention_decode`
//!   alone, whatever the key splits: the last block of each (batch, kv head) to finish merges the splits'
//!   f32 partials, counting arrivals in the device's zeroed counters (`CudaDevice::zeroed_counters`, left
//!   at zero by every launch).
//! - prefill: `fuse_model_attention` (flash style: query tiles of the rows that share a key/value head, each
//!   key/value tile read once into shared memory, no score in global memory), then, when the keys were split
//!   across blocks to fill the GPU, the small `fuse_model_attention_combine`, which merges each row's
//!   per-split f32 partials.
//! `attention_len` is the same launch with the address of its `lens` (u32 [b]): the key counts stay on the
//! device (nothing is read back, so a captured step can replay with new counts), the geometry comes from
//! skv, the capacity. The decode kernel checks each count (`fuse_model_check_lens`: one that does not fit is
//! recorded in the device's fault record and reported at the next synchronisation); before the prefill
//! kernel, which clamps each count to skv (no register is left there for the check), one small launch makes
//! the same check.
//!
//! The partials live in the device's one growable workspace (`CudaDevice::workspace`), held from before the
//! first launch until after the last, so that repeated calls allocate nothing and no other call on another
//! thread can reuse it in between.

use super::launch::KernelDims;
use super::model_args::{vector_rows, FusedRope, Words, ROPE_APPEND_WORDS};
use super::Executor;
use crate::call::Value;
use crate::{Error, Result, Tensor};
use fuse_ir::codegen::{
    attention_launch, attention_launch_with_split_floor, AttentionShape, ModelKernel, ATTENTION_DECODE_CLUSTER_DEFINE,
    ATTENTION_DECODE_CLUSTER_MAX, ATTENTION_DECODE_EARLY_DEFINE, ATTENTION_DECODE_ROPE_DEFINE,
    ATTENTION_DECODE_ROPE_VECTOR_DEFINE, ATTENTION_DECODE_VECTOR_DEFINE, ATTENTION_MAX_HEAD_DIM,
    ONE_LAUNCH_MAX_TASK_THREADS,
};
use fuse_ir::view::ViewOp;
use fuse_ir::{ModelOp, NodeId, Op};

/// Largest grid of the kernels' grid-stride loops.
const MAX_GRID: usize = 1 << 20;

impl Executor<'_> {
    /// Runs attention node `id` into a fresh dense output. `rope_append`: a fused rope and cache appends
    /// (`rope_append.rs`), which only the decode kernel takes.
    pub(super) fn run_attention_node(&mut self, id: NodeId, rope_append: Option<FusedRope>) -> Result<()> {
        let Op::Model(ModelOp::Attention { causal, with_lens }) = self.graph.op(id) else {
            return Err(self.internal(format!("%{} is no attention", id.0)));
        };
        let args = self.graph.node(id).args.clone();
        // The caches a fused append writes are the slice_sets' destinations (this launch writes them).
        let g = self.graph;
        let read = |n: NodeId| match (rope_append.is_some(), g.op(n)) {
            (true, Op::View(ViewOp::SliceSet { .. })) => g.node(n).args[0],
            _ => n,
        };
        let early_reads = [read(args[1]), read(args[2])].into_iter().chain(with_lens.then(|| args[4]));
        let early = self.unwritten_before(early_reads);
        let out = self.allocate(id)?;
        let out_address = if out.numel() == 0 { 0 } else { self.address(&out)? };
        self.run_attention(&args, causal, with_lens, &out, out_address, rope_append, early)?;
        self.values[id.index()] = Some(Value::Tensor(out));
        Ok(())
    }

    /// Queues attention of the operands `args` (q, k, v, scale, and lens `with_lens`) into `out`, fresh and
    /// dense [b, hq, sq, d] at `out_address`.
    /// `early`: the kernel before this launch writes none of k, v and lens (`unwritten_before`).
    #[allow(clippy::too_many_arguments)]
    fn run_attention(
        &mut self,
        args: &[NodeId],
        causal: bool,
        with_lens: bool,
        out: &Tensor,
        out_address: u64,
        rope_append: Option<FusedRope>,
        early: bool,
    ) -> Result<()> {
        let (q, k, v) =
            (self.tensor_arg(args[0], "q")?, self.tensor_arg(args[1], "k")?, self.tensor_arg(args[2], "v")?);
        let scale = match self.resolve(args[3])? {
            Value::Scalar(s) => s,
            Value::Tensor(t) => {
                t.to_vec::<f32>()?.first().copied().ok_or_else(|| self.internal("an empty scale"))? as f64
            }
        };
        let ([batch, q_heads, queries, d], [_, kv_heads, keys, _]) = (dims4(q.shape()), dims4(k.shape()));
        let unsupported = |what: String| Error::unsupported(self.function, "attention", what);
        if d > ATTENTION_MAX_HEAD_DIM {
            return Err(unsupported(format!("a head dimension of {d} on the GPU (at most {ATTENTION_MAX_HEAD_DIM})")));
        }
        if out.numel() == 0 && rope_append.is_none() {
            return Ok(());
        }
        // The kernels split indices in 32 bits: a row (b, h, i) in u32, key positions, causal limits and
        // work items in i32 (they add a tile or a query to one another).
        let rows = batch * q_heads * queries;
        if u32::try_from(rows).is_err() {
            return Err(unsupported(format!("{rows} query rows on the GPU (fewer than 2^32)")));
        }
        if i32::try_from(keys + queries).is_err() {
            return Err(unsupported(format!(
                "{keys} keys and {queries} queries on the GPU (fewer than 2^31 together)"
            )));
        }
        let shape = AttentionShape { batch, q_heads, queries, kv_heads, keys, d };
        // A step recorded for one launch runs its kernels' blocks as tasks of at most so many threads, whose
        // splits merge without clusters.
        let launch = match self.device.recorder().is_on() {
            true => {
                let launch =
                    attention_launch_with_split_floor(shape, self.device.sm_count(), crate::env::step_split_keys())
                        .one_split_up_to(crate::env::step_one_split_keys());
                match crate::env::step_row_blocks() {
                    true => launch.in_row_blocks(queries * (q_heads / kv_heads.max(1)), ONE_LAUNCH_MAX_TASK_THREADS),
                    false => launch.within_threads(ONE_LAUNCH_MAX_TASK_THREADS),
                }
            }
            false => attention_launch(shape, self.device.sm_count()),
        };
        if rope_append.is_some() && !launch.decode {
            return Err(self.internal("a fused rope and cache append without the decode attention kernel"));
        }
        if i32::try_from(launch.items).is_err() {
            return Err(unsupported(format!("{} work items on the GPU (fewer than 2^31)", launch.items)));
        }
        let shared = u32::try_from(launch.shared_bytes).map_err(|_| self.internal("attention shared memory size"))?;
        // Decode's key splits merge in a thread-block cluster on sm_90 (through shared memory: no partials,
        // no counters) when a cluster holds them all and every item has a block of its own.
        let device = self.device;
        let cluster = launch.decode
            && launch.splits > 1
            && launch.splits <= ATTENTION_DECODE_CLUSTER_MAX
            && launch.items <= MAX_GRID
            && device.arch_major() >= 9
            // A step captured for one launch runs its kernels' blocks as tasks, which have no clusters.
            && !device.recorder().is_on();
        // Held until both launches are queued (see the module's comment).
        let workspace = match launch.partial_floats {
            _ if cluster => None,
            0 => None,
            floats => Some(device.workspace(floats * std::mem::size_of::<f32>())?),
        };
        let partials = workspace.as_ref().map_or(0, |w| w.address);
        // lens [b] through its stride (a view of a longer tensor is fine); null without lens.
        let (lens, lens_stride) = if with_lens {
            let lens = self.tensor_arg(args[4], "lens")?;
            (self.address(&lens)?, lens.strides()[0])
        } else {
            (0, 0)
        };
        if launch.decode {
            let counters = match launch.counters {
                _ if cluster => 0,
                0 => 0,
                count => device.zeroed_counters(count)?,
            };
            let (k_address, v_address) = (self.address(&k)?, self.address(&v)?);
            // 16-byte loads of 8 channels: unit-stride rows at 16-byte boundaries, whole vectors of d.
            let vector = [(&k, k_address), (&v, v_address)].iter().all(|(t, address)| vector_rows(t, *address, d));
            let mut words = Words::default();
            words.address(self.address(&q)?).address(k_address).address(v_address);
            words.address(out_address).address(partials).address(counters).address(lens).count(lens_stride);
            words.counts(&[batch, q_heads, queries, kv_heads, keys, d, causal as usize]);
            words.0.push(scale.to_bits());
            words.counts(&[launch.splits, launch.split_keys, vector as usize]);
            words.counts(q.strides()).counts(k.strides()).counts(v.strides());
            // The variant with rope and the appends fused in is built apart (`-DFUSE_DECODE_ROPE=1`).
            let mut defines = launch.defines(q.dtype());
            match rope_append {
                Some(fused) => {
                    words.0.extend(fused.words.0);
                    defines.push(ATTENTION_DECODE_ROPE_DEFINE.to_string());
                    // In registers where every row it reads is vector-loadable and d is the build's.
                    if fused.vector && vector && launch.exact_d {
                        defines.push(ATTENTION_DECODE_ROPE_VECTOR_DEFINE.to_string());
                    }
                }
                None => words.0.resize(words.0.len() + ROPE_APPEND_WORDS, 0),
            }
            // Where an append past the caches or a key count of lens that does not fit is recorded.
            words.address(self.device.fault_address()?);
            // Vector-loadable caches (a decoder's) get a build without the element-by-element loads.
            if vector {
                defines.push(ATTENTION_DECODE_VECTOR_DEFINE.to_string());
            }
            if cluster {
                defines.push(ATTENTION_DECODE_CLUSTER_DEFINE.to_string());
            }
            // Early loads need the registers of the vector build with passes of at most 3 rows.
            if early && vector && launch.pass_rows <= 3 {
                defines.push(ATTENTION_DECODE_EARLY_DEFINE.to_string());
            }
            let grid = launch.items.min(MAX_GRID) as u32;
            let blocks_a_cluster = if cluster { launch.splits as u32 } else { 1 };
            let dims = KernelDims {
                grid,
                block: launch.decode_threads(),
                cluster: blocks_a_cluster,
                shared_bytes: 0,
                overlap: true,
            };
            self.launch_model_kernel_block(ModelKernel::AttentionDecode, &defines, dims, words)?;
            drop(workspace);
            return Ok(());
        }
        if with_lens {
            // The prefill kernel clamps the counts unchecked (no register is left for the check): one block
            // checks them first, as the decode kernel does, into the fault record.
            let mut words = Words::default();
            words.address(lens).counts(&[lens_stride, batch, keys, queries, causal as usize]);
            words.address(self.device.fault_address()?);
            let defines = ModelKernel::defines(q.dtype());
            self.launch_model_kernel_with(ModelKernel::LensCheck, &defines, 1, 0, words)?;
        }
        let mut words = Words::default();
        for t in [&q, &k, &v] {
            words.address(self.address(t)?);
        }
        words.address(out_address).address(partials).address(lens).count(lens_stride);
        words.counts(&[batch, q_heads, queries, kv_heads, keys, d, causal as usize]);
        words.0.push(scale.to_bits());
        words.counts(&[launch.q_tiles, launch.splits, launch.split_keys]);
        words.counts(q.strides()).counts(k.strides()).counts(v.strides());
        let grid = launch.items.min(MAX_GRID) as u32;
        self.launch_model_kernel_with(ModelKernel::Attention, &launch.defines(q.dtype()), grid, shared, words)?;
        if launch.splits > 1 {
            let mut words = Words::default();
            words.address(partials).address(out_address).counts(&[rows, launch.splits, d]);
            let defines = ModelKernel::defines(q.dtype());
            self.launch_model_kernel_with(
                ModelKernel::AttentionCombine,
                &defines,
                rows.min(MAX_GRID) as u32,
                0,
                words,
            )?;
        }
        drop(workspace);
        Ok(())
    }
}

/// A 4-D shape's sizes (inference checked the rank).
fn dims4(shape: &[usize]) -> [usize; 4] {
    [shape[0], shape[1], shape[2], shape[3]]
}
