//! A decode step's rotary embedding, its two cache appends and attention over the cache in one launch of
//! the decode attention kernel (`attention_decode.cu`, its "fused" mode), where the plan has them as four
//! groups of one node each (rope, two slice_sets, attention: three launches once the appends share one).
//!
//! The pattern, matched on the graph when the executor reaches a rope group:
//! `r = rope(x, cos, sin)`, read only through two views: one the query operand of an `attention_len`, the
//! other the source of a `slice_set` (axis 2, position in a tensor) into that attention's key cache; the
//! value cache a `slice_set` of the same position; and the plan's next groups are exactly those three. At
//! run time it also needs one new position (`x` [b, heads, 1, d]), the decode kernel's geometry, one dtype
//! throughout, and the two views to be whole heads of `r`. Otherwise (a prefill, say) the groups run one
//! by one as before. Nothing reads `r` itself: its buffer is allocated (its views give the heads) but never
//! written.

use super::attention::vector_rows;
use super::model::Words;
use super::Executor;
use crate::call::Value;
use crate::{Result, Tensor};
use fuse_ir::codegen::{attention_launch, AttentionShape};
use fuse_ir::plan::{is_free, view_source};
use fuse_ir::view::{dense_strides, ViewOp};
use fuse_ir::{ModelOp, NodeId, Op};

/// The nodes of one match.
pub(super) struct RopeAppend {
    rope: NodeId,
    q_view: NodeId,
    k_view: NodeId,
    k_write: NodeId,
    v_write: NodeId,
    attention: NodeId,
}

/// A fused rope and appends for the decode kernel: its words, and whether rope's input rows, the tables'
/// row and the new value rows may be read as 16-byte vectors (the kernel then ropes in registers).
pub(super) struct FusedRope {
    pub words: Words,
    pub vector: bool,
}

/// The words the decode kernel reads after its own for the fused rope and appends (see its
/// `FuseAttentionDecodeArgs`), or as many zeros for plain attention.
pub(super) const ROPE_APPEND_WORDS: usize = 19;

/// Whether `id` is a slice_set along axis 2 of a 4-D cache with its position in a tensor.
fn appends_at_axis_2(op: Op) -> bool {
    matches!(op, Op::View(ViewOp::SliceSet { axis: 2 | -2, at_tensor: true }))
}

impl Executor<'_> {
    /// The match whose rope is the one node of group `index`, if the graph and plan have it.
    pub(super) fn rope_append_match(&self, index: usize, rope: NodeId) -> Option<RopeAppend> {
        let g = self.graph;
        if g.outputs.contains(&rope) {
            return None;
        }
        let users = g.users();
        let only_user = |n: NodeId| match users[n.index()].as_slice() {
            &[u] if !g.outputs.contains(&n) => Some(u),
            _ => None,
        };
        let (mut q, mut k) = (None, None);
        for &view in &users[rope.index()] {
            if !is_free(g.op(view)) || view_source(g, view) != Some(rope) {
                return None;
            }
            let user = only_user(view)?;
            let args = &g.node(user).args;
            match g.op(user) {
                Op::Model(ModelOp::Attention { with_lens: true, .. })
                    if args[0] == view && !args[1..].contains(&view) =>
                {
                    q = Some((view, user))
                }
                op if appends_at_axis_2(op) && args[1] == view && args[0] != view => k = Some((view, user)),
                _ => return None,
            }
        }
        let ((q_view, attention), (k_view, k_write)) = (q?, k?);
        let args = &g.node(attention).args;
        let v_write = args[2];
        let same_position = g.node(v_write).args.get(2) == g.node(k_write).args.get(2);
        if args[1] != k_write || !appends_at_axis_2(g.op(v_write)) || !same_position || users[rope.index()].len() != 2 {
            return None;
        }
        // The plan's next three groups are the appends and the attention (the copies are not launched
        // before it), in any order.
        let next: Vec<NodeId> = self
            .plan
            .groups
            .get(index + 1..index + 4)?
            .iter()
            .filter_map(|grp| match grp.nodes[..] {
                [node] => Some(node),
                _ => None,
            })
            .collect();
        let all_there = [k_write, v_write, attention].iter().all(|n| next.contains(n));
        all_there.then_some(RopeAppend { rope, q_view, k_view, k_write, v_write, attention })
    }

    /// Runs a match in one launch when this call's shapes allow it (returns false, having launched nothing,
    /// when they do not: the groups then run one by one). Marks the three groups after `index` done.
    pub(super) fn run_rope_append(&mut self, index: usize, m: &RopeAppend) -> Result<bool> {
        self.unreplayable();
        let g = self.graph;
        let rope_args = g.node(m.rope).args.clone();
        let (x, cos, sin) = (
            self.tensor_arg(rope_args[0], "x")?,
            self.tensor_arg(rope_args[1], "cos")?,
            self.tensor_arg(rope_args[2], "sin")?,
        );
        let (k_args, v_args) = (g.node(m.k_write).args.clone(), g.node(m.v_write).args.clone());
        let (k_cache, v_cache) = (self.tensor_arg(k_args[0], "key cache")?, self.tensor_arg(v_args[0], "value cache")?);
        let (v_new, at) = (self.tensor_arg(v_args[1], "new values")?, self.tensor_arg(k_args[2], "position")?);
        let dtype = x.dtype();
        let one_dtype = [&cos, &sin, &k_cache, &v_cache, &v_new].iter().all(|t| t.dtype() == dtype);
        let (b, s, d) = match *x.shape() {
            [b, _, s, d] => (b, s, d),
            _ => return Ok(false),
        };
        let (kv_heads, capacity) = match *k_cache.shape() {
            [_, kv_heads, capacity, _] => (kv_heads, capacity),
            _ => return Ok(false),
        };
        let q_heads = self.shape(m.q_view).get(1).copied().unwrap_or(0);
        let shape = AttentionShape { batch: b, q_heads, queries: 1, kv_heads, keys: capacity, d };
        let decode = kv_heads > 0 && q_heads % kv_heads == 0 && attention_launch(shape, self.device.sm_count()).decode;
        let tables = cos.shape().len() == 2 && sin.shape().len() == 2;
        let fits = one_dtype && s == 1 && d % 2 == 0 && x.numel() > 0 && tables && decode && capacity > 0;
        let caches = k_cache.shape() == [b, kv_heads, capacity, d] && v_cache.shape() == k_cache.shape();
        if !fits
            || !caches
            || at.numel() != 1
            || v_new.shape() != [b, kv_heads, 1, d]
            || self.shape(m.k_view).get(1) != Some(&kv_heads)
        {
            return Ok(false);
        }
        // The rope's output buffer, for its views' addresses only (never written, never read).
        let rope_out = self.allocate(m.rope)?;
        self.values[m.rope.index()] = Some(Value::Tensor(rope_out.clone()));
        let (Some(q_head0), Some(k_head0)) =
            (self.head_offset(&rope_out, m.q_view)?, self.head_offset(&rope_out, m.k_view)?)
        else {
            self.values[m.rope.index()] = None;
            return Ok(false);
        };
        let mut words = Words::default();
        words.address(self.address(&x)?).counts(x.strides()).counts(&[q_head0, k_head0]);
        words.address(self.address(&cos)?).address(self.address(&sin)?).counts(&[cos.strides()[1], sin.strides()[1]]);
        words.address(self.address(&v_new)?).counts(v_new.strides());
        let room = capacity - 1;
        words.address(self.address(&at)?).count(room).address(self.device.fault_address()?);
        debug_assert_eq!(words.0.len(), ROPE_APPEND_WORDS);
        // Vector rows: x's heads and v_new's rows as attention reads its caches' (vector_rows: 4-D, unit
        // stride, aligned rows), the tables' row unit-stride and aligned (a lane reads 8 channels of it from
        // a multiple of 8).
        let table_vector = |t: &Tensor, address: u64| t.strides()[1] == 1 && address % 16 == 0;
        let vector = vector_rows(&x, self.address(&x)?, d)
            && vector_rows(&v_new, self.address(&v_new)?, d)
            && table_vector(&cos, self.address(&cos)?)
            && table_vector(&sin, self.address(&sin)?)
            && d % 16 == 0;
        // The appends' values are the caches, as after slice_set.
        for (write, cache) in [(m.k_write, &k_cache), (m.v_write, &v_cache)] {
            self.addresses[write.index()] = self.address(cache)?;
            self.values[write.index()] = Some(Value::Tensor(cache.clone()));
        }
        self.run_attention_node(m.attention, Some(FusedRope { words, vector }))?;
        self.done_groups.extend(index + 1..index + 4);
        Ok(true)
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
