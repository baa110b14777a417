//! The decode attention block as one group: `rope`, the key and value cache appends (`slice_set`) and
//! `attention_len` over the caches, found on the graph's structure alone. The planner makes it a
//! `RopeAppendAttention` group, `Plan::verify` checks a group of that kind against it, and the executors
//! read the members from it (the GPU runs them as one launch of the decode attention kernel when the call's
//! shapes allow it, else in order; the CPU in order).
//!
//! The pattern, as a decoder writes a step:
//!
//! ```text
//! r = rope(x, cos, sin)                        read only through two views, each read once:
//! k_cache' = k_cache.slice_set(r.narrow(..), 2, at)   the new key heads, at a position held in a tensor
//! v_cache' = v_cache.slice_set(v_new, 2, at)          the new value rows, the same position node
//! a = attention_len(r.narrow(..), k_cache', v_cache', lens, scale, causal)
//! ```
//!
//! Nothing else reads `r` (it is not returned either), and the two caches are distinct. Whether a call can
//! take the fused kernel (one new position, whole heads, one dtype) is the executor's run-time question.

use super::is_free;
use super::view_source;
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::view::ViewOp;
use crate::ModelOp;

/// The nodes of one decode attention block (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeAppendAttention {
    pub rope: NodeId,
    /// The view of rope's result that attention reads as its queries.
    pub q_view: NodeId,
    /// The view of rope's result appended to the key cache (the new key heads).
    pub k_view: NodeId,
    /// The `slice_set`s of the new key and value rows into their caches.
    pub k_append: NodeId,
    pub v_append: NodeId,
    /// The `attention_len` over the two appended caches.
    pub attention: NodeId,
}

/// Whether `op` is a `slice_set` along axis 2 (of a 4-D cache) at a position held in a tensor.
fn appends_at_axis_2(op: Op) -> bool {
    matches!(op, Op::View(ViewOp::SliceSet { axis: 2 | -2, at_tensor: true }))
}

impl RopeAppendAttention {
    /// The block whose rope is `rope`, when the graph has the pattern around it. `users`: `g.users()`.
    pub fn find(g: &Graph, users: &[Vec<NodeId>], rope: NodeId) -> Option<Self> {
        if g.op(rope) != Op::Model(ModelOp::Rope) || g.outputs.contains(&rope) {
            return None;
        }
        let &[first, second] = users.get(rope.index())?.as_slice() else { return None };
        // Each view: of rope itself, not returned, read by exactly one node.
        let reader = |view: NodeId| match users[view.index()].as_slice() {
            &[u] if is_free(g.op(view)) && view_source(g, view) == Some(rope) && !g.outputs.contains(&view) => Some(u),
            _ => None,
        };
        let (mut queries, mut keys) = (None, None);
        for view in [first, second] {
            let user = reader(view)?;
            let args = &g.node(user).args;
            match g.op(user) {
                Op::Model(ModelOp::Attention { with_lens: true, .. })
                    if args[0] == view && !args[1..].contains(&view) =>
                {
                    queries = Some((view, user))
                }
                op if appends_at_axis_2(op) && args[1] == view && args[0] != view => keys = Some((view, user)),
                _ => return None,
            }
        }
        let ((q_view, attention), (k_view, k_append)) = (queries?, keys?);
        let args = &g.node(attention).args;
        let v_append = args[2];
        let (k_args, v_args) = (&g.node(k_append).args, &g.node(v_append).args);
        let fits = args[1] == k_append
            && v_append != k_append
            && appends_at_axis_2(g.op(v_append))
            && v_args[2] == k_args[2]
            && v_args[0] != k_args[0];
        fits.then_some(RopeAppendAttention { rope, q_view, k_view, k_append, v_append, attention })
    }

    /// The block a group's `nodes` are, when they are exactly one block's members.
    pub fn of_group(g: &Graph, nodes: &[NodeId]) -> Option<Self> {
        let &rope = nodes.iter().find(|&&n| g.op(n) == Op::Model(ModelOp::Rope))?;
        // `find` reads the users of rope and of the views of it.
        let block = Self::find(g, &g.users_where(|id| id == rope || g.node(id).args.first() == Some(&rope)), rope)?;
        let mut members = block.members();
        members.sort();
        (members.as_slice() == nodes).then_some(block)
    }

    /// The nodes the group computes: rope, the two appends, attention (in that order: an order they can
    /// run in, one by one).
    pub fn members(&self) -> [NodeId; 4] {
        [self.rope, self.k_append, self.v_append, self.attention]
    }

    /// The views the group reads inside itself (of rope's result, which is never written when the block
    /// runs fused): they are no input of the group and need no memory of their own.
    pub fn inner_views(&self) -> [NodeId; 2] {
        [self.q_view, self.k_view]
    }
}
