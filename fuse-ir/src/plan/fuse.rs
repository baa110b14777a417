//! The fusion rules: greedy producer->consumer fusion in node (topological) order, decided on structure
//! alone (shapes are known only at run time, where each group checks its preconditions and falls back).
//!
//! - A pointwise node joins a producer's group: a Gemm/DualGemm as epilogue (preferred: the product then
//!   never reaches memory), else a RowReduce or Pointwise group. Pointwise producer groups read only by this
//!   node are inlined into a Pointwise/RowReduce group rather than written.
//! - A node reading the products of two single-matmul groups with the same left operand merges them into a
//!   DualGemm and joins it (`silu(x Wg) * (x Wu)`).
//! - After that pass, single-matmul Gemm groups with the same left operand that do not read each other
//!   (separate q, k and v weights) merge into one MultiGemm group, up to [`MAX_PRODUCTS`]; the work on the
//!   shared left operand then becomes its prologue.
//! - A reduction joins a Pointwise/RowReduce producer (which becomes RowReduce); never a gemm epilogue.
//! - A model op (embedding, argmax, rope, attention) is a Model group of its own: nothing joins it, and it
//!   joins nothing (its kernels are whole loops of their own, not pointwise expressions). The one exception
//!   is a decode step's attention block: a rope, the two cache appends of its new key and value rows and the
//!   attention over those caches (`rope_attention.rs`) become one RopeAppendAttention group, after the
//!   greedy pass (each member is a group of one until then).
//! - A matmul starts a Gemm group; a Pointwise or RowReduce group that computes only its left operand becomes
//!   its prologue (rms_norm -> matmul: the GEMM templates can then normalise rows as they load them, and the
//!   normalised rows need not reach memory). The right operand always comes from memory.
//!
//! - `cat` and `contiguous` are a Pointwise group each that nothing joins or inlines (a copy the user asked
//!   for; the backends run it as a copy, not as pointwise code).
//!
//! Every join or merge is refused if the group would read a value that depends on the group itself (a
//! cycle between kernels). Values cross groups through memory; free nodes (leaves, views) are in no group.

use super::{free_nodes, host_scalars, is_copy, view_source, Group, GroupKind, Plan, RopeAppendAttention};
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::ModelOp;

pub(super) fn plan(g: &Graph) -> Plan {
    let mut planner = Planner::new(g);
    let free = free_nodes(g, &host_scalars(g));
    for id in g.ids() {
        match g.op(id) {
            _ if free[id.index()] => {}
            op if is_copy(op) => {
                planner.start(GroupKind::Pointwise, id);
            }
            Op::MatMul => planner.place_matmul(id),
            Op::Reduce(_) => planner.place_reduce(id),
            Op::Model(_) => {
                planner.start(GroupKind::Model, id);
            }
            _ => planner.place_pointwise(id),
        }
    }
    planner.merge_horizontal();
    for rope in g.ids().filter(|&id| g.op(id) == Op::Model(ModelOp::Rope)) {
        planner.try_rope_append_attention(rope);
    }
    planner.finish()
}

/// The most matmuls one MultiGemm group computes (the GEMM templates' product table).
pub const MAX_PRODUCTS: usize = 8;

/// A group under construction. Groups merged into another are left empty.
struct Draft {
    kind: GroupKind,
    nodes: Vec<NodeId>,
    matmuls: Vec<NodeId>,
    prologue: Vec<NodeId>,
}

struct Planner<'g> {
    g: &'g Graph,
    users: Vec<Vec<NodeId>>,
    returned: Vec<bool>,
    /// The draft computing each node so far.
    owner: Vec<Option<usize>>,
    drafts: Vec<Draft>,
}

impl<'g> Planner<'g> {
    fn new(g: &'g Graph) -> Self {
        let mut returned = vec![false; g.nodes.len()];
        for o in &g.outputs {
            returned[o.index()] = true;
        }
        Planner { g, users: g.users(), returned, owner: vec![None; g.nodes.len()], drafts: Vec::new() }
    }

    /// A `cat`/`contiguous` group: nothing joins it, and it joins nothing.
    fn sealed(&self, group: usize) -> bool {
        self.drafts[group].nodes.iter().any(|&n| is_copy(self.g.op(n)))
    }

    fn args(&self, id: NodeId) -> &'g [NodeId] {
        &self.g.node(id).args
    }

    fn start(&mut self, kind: GroupKind, id: NodeId) -> usize {
        let index = self.drafts.len();
        let matmuls = if kind == GroupKind::Gemm { vec![id] } else { vec![] };
        self.drafts.push(Draft { kind, nodes: vec![id], matmuls, prologue: vec![] });
        self.owner[id.index()] = Some(index);
        index
    }

    fn join(&mut self, group: usize, id: NodeId) {
        self.drafts[group].nodes.push(id);
        self.owner[id.index()] = Some(group);
    }

    /// Moves every node of `from` into `into` (kinds are the caller's business).
    fn merge(&mut self, into: usize, from: usize) {
        let moved = std::mem::take(&mut self.drafts[from].nodes);
        for &n in &moved {
            self.owner[n.index()] = Some(into);
        }
        let matmuls = std::mem::take(&mut self.drafts[from].matmuls);
        let prologue = std::mem::take(&mut self.drafts[from].prologue);
        let target = &mut self.drafts[into];
        target.nodes.extend(moved);
        target.nodes.sort();
        target.matmuls.extend(matmuls);
        target.matmuls.sort();
        target.prologue.extend(prologue);
        target.prologue.sort();
    }

    fn place_matmul(&mut self, id: NodeId) {
        let group = self.start(GroupKind::Gemm, id);
        self.try_absorb_prologue(group);
    }

    fn place_reduce(&mut self, id: NodeId) {
        let input = self.args(id)[0];
        if let Some(producer) = self.owner[input.index()] {
            let kind = self.drafts[producer].kind;
            if matches!(kind, GroupKind::Pointwise | GroupKind::RowReduce)
                && !self.sealed(producer)
                && self.acyclic(&[producer], Some(id))
            {
                self.join(producer, id);
                self.drafts[producer].kind = GroupKind::RowReduce;
                return;
            }
        }
        self.start(GroupKind::RowReduce, id);
    }

    fn place_pointwise(&mut self, id: NodeId) {
        let producers = self.producers(id);
        if self.try_dual_gemm(id, &producers) {
            return;
        }
        let rank = |kind: GroupKind| match kind {
            GroupKind::Gemm | GroupKind::DualGemm | GroupKind::MultiGemm => 0,
            GroupKind::RowReduce => 1,
            GroupKind::Pointwise | GroupKind::Model | GroupKind::RopeAppendAttention => 2,
        };
        let mut candidates: Vec<usize> = producers.iter().copied().filter(|&p| !self.sealed(p)).collect();
        candidates.retain(|&c| !matches!(self.drafts[c].kind, GroupKind::Model | GroupKind::RopeAppendAttention));
        candidates.sort_by_key(|&c| rank(self.drafts[c].kind)); // stable: ties keep argument order
        for group in candidates {
            let reads_prologue = self.args(id).iter().any(|a| self.drafts[group].prologue.contains(a));
            if !reads_prologue && self.acyclic(&[group], Some(id)) {
                self.join(group, id);
                self.inline_producers(group, id, &producers);
                return;
            }
        }
        let group = self.start(GroupKind::Pointwise, id);
        self.inline_producers(group, id, &producers);
    }

    /// Distinct groups computing `id`'s arguments, in argument order.
    fn producers(&self, id: NodeId) -> Vec<usize> {
        let mut groups = Vec::new();
        for a in self.args(id) {
            if let Some(o) = self.owner[a.index()] {
                if !groups.contains(&o) {
                    groups.push(o);
                }
            }
        }
        groups
    }

    /// `id` reads two single-matmul Gemm groups with the same left operand: merge them into one DualGemm
    /// and make `id` its epilogue. Returns whether it did.
    fn try_dual_gemm(&mut self, id: NodeId, producers: &[usize]) -> bool {
        let single_gemm = |p: usize| {
            let d = &self.drafts[p];
            (d.kind == GroupKind::Gemm && d.matmuls.len() == 1).then(|| d.matmuls[0])
        };
        for (i, &first) in producers.iter().enumerate() {
            for &second in &producers[i + 1..] {
                let (Some(mm1), Some(mm2)) = (single_gemm(first), single_gemm(second)) else { continue };
                let shared_lhs = self.args(mm1)[0] == self.args(mm2)[0];
                // Neither may read the other: a right operand must stay in memory, and a value read through
                // another group would form a cycle once both are one kernel.
                let independent = !self.group_depends_on(first, second) && !self.group_depends_on(second, first);
                if shared_lhs && independent && self.acyclic(&[first, second], Some(id)) {
                    let (into, from) = (first.min(second), first.max(second));
                    self.merge(into, from);
                    self.drafts[into].kind = GroupKind::DualGemm;
                    self.join(into, id);
                    self.try_absorb_prologue(into);
                    return true;
                }
            }
        }
        false
    }

    /// Merges single-matmul Gemm groups of one left operand into MultiGemm groups (in draft order, each
    /// with the later ones that neither read it nor are read by it, nor would close a cycle), then gives
    /// each merged group the prologue it can now own.
    fn merge_horizontal(&mut self) {
        let single = |drafts: &[Draft], d: usize| {
            (drafts[d].kind == GroupKind::Gemm && drafts[d].matmuls.len() == 1).then(|| drafts[d].matmuls[0])
        };
        for d in 0..self.drafts.len() {
            let Some(first) = single(&self.drafts, d) else { continue };
            let lhs = self.args(first)[0];
            for other in d + 1..self.drafts.len() {
                if self.drafts[d].matmuls.len() >= MAX_PRODUCTS {
                    break;
                }
                let Some(mm) = single(&self.drafts, other) else { continue };
                let independent = !self.group_depends_on(d, other) && !self.group_depends_on(other, d);
                if self.args(mm)[0] == lhs && independent && self.acyclic(&[d, other], None) {
                    self.merge(d, other);
                    self.drafts[d].kind = GroupKind::MultiGemm;
                }
            }
            if self.drafts[d].kind == GroupKind::MultiGemm {
                self.try_absorb_prologue(d);
            }
        }
    }

    /// Inlines into `group` the Pointwise producer groups of `id` whose values nobody else reads, so they
    /// are computed in place instead of written and read back. Only into groups without matmuls: an
    /// epilogue consumes the product.
    fn inline_producers(&mut self, group: usize, id: NodeId, producers: &[usize]) {
        if !matches!(self.drafts[group].kind, GroupKind::Pointwise | GroupKind::RowReduce) {
            return;
        }
        for &p in producers {
            if p == group || self.drafts[p].kind != GroupKind::Pointwise || self.sealed(p) {
                continue;
            }
            let private = self.drafts[p].nodes.iter().all(|&n| {
                !self.returned[n.index()]
                    && self.users[n.index()].iter().all(|&u| u == id || self.owner[u.index()] == Some(p))
            });
            if private && self.acyclic(&[group, p], None) {
                self.merge(group, p);
            }
        }
    }

    /// Makes the Pointwise or RowReduce group computing the shared left operand of `group`'s matmuls its
    /// prologue, when that group computes nothing else and nothing else reads it.
    fn try_absorb_prologue(&mut self, group: usize) {
        let matmuls = self.drafts[group].matmuls.clone();
        let Some(&first) = matmuls.first() else { return };
        let lhs = self.args(first)[0];
        let Some(producer) = self.owner[lhs.index()] else { return };
        let absorbable = matches!(self.drafts[producer].kind, GroupKind::Pointwise | GroupKind::RowReduce);
        if producer == group || !absorbable || self.sealed(producer) {
            return;
        }
        let right_in_memory = matmuls.iter().all(|&m| self.owner[self.args(m)[1].index()] != Some(producer));
        let only_computes_lhs = self.drafts[producer].nodes.iter().all(|&n| {
            let users = &self.users[n.index()];
            let readers_ok = if n == lhs {
                users.iter().all(|u| matmuls.contains(u))
            } else {
                users.iter().all(|&u| self.owner[u.index()] == Some(producer))
            };
            !self.returned[n.index()] && !users.is_empty() && readers_ok
        });
        if right_in_memory && only_computes_lhs && self.acyclic(&[group, producer], None) {
            let prologue = self.drafts[producer].nodes.clone();
            self.merge(group, producer);
            self.drafts[group].prologue.extend(prologue);
            self.drafts[group].prologue.sort();
        }
    }

    /// Makes the decode attention block around `rope` one RopeAppendAttention group, when the graph has it
    /// and each member is still a group of its own, unless the block would read a value that depends on it.
    fn try_rope_append_attention(&mut self, rope: NodeId) {
        let Some(block) = RopeAppendAttention::find(self.g, &self.users, rope) else { return };
        let members = block.members();
        let mut groups = Vec::new();
        for member in members {
            match self.owner[member.index()] {
                Some(d) if self.drafts[d].nodes == [member] => groups.push(d),
                _ => return,
            }
        }
        // What the block reads from outside: its members' arguments but the members and its inner views.
        let inside = |n: &NodeId| members.contains(n) || block.inner_views().contains(n);
        let outside_reads = members.iter().flat_map(|&m| self.args(m).iter().copied()).filter(|a| !inside(a)).collect();
        if self.reaches_any(outside_reads, &groups) {
            return;
        }
        let Some(&into) = groups.iter().min() else { return };
        for &from in groups.iter().filter(|&&d| d != into) {
            self.merge(into, from);
        }
        self.drafts[into].kind = GroupKind::RopeAppendAttention;
    }

    /// Whether the union of `groups` (plus `extra`, a node about to join) can be one kernel: none of the
    /// values it reads from outside may depend on any of its members.
    fn acyclic(&self, groups: &[usize], extra: Option<NodeId>) -> bool {
        let member = |n: NodeId| Some(n) == extra || self.owner[n.index()].is_some_and(|o| groups.contains(&o));
        let mut outside_reads = Vec::new();
        for node in groups.iter().flat_map(|&gi| self.drafts[gi].nodes.iter().copied()).chain(extra) {
            outside_reads.extend(self.args(node).iter().copied().filter(|&a| !member(a)));
        }
        !self.reaches_any(outside_reads, groups)
    }

    /// Whether group `reader` reads, directly or through other groups, anything computed by `source`.
    fn group_depends_on(&self, reader: usize, source: usize) -> bool {
        let reads = self.drafts[reader]
            .nodes
            .iter()
            .flat_map(|&n| self.args(n).iter().copied())
            .filter(|a| self.owner[a.index()] != Some(reader))
            .collect();
        self.reaches_any(reads, &[source])
    }

    /// Whether any of `starts` depends on a node of `targets`. Dependencies are between whole groups: a
    /// group's outputs exist only once all of its inputs do.
    fn reaches_any(&self, mut stack: Vec<NodeId>, targets: &[usize]) -> bool {
        let mut seen_node = vec![false; self.g.nodes.len()];
        let mut seen_group = vec![false; self.drafts.len()];
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen_node[n.index()], true) {
                continue;
            }
            match self.owner[n.index()] {
                Some(o) if targets.contains(&o) => return true,
                Some(o) => {
                    if !std::mem::replace(&mut seen_group[o], true) {
                        for &m in &self.drafts[o].nodes {
                            stack.extend(self.args(m).iter().copied().filter(|a| self.owner[a.index()] != Some(o)));
                        }
                    }
                }
                None => stack.extend(self.args(n).iter().copied()),
            }
        }
        false
    }

    /// Orders the groups so that each comes after those it reads, and lists their inputs and outputs.
    fn finish(self) -> Plan {
        let live: Vec<usize> = (0..self.drafts.len()).filter(|&d| !self.drafts[d].nodes.is_empty()).collect();
        let Some(order) = self.dependency_order(&live) else {
            // The joins above refuse cycles, so this is a planner bug; the unfused plan is always valid.
            debug_assert!(false, "fusion produced a cycle between groups in {}", self.g.name);
            return Plan::unfused(self.g);
        };
        let groups = order.into_iter().map(|d| self.group(d)).collect();
        Plan { groups }
    }

    /// Kahn's algorithm over `live` drafts; ties go to the group whose first node comes first.
    fn dependency_order(&self, live: &[usize]) -> Option<Vec<usize>> {
        let reads: Vec<Vec<usize>> = live.iter().map(|&d| self.groups_read(d)).collect();
        let mut done = vec![false; self.drafts.len()];
        let mut order = Vec::with_capacity(live.len());
        while order.len() < live.len() {
            let next = live
                .iter()
                .zip(&reads)
                .filter(|(&d, r)| !done[d] && r.iter().all(|&s| done[s]))
                .min_by_key(|(&d, _)| self.drafts[d].nodes[0])
                .map(|(&d, _)| d)?;
            done[next] = true;
            order.push(next);
        }
        Some(order)
    }

    /// The other groups whose outputs draft `d` reads, looking through views.
    fn groups_read(&self, d: usize) -> Vec<usize> {
        let mut sources = Vec::new();
        for &n in &self.drafts[d].nodes {
            for &a in self.args(n) {
                let mut value = a;
                while let Some(source) = view_source(self.g, value) {
                    value = source;
                }
                if let Some(o) = self.owner[value.index()].filter(|&o| o != d) {
                    if !sources.contains(&o) {
                        sources.push(o);
                    }
                }
            }
        }
        sources
    }

    fn group(&self, d: usize) -> Group {
        let draft = &self.drafts[d];
        let mut nodes = draft.nodes.clone();
        nodes.sort();
        // Views read inside the group, of its own values: neither inputs nor a reason to write their source.
        let inner_views = match draft.kind {
            GroupKind::RopeAppendAttention => {
                RopeAppendAttention::of_group(self.g, &nodes).map_or(Vec::new(), |b| b.inner_views().to_vec())
            }
            _ => Vec::new(),
        };
        let mut inputs: Vec<NodeId> = Vec::new();
        for &n in &nodes {
            for &a in self.args(n) {
                let local = self.owner[a.index()] == Some(d) || inner_views.contains(&a);
                if !local && !matches!(self.g.op(a), Op::Const(_)) && !inputs.contains(&a) {
                    inputs.push(a);
                }
            }
        }
        let outputs = nodes
            .iter()
            .copied()
            .filter(|n| {
                let outside = |u: &&NodeId| self.owner[u.index()] != Some(d) && !inner_views.contains(u);
                self.returned[n.index()] || self.users[n.index()].iter().any(|u| outside(&u))
            })
            .collect();
        Group {
            kind: draft.kind,
            nodes,
            matmuls: draft.matmuls.clone(),
            prologue: draft.prologue.clone(),
            inputs,
            outputs,
        }
    }
}
