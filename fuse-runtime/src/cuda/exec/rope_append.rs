//! A rope_append_attention group on the GPU (the planner's decode attention block:
//! `fuse_ir::plan::RopeAppendAttention`): rope, the key and value cache appends and `attention_len` in one
//! launch of the decode attention kernel (`attention_decode.cu`, its "fused" mode) when this call's shapes
//! allow it, else the members in order, each by its own kernel (rope, one copy launch for both appends,
//! attention), the way a Gemm group chooses among its paths per shape.
//!
//! The one launch needs one new position (`x` [b, heads, 1, d]), the decode kernel's geometry, one dtype
//! throughout, and the two views of rope's result to be whole heads of it. `FUSE_ROPE_APPEND=off` takes the
//! members' path always (for comparison). Fused, nothing reads rope's result itself: its buffer is
//! allocated (its views give the heads' addresses) but never written.

use super::model_args::{rows_on_16_bytes, vector_rows, FusedRope, Words, ROPE_APPEND_WORDS};
use super::Executor;
use crate::call::Value;
use crate::{Result, Tensor};
use fuse_ir::codegen::{attention_launch, AttentionShape};
use fuse_ir::plan::RopeAppendAttention;
use fuse_ir::view::dense_strides;
use fuse_ir::NodeId;

/// What FUSE_DEBUG=2 says of a group that took each path.
const FUSED_PATH: &str = "one launch: the decode attention kernel with rope and both appends";
const MEMBERS_PATH: &str = "its members in order: rope, both appends in one copy launch, attention";

impl Executor<'_> {
    /// Runs a rope_append_attention group; returns why it ran its members one by one (`None`: one launch).
    pub(super) fn run_rope_append_attention(&mut self, group: &fuse_ir::Group) -> Result<Option<String>> {
        let block = RopeAppendAttention::of_group(self.graph, &group.nodes)
            .ok_or_else(|| self.internal("a rope_append_attention group that is not a decode attention block"))?;
        self.flush_copies()?;
        let unfit = match crate::env::rope_append_on() {
            true => self.run_fused_block(&block)?,
            false => Some("FUSE_ROPE_APPEND=off keeps its members apart".to_string()),
        };
        if unfit.is_some() {
            for member in block.members() {
                self.run_hand_written(member)?;
            }
        }
        if self.describe {
            self.group_path = Some(if unfit.is_some() { MEMBERS_PATH } else { FUSED_PATH }.to_string());
        }
        Ok(unfit)
    }

    /// Launches `block` as one decode kernel when this call's shapes allow it; otherwise launches nothing and
    /// says why not.
    fn run_fused_block(&mut self, m: &RopeAppendAttention) -> Result<Option<String>> {
        self.unreplayable();
        let g = self.graph;
        let rope_args = g.node(m.rope).args.clone();
        let (x, cos, sin) = (
            self.tensor_arg(rope_args[0], "x")?,
            self.tensor_arg(rope_args[1], "cos")?,
            self.tensor_arg(rope_args[2], "sin")?,
        );
        let (k_args, v_args) = (g.node(m.k_append).args.clone(), g.node(m.v_append).args.clone());
        let (k_cache, v_cache) = (self.tensor_arg(k_args[0], "key cache")?, self.tensor_arg(v_args[0], "value cache")?);
        let (v_new, at) = (self.tensor_arg(v_args[1], "new values")?, self.tensor_arg(k_args[2], "position")?);
        let unfit = |why: String| Ok(Some(why));
        let &[b, _, s, d] = x.shape() else { return unfit(format!("rope's input {:?} is not 4-D", x.shape())) };
        if s != 1 {
            return unfit(format!("{s} new positions (one launch takes one)"));
        }
        let dtype = x.dtype();
        if ![&cos, &sin, &k_cache, &v_cache, &v_new].iter().all(|t| t.dtype() == dtype) {
            return unfit("operands of more than one dtype".to_string());
        }
        let &[_, kv_heads, capacity, _] = k_cache.shape() else {
            return unfit(format!("a key cache of shape {:?}", k_cache.shape()));
        };
        let q_heads = self.shape(m.q_view).get(1).copied().unwrap_or(0);
        let shape = AttentionShape { batch: b, q_heads, queries: 1, kv_heads, keys: capacity, d };
        let decode = kv_heads > 0 && q_heads % kv_heads == 0 && attention_launch(shape, self.device.sm_count()).decode;
        if !decode {
            return unfit(format!("{q_heads} query heads over {kv_heads} key/value heads: not the decode kernel's"));
        }
        // The tables' row of the new position ([1, d/2]), or one a sequence ([b, 1, d/2]: a batch at positions
        // of their own, rope's per-batch tables), and one position for all or one a sequence.
        let (Some(cos_batch), Some(sin_batch)) = (table_batch_stride(&cos, b), table_batch_stride(&sin, b)) else {
            return unfit(format!("rotary tables {:?} and {:?} for {b} sequences", cos.shape(), sin.shape()));
        };
        let caches = k_cache.shape() == [b, kv_heads, capacity, d] && v_cache.shape() == k_cache.shape();
        if d % 2 != 0 || x.numel() == 0 || capacity == 0 || !caches {
            return unfit(format!("rope's input {:?} and caches {:?}", x.shape(), k_cache.shape()));
        }
        let at_stride = match at.numel() {
            1 => 0,
            n if n == b && at.shape().len() == 1 => at.strides()[0],
            _ => return unfit(format!("a position of shape {:?} for {b} sequences", at.shape())),
        };
        if v_new.shape() != [b, kv_heads, 1, d] || self.shape(m.k_view).get(1) != Some(&kv_heads) {
            return unfit(format!("new value rows {:?}", v_new.shape()));
        }
        // The rope's output buffer, for its views' addresses only (never written, never read).
        let rope_out = self.allocate(m.rope)?;
        self.values[m.rope.index()] = Some(Value::Tensor(rope_out.clone()));
        let (Some(q_head0), Some(k_head0)) =
            (self.head_offset(&rope_out, m.q_view)?, self.head_offset(&rope_out, m.k_view)?)
        else {
            self.values[m.rope.index()] = None;
            return unfit("views of rope's result that are not whole heads of it".to_string());
        };
        let mut words = Words::default();
        words.address(self.address(&x)?).counts(x.strides()).counts(&[q_head0, k_head0]);
        let column = |t: &Tensor| t.strides()[t.shape().len() - 1];
        words.address(self.address(&cos)?).address(self.address(&sin)?).counts(&[column(&cos), column(&sin)]);
        words.counts(&[cos_batch, sin_batch]);
        words.address(self.address(&v_new)?).counts(v_new.strides());
        let room = capacity - 1;
        words.address(self.address(&at)?).count(at_stride).count(room);
        debug_assert_eq!(words.0.len(), ROPE_APPEND_WORDS);
        // Vector rows: x's heads and v_new's rows as attention reads its caches' (vector_rows: 4-D, unit
        // stride, aligned rows), the tables' row unit-stride and aligned (a lane reads 8 channels of it from
        // a multiple of 8; each sequence's row where they have one each).
        let table_vector = |t: &Tensor, address: u64| rows_on_16_bytes(t, address);
        let vector = vector_rows(&x, self.address(&x)?, d)
            && vector_rows(&v_new, self.address(&v_new)?, d)
            && table_vector(&cos, self.address(&cos)?)
            && table_vector(&sin, self.address(&sin)?)
            && d % 16 == 0;
        // The appends' values are the caches, as after slice_set.
        for (write, cache) in [(m.k_append, &k_cache), (m.v_append, &v_cache)] {
            self.addresses[write.index()] = self.address(cache)?;
            self.values[write.index()] = Some(Value::Tensor(cache.clone()));
        }
        self.run_attention_node(m.attention, Some(FusedRope { words, vector }))?;
        Ok(None)
    }

    /// Which head of `rope_out` ([b, heads, 1, d], dense) the view `view` of it starts at, when it is whole
    /// heads of it ([b, n, 1, d] with its strides); `None` otherwise.
    fn head_offset(&self, rope_out: &Tensor, view: NodeId) -> Result<Option<usize>> {
        let Value::Tensor(t) = self.resolve(view)? else { return Ok(None) };
        let strides = dense_strides(rope_out.shape());
        let element = rope_out.dtype().size_bytes() as u64;
        let Some(offset) = self.address(&t)?.checked_sub(self.address(rope_out)?).map(|bytes| bytes / element) else {
            return Ok(None);
        };
        let whole =
            t.shape().len() == 4 && t.shape()[0] == rope_out.shape()[0] && t.shape()[2..] == rope_out.shape()[2..];
        let same_strides = t.strides() == strides.as_slice() || t.shape()[0] == 1 && t.strides()[1..] == strides[1..];
        if !whole || !same_strides || offset % strides[1] as u64 != 0 {
            return Ok(None);
        }
        Ok(Some((offset / strides[1] as u64) as usize))
    }
}

/// The elements from one sequence's row of rotary table `t` to the next's: 0 for one row shared by the batch
/// (`[1, d/2]`), its batch stride for one row a sequence (`[b, 1, d/2]`); `None` for any other shape.
fn table_batch_stride(t: &Tensor, b: usize) -> Option<usize> {
    match t.shape() {
        [1, _] => Some(0),
        [n, 1, _] if *n == b => Some(if b == 1 { 0 } else { t.strides()[0] }),
        _ => None,
    }
}
