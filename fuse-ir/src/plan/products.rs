//! A MultiGemm group's products: each matmul with the epilogue nodes that read it. The code generator gives
//! each product its own epilogue inside one kernel; a backend that cannot run the group as one kernel runs
//! [`Group::split_products`], the groups it stands for.

use super::{Group, GroupKind};
use crate::graph::{Graph, NodeId};
use crate::op::Op;

/// One matmul of a group with the epilogue nodes that depend on its product, and what of them (the
/// product included) the group writes to memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Product {
    pub matmul: NodeId,
    /// Epilogue nodes reading this product, directly or through each other, in topological order.
    pub epilogue: Vec<NodeId>,
    /// The group's outputs among the matmul and `epilogue`.
    pub outputs: Vec<NodeId>,
}

impl Group {
    /// For each matmul, in order, the epilogue nodes that depend on it: the set of matmuls each epilogue
    /// node depends on, as indices into `matmuls`.
    fn epilogue_dependencies(&self, g: &Graph) -> Vec<(NodeId, Vec<usize>)> {
        let mut deps: Vec<(NodeId, Vec<usize>)> = Vec::new();
        for n in self.epilogue() {
            let mut mine: Vec<usize> = Vec::new();
            for a in &g.node(n).args {
                let from: Vec<usize> = match self.matmuls.iter().position(|m| m == a) {
                    Some(j) => vec![j],
                    None => deps.iter().find(|(d, _)| d == a).map_or(Vec::new(), |(_, s)| s.clone()),
                };
                for j in from {
                    if !mine.contains(&j) {
                        mine.push(j);
                    }
                }
            }
            mine.sort_unstable();
            deps.push((n, mine));
        }
        deps
    }

    /// Each matmul with its own epilogue nodes (see [`Product`]). For a MultiGemm group that
    /// [`Plan::verify`](super::Plan::verify) accepts, every epilogue node belongs to exactly one product.
    pub fn products(&self, g: &Graph) -> Vec<Product> {
        let deps = self.epilogue_dependencies(g);
        self.matmuls
            .iter()
            .enumerate()
            .map(|(j, &matmul)| {
                let epilogue: Vec<NodeId> = deps.iter().filter(|(_, d)| d.contains(&j)).map(|(n, _)| *n).collect();
                let outputs = self.outputs.iter().copied().filter(|o| *o == matmul || epilogue.contains(o)).collect();
                Product { matmul, epilogue, outputs }
            })
            .collect()
    }

    /// What a MultiGemm group must be: matmuls of one left operand, each epilogue node reading exactly one
    /// product.
    pub(super) fn check_products(&self, g: &Graph) -> Result<(), String> {
        let lhs = |m: &NodeId| g.node(*m).args[0];
        if let Some(m) = self.matmuls.iter().find(|m| lhs(m) != lhs(&self.matmuls[0])) {
            return Err(format!("matmul %{} has another left operand than %{}", m.0, self.matmuls[0].0));
        }
        for (n, d) in self.epilogue_dependencies(g) {
            if d.len() != 1 {
                return Err(format!("epilogue node %{} reads {} products, not one", n.0, d.len()));
            }
        }
        Ok(())
    }

    /// The groups a MultiGemm group stands for, in an order that runs: its prologue alone (a Pointwise or
    /// RowReduce group writing the left operand) when it has one, then one Gemm group per product. Any
    /// other group is returned as it is.
    pub fn split_products(&self, g: &Graph) -> Vec<Group> {
        if self.kind != GroupKind::MultiGemm {
            return vec![self.clone()];
        }
        let mut groups = Vec::new();
        if let Some(&first) = self.matmuls.first() {
            if !self.prologue.is_empty() {
                let reduces = self.prologue.iter().any(|&n| matches!(g.op(n), Op::Reduce(_)));
                let kind = if reduces { GroupKind::RowReduce } else { GroupKind::Pointwise };
                let lhs = g.node(first).args[0];
                groups.push(part(g, kind, self.prologue.clone(), vec![], vec![lhs]));
            }
        }
        for p in self.products(g) {
            let mut nodes = vec![p.matmul];
            nodes.extend(&p.epilogue);
            groups.push(part(g, GroupKind::Gemm, nodes, vec![p.matmul], p.outputs));
        }
        groups
    }
}

/// A group of `nodes` (sorted) reading what they read from outside.
fn part(g: &Graph, kind: GroupKind, mut nodes: Vec<NodeId>, matmuls: Vec<NodeId>, outputs: Vec<NodeId>) -> Group {
    nodes.sort();
    let mut inputs: Vec<NodeId> = Vec::new();
    for &n in &nodes {
        for &a in &g.node(n).args {
            if !nodes.contains(&a) && !matches!(g.op(a), Op::Const(_)) && !inputs.contains(&a) {
                inputs.push(a);
            }
        }
    }
    Group { kind, nodes, matmuls, prologue: Vec::new(), inputs, outputs }
}
