//! The planner's output: the graph cut into groups, each one kernel (one pass over memory).
//!
//! Leaves (arguments, literals) and views (`.t()`) belong to no group: literals are inlined where they are
//! used and a view is read through strides by whatever group uses it. Every other node is computed by
//! exactly one group; a value crosses groups only through memory, written once. (A rope_append_attention
//! group also reads two views of its own rope's result: see `rope_attention.rs`.)

mod fuse;
mod products;
mod report;
mod rope_attention;
mod text;
pub use fuse::MAX_PRODUCTS;
pub use products::Product;
pub use report::*;
pub use rope_attention::RopeAppendAttention;

use crate::graph::{Graph, InputKind, NodeId};
use crate::op::Op;
use crate::view::ViewOp;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// Elementwise work with broadcasting.
    Pointwise,
    /// Last-axis reductions with the pointwise work before and after them (rms_norm, softmax).
    RowReduce,
    /// One matmul with a prologue on its left operand (pointwise work, or a row reduction such as rms_norm)
    /// and a pointwise epilogue on its product.
    Gemm,
    /// Two matmuls with the same left operand, their products meeting in one pointwise epilogue.
    DualGemm,
    /// Two or more matmuls with the same left operand (separate q, k and v weights), each product with a
    /// pointwise epilogue of its own and the prologue shared: one kernel computes them all, its blocks
    /// taking one product each ("horizontal" fusion). [`Group::products`] splits it.
    MultiGemm,
    /// One model op (`embedding`, `argmax`, `rope`, `attention`) alone.
    Model,
    /// A decode step's attention block: `rope`, the two cache appends of its new key and value rows and
    /// `attention_len` over the caches ([`RopeAppendAttention`]). The GPU runs it as one launch of the
    /// decode attention kernel when the call's shapes allow it, else its members in order.
    RopeAppendAttention,
}

impl GroupKind {
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Pointwise => "pointwise",
            GroupKind::RowReduce => "rowreduce",
            GroupKind::Gemm => "gemm",
            GroupKind::DualGemm => "dualgemm",
            GroupKind::MultiGemm => "multigemm",
            GroupKind::Model => "model",
            GroupKind::RopeAppendAttention => "rope_append_attention",
        }
    }

    pub const ALL: [GroupKind; 7] = [
        GroupKind::Pointwise,
        GroupKind::RowReduce,
        GroupKind::Gemm,
        GroupKind::DualGemm,
        GroupKind::MultiGemm,
        GroupKind::Model,
        GroupKind::RopeAppendAttention,
    ];
}

#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub kind: GroupKind,
    /// Every node this group computes, in topological order.
    pub nodes: Vec<NodeId>,
    /// The matmuls (one for Gemm, two for DualGemm, two or more for MultiGemm, none otherwise), in graph
    /// order.
    pub matmuls: Vec<NodeId>,
    /// The nodes that compute the matmuls' shared left operand (a subset of `nodes`): pointwise work, and
    /// last-axis reductions over the operand's rows (rms_norm's mean of squares).
    pub prologue: Vec<NodeId>,
    /// Values this group reads from memory: arguments, views, or outputs of earlier groups.
    pub inputs: Vec<NodeId>,
    /// Nodes of this group written to memory (used by a later group, or returned).
    pub outputs: Vec<NodeId>,
}

impl Group {
    /// The group that computes node `id` alone (a computed node, not an argument, literal or view): what
    /// the unfused plan is made of, and what a backend runs a group as, node by node, when a call's shapes
    /// do not fit the group's one pass.
    pub fn single(g: &Graph, id: NodeId) -> Group {
        let n = g.node(id);
        let mut inputs: Vec<NodeId> = Vec::new();
        for &a in &n.args {
            if !matches!(g.op(a), Op::Const(_)) && !inputs.contains(&a) {
                inputs.push(a);
            }
        }
        Group {
            kind: kind_of_single(n.op),
            nodes: vec![id],
            matmuls: if n.op == Op::MatMul { vec![id] } else { vec![] },
            prologue: vec![],
            inputs,
            outputs: vec![id],
        }
    }

    /// The nodes after the matmuls (everything that is neither prologue nor matmul).
    pub fn epilogue(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().copied().filter(|n| !self.matmuls.contains(n) && !self.prologue.contains(n))
    }
}

/// Groups in an order where every group runs after the groups it reads from.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    pub groups: Vec<Group>,
}

thread_local! {
    static FUSED_PLANS_MADE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times [`Plan::fused`] ran on this thread: tests show with it that a `#[fuse]` function's call
/// does not plan again (the macro planned at build time).
pub fn fused_plans_made_on_this_thread() -> usize {
    FUSED_PLANS_MADE.with(|n| n.get())
}

/// Nodes that need no group: arguments, literals, views (`.t()`, `reshape`, `transpose`, `permute`,
/// `narrow`: read through strides by the groups that use them) and sizes (`x.dim(i)`). `cat` and
/// `contiguous` compute.
pub fn is_free(op: Op) -> bool {
    op.is_leaf() || op == Op::Transpose || matches!(op, Op::View(v) if !v.is_copy())
}

/// Values known on the host before anything runs: literals, scalar arguments, sizes (`x.dim(i)`) and the
/// pointwise arithmetic of those alone (`x.dim(0) * x.dim(1)`, `n / 2`, `(d as f32).sqrt()`). Views read them
/// as sizes and kernels as scalar arguments; no group computes them.
pub fn host_scalars(g: &Graph) -> Vec<bool> {
    let mut host = vec![false; g.nodes.len()];
    for id in g.ids() {
        host[id.index()] = match g.op(id) {
            Op::Const(_) | Op::View(ViewOp::Dim { .. }) => true,
            Op::Input(k) => {
                g.inputs.get(k as usize).is_some_and(|i| matches!(i.kind, InputKind::Scalar | InputKind::ScalarField))
            }
            Op::Unary(_) | Op::Binary(_) | Op::Where => g.node(id).args.iter().all(|a| host[a.index()]),
            _ => false,
        };
    }
    host
}

/// The nodes no group computes: those of free ops (`is_free`) and the host scalars (`host`, from
/// [`host_scalars`]) that are not returned.
pub fn free_nodes(g: &Graph, host: &[bool]) -> Vec<bool> {
    g.ids().map(|id| is_free(g.op(id)) || (host[id.index()] && !g.outputs.contains(&id))).collect()
}

/// For a view (`.t()` or a free view op), the value whose memory it reads; `None` for anything else,
/// `x.dim(i)` included (a size, not a view).
pub fn view_source(g: &Graph, id: NodeId) -> Option<NodeId> {
    match g.op(id) {
        Op::Transpose => Some(g.node(id).args[0]),
        Op::View(ViewOp::Dim { .. }) => None,
        Op::View(v) if !v.is_copy() => Some(g.node(id).args[0]),
        _ => None,
    }
}

/// `cat` and `contiguous`: each a group of its own, which nothing joins (a copy, not pointwise work).
pub fn is_copy(op: Op) -> bool {
    matches!(op, Op::View(v) if v.is_copy())
}

fn kind_of_single(op: Op) -> GroupKind {
    match op {
        Op::MatMul => GroupKind::Gemm,
        Op::Reduce(_) => GroupKind::RowReduce,
        Op::Model(_) => GroupKind::Model,
        _ => GroupKind::Pointwise,
    }
}

impl Plan {
    /// One group per computed node: the in-house baseline (one kernel or library call per op).
    pub fn unfused(g: &Graph) -> Plan {
        let free = free_nodes(g, &host_scalars(g));
        Plan { groups: g.ids().filter(|&id| !free[id.index()]).map(|id| Group::single(g, id)).collect() }
    }

    /// The fused plan: see `plan/fuse.rs` for the rules.
    pub fn fused(g: &Graph) -> Plan {
        FUSED_PLANS_MADE.with(|n| n.set(n.get() + 1));
        fuse::plan(g)
    }

    /// Index of the group computing each node (`None` for free nodes).
    pub fn owner(&self, g: &Graph) -> Vec<Option<usize>> {
        let mut owner = vec![None; g.nodes.len()];
        for (i, grp) in self.groups.iter().enumerate() {
            for n in &grp.nodes {
                owner[n.index()] = Some(i);
            }
        }
        owner
    }

    /// Checks that the plan computes the graph: each computed node in exactly one group, groups in
    /// dependency order, every value that crosses groups listed as an output of its group and an input of
    /// its reader, views taken of values in memory.
    pub fn verify(&self, g: &Graph) -> Result<(), String> {
        let mut owner: Vec<Option<usize>> = vec![None; g.nodes.len()];
        let host = host_scalars(g);
        let free = free_nodes(g, &host);
        // Views a group reads of its own values (a rope_append_attention group's), with that group.
        let mut inner_views: Vec<(NodeId, usize)> = Vec::new();
        for (i, grp) in self.groups.iter().enumerate() {
            for &n in &grp.nodes {
                if free[n.index()] {
                    return Err(format!("group {i} computes free node %{}", n.0));
                }
                if let Some(j) = owner[n.index()] {
                    return Err(format!("%{} is in groups {j} and {i}", n.0));
                }
                owner[n.index()] = Some(i);
            }
            for w in grp.nodes.windows(2) {
                if w[0] >= w[1] {
                    return Err(format!("group {i}: nodes not in topological order"));
                }
            }
            let want = match grp.kind {
                GroupKind::Gemm => 1..=1,
                GroupKind::DualGemm => 2..=2,
                GroupKind::MultiGemm => 2..=usize::MAX,
                _ => 0..=0,
            };
            let mm: Vec<NodeId> = grp.nodes.iter().copied().filter(|&n| g.op(n) == Op::MatMul).collect();
            if !want.contains(&mm.len()) || mm != grp.matmuls {
                return Err(format!("group {i} ({}) has matmuls {:?}", grp.kind.name(), mm));
            }
            if grp.kind == GroupKind::MultiGemm {
                grp.check_products(g).map_err(|e| format!("group {i} (multigemm): {e}"))?;
            }
            if grp.kind == GroupKind::Model && !(grp.nodes.len() == 1 && matches!(g.op(grp.nodes[0]), Op::Model(_))) {
                return Err(format!("group {i} (model) must compute one model op alone"));
            }
            if grp.kind == GroupKind::RopeAppendAttention {
                let block = RopeAppendAttention::of_group(g, &grp.nodes).ok_or_else(|| {
                    format!("group {i} (rope_append_attention) is not a rope, its two cache appends and attention")
                })?;
                inner_views.extend(block.inner_views().map(|v| (v, i)));
            }
            let model_group = matches!(grp.kind, GroupKind::Model | GroupKind::RopeAppendAttention);
            if let Some(&m) = grp.nodes.iter().find(|&&n| matches!(g.op(n), Op::Model(_)) && !model_group) {
                return Err(format!("group {i} ({}) computes model op %{}, which runs alone", grp.kind.name(), m.0));
            }
            let row_work = |op: &Op| op.is_pointwise() || matches!(op, Op::Reduce(_));
            if !grp.prologue.iter().all(|p| grp.nodes.contains(p) && row_work(&g.op(*p))) {
                return Err(format!("group {i}: prologue must be pointwise or reduction nodes of the group"));
            }
        }
        if let Some(id) = g.ids().find(|&id| !free[id.index()] && owner[id.index()].is_none()) {
            return Err(format!("%{} ({}) is computed by no group", id.0, g.op(id).name()));
        }
        // A value is in memory if it is an argument, a view of a value in memory, or a group output; a size
        // (`x.dim(i)`) and the arithmetic of host scalars are known on the host.
        let in_memory = |id: NodeId, upto: usize| -> bool {
            let mut id = id;
            loop {
                if let Some(source) = view_source(g, id) {
                    id = source;
                    continue;
                }
                if host[id.index()] && free[id.index()] && !matches!(g.op(id), Op::Const(_)) {
                    return true;
                }
                match g.op(id) {
                    Op::Input(_) | Op::View(ViewOp::Dim { .. }) => return true,
                    Op::Const(_) => return false,
                    _ => {
                        return owner[id.index()]
                            .map(|o| o < upto && self.groups[o].outputs.contains(&id))
                            .unwrap_or(false)
                    }
                }
            }
        };
        for (i, grp) in self.groups.iter().enumerate() {
            for &inp in &grp.inputs {
                if !in_memory(inp, i) {
                    return Err(format!("group {i} reads %{}, which no earlier group writes", inp.0));
                }
            }
            for &n in &grp.nodes {
                for &a in &g.node(n).args {
                    let local = owner[a.index()] == Some(i) || inner_views.contains(&(a, i));
                    let constant = matches!(g.op(a), Op::Const(_));
                    if !local && !constant && !grp.inputs.contains(&a) {
                        return Err(format!("group {i}: %{} uses %{} but does not list it as an input", n.0, a.0));
                    }
                }
            }
            for &o in &grp.outputs {
                if owner[o.index()] != Some(i) {
                    return Err(format!("group {i} lists output %{} it does not compute", o.0));
                }
            }
        }
        for &o in &g.outputs {
            if !matches!(g.op(o), Op::Const(_)) && !in_memory(o, self.groups.len()) {
                return Err(format!("returned value %{} is never written", o.0));
            }
        }
        for id in g.ids().filter(|&id| !inner_views.iter().any(|&(v, _)| v == id)) {
            let Some(a) = view_source(g, id) else { continue };
            if !in_memory(a, self.groups.len()) {
                return Err(format!("view %{} of %{}, which is not in memory", id.0, a.0));
            }
        }
        Ok(())
    }
}
