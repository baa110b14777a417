//! The graph: an arena of hash-consed nodes in topological order (a node's arguments come before it).

use crate::model_op::ModelOp;
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::view::{Axes, ViewOp};
use crate::DType;
use std::collections::HashMap;

/// Index of a node in [`Graph::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What an argument of the fused function is, as far as the macro can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A `&Tensor` parameter.
    Tensor,
    /// An `f32`/`f64`/`usize`/`i64` parameter: a 0-d operand that takes the dtype of what it meets.
    Scalar,
    /// A field of `self`: a tensor or a scalar, known only at run time.
    Field,
    /// A field of `self` the body uses as a number (a size, `x.dim(2) / self.heads`): a scalar, checked at run
    /// time against the field's type.
    ScalarField,
}

impl InputKind {
    pub fn name(self) -> &'static str {
        match self {
            InputKind::Tensor => "tensor",
            InputKind::Scalar => "scalar",
            InputKind::Field => "field",
            InputKind::ScalarField => "scalar_field",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// As the user wrote it: `x`, `eps`, `self.norm`.
    pub name: String,
    pub kind: InputKind,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub args: Vec<NodeId>,
    /// Index into [`Graph::labels`]: the user's source text for this node, for errors and reports.
    pub label: u32,
}

/// A traced function. Nodes are in topological order; identical (op, args) pairs are one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub name: String,
    pub inputs: Vec<Input>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<NodeId>,
    /// Source snippets (`x.matmul(w_gate)` at line 5); label 0 is always the empty label.
    pub labels: Vec<String>,
    dedup: HashMap<(OpKey, Vec<NodeId>), NodeId>,
    label_ids: HashMap<String, u32>,
}

/// `Op` with the float made hashable (bit pattern), for hash-consing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum OpKey {
    Input(u32),
    Const(u64),
    Unary(UnaryOp),
    Binary(BinaryOp),
    Reduce(ReduceOp),
    MatMul,
    Transpose,
    Cast(DType),
    Where,
    Model(ModelOp),
    View(ViewOp),
}

impl From<Op> for OpKey {
    fn from(op: Op) -> Self {
        match op {
            Op::Input(i) => OpKey::Input(i),
            Op::Const(c) => OpKey::Const(c.to_bits()),
            Op::Unary(u) => OpKey::Unary(u),
            Op::Binary(b) => OpKey::Binary(b),
            Op::Reduce(r) => OpKey::Reduce(r),
            Op::MatMul => OpKey::MatMul,
            Op::Transpose => OpKey::Transpose,
            Op::Cast(d) => OpKey::Cast(d),
            Op::Where => OpKey::Where,
            Op::Model(m) => OpKey::Model(m),
            Op::View(v) => OpKey::View(v),
        }
    }
}

/// Why a `slice_set` may not write where it does ([`Graph::write_conflict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConflict {
    /// The destination is a value the graph computes, not an argument or a view of one.
    Computed,
    /// The source is the memory written (the destination, its argument or a view between them).
    IntoItself,
    /// This node reads the argument, or a view between it and the destination, besides the write.
    ReadBy(NodeId),
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Self {
        let mut g = Graph { name: name.into(), ..Default::default() };
        g.label("");
        g
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn op(&self, id: NodeId) -> Op {
        self.nodes[id.index()].op
    }

    pub fn label_of(&self, id: NodeId) -> &str {
        &self.labels[self.nodes[id.index()].label as usize]
    }

    pub fn ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Interns a source label, returning its index.
    pub fn label(&mut self, text: &str) -> u32 {
        if let Some(&i) = self.label_ids.get(text) {
            return i;
        }
        let i = self.labels.len() as u32;
        self.labels.push(text.to_string());
        self.label_ids.insert(text.to_string(), i);
        i
    }

    /// Adds a node, or returns the existing node with the same op and arguments.
    /// Panics if the arity is wrong or an argument does not exist (a bug in the caller, never user input).
    pub fn push(&mut self, op: Op, args: &[NodeId], label: &str) -> NodeId {
        assert_eq!(op.arity(), args.len(), "{} takes {} arguments", op.name(), op.arity());
        assert!(args.iter().all(|a| a.index() < self.nodes.len()), "argument out of range");
        let key = (OpKey::from(op), args.to_vec());
        if let Some(&id) = self.dedup.get(&key) {
            return id;
        }
        let label = self.label(label);
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node { op, args: args.to_vec(), label });
        self.dedup.insert(key, id);
        id
    }

    /// Declares the next argument of the function and returns its node.
    pub fn input(&mut self, name: &str, kind: InputKind) -> NodeId {
        let k = self.inputs.len() as u32;
        self.inputs.push(Input { name: name.to_string(), kind });
        self.push(Op::Input(k), &[], name)
    }

    pub fn constant(&mut self, value: f64) -> NodeId {
        self.push(Op::Const(value), &[], "")
    }

    pub fn unary(&mut self, op: UnaryOp, a: NodeId, label: &str) -> NodeId {
        self.push(Op::Unary(op), &[a], label)
    }

    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId, label: &str) -> NodeId {
        self.push(Op::Binary(op), &[a, b], label)
    }

    /// `cond.where_cond(on_true, on_false)`.
    pub fn where_cond(&mut self, cond: NodeId, on_true: NodeId, on_false: NodeId, label: &str) -> NodeId {
        self.push(Op::Where, &[cond, on_true, on_false], label)
    }

    pub fn reduce(&mut self, op: ReduceOp, a: NodeId, label: &str) -> NodeId {
        self.push(Op::Reduce(op), &[a], label)
    }

    pub fn matmul(&mut self, a: NodeId, b: NodeId, label: &str) -> NodeId {
        self.push(Op::MatMul, &[a, b], label)
    }

    pub fn transpose(&mut self, a: NodeId, label: &str) -> NodeId {
        self.push(Op::Transpose, &[a], label)
    }

    pub fn cast(&mut self, a: NodeId, dtype: DType, label: &str) -> NodeId {
        self.push(Op::Cast(dtype), &[a], label)
    }

    /// A model op (`embedding`, `argmax`, `rope`, `attention`) over `args`, in the op's argument order.
    pub fn model(&mut self, op: ModelOp, args: &[NodeId], label: &str) -> NodeId {
        self.push(Op::Model(op), args, label)
    }

    /// A view or layout op over `args` (the tensor(s) first, then any sizes: see `ViewOp`).
    pub fn view(&mut self, op: ViewOp, args: &[NodeId], label: &str) -> NodeId {
        self.push(Op::View(op), args, label)
    }

    /// `softmax(x)` over the last axis, as max, sub, exp, sum, div (numerically stable).
    pub fn softmax(&mut self, x: NodeId, label: &str) -> NodeId {
        let m = self.reduce(ReduceOp::Max, x, label);
        let d = self.binary(BinaryOp::Sub, x, m, label);
        let e = self.unary(UnaryOp::Exp, d, label);
        let s = self.reduce(ReduceOp::Sum, e, label);
        self.binary(BinaryOp::Div, e, s, label)
    }

    /// `rms_norm(x, w, eps) = x * rsqrt(mean(x^2, -1) + eps) * w`.
    pub fn rms_norm(&mut self, x: NodeId, w: NodeId, eps: NodeId, label: &str) -> NodeId {
        let sq = self.unary(UnaryOp::Square, x, label);
        let ms = self.reduce(ReduceOp::Mean, sq, label);
        let var = self.binary(BinaryOp::Add, ms, eps, label);
        let r = self.unary(UnaryOp::Rsqrt, var, label);
        let xn = self.binary(BinaryOp::Mul, x, r, label);
        self.binary(BinaryOp::Mul, xn, w, label)
    }

    /// `x.gather(&indexes, axis)` (candle's): along the last axis (`axis` -1) the model op itself, along
    /// another with x and the indexes swapped there and the result swapped back (views).
    pub fn gather(&mut self, x: NodeId, indexes: NodeId, axis: i8, label: &str) -> NodeId {
        if axis == -1 {
            return self.model(ModelOp::Gather, &[x, indexes], label);
        }
        let swap = ViewOp::Transpose { a: axis, b: -1 };
        let (x, indexes) = (self.view(swap, &[x], label), self.view(swap, &[indexes], label));
        let picked = self.model(ModelOp::Gather, &[x, indexes], label);
        self.view(swap, &[picked], label)
    }

    /// `x.conv1d(w, padding, stride, dilation, groups)` (`spatial` 1: x [b, c, l], w [co, c / groups, k]) or
    /// `conv2d` (2: x [b, c, h, w], w [co, c / groups, kh, kw]), candle's, with `sizes` = [padding, stride,
    /// dilation, groups]: the columns of `unfold` [groups, b, out.., kc], one matmul per group against the
    /// weights as [groups, kc, co / groups] (a view), and views back to [b, co, out..] (a copy only with
    /// several groups). The matmul is an ordinary GEMM group; a bias or an activation after the convolution
    /// reads it through those views and so is not its epilogue (the planner does not move pointwise work
    /// across views yet).
    pub fn conv(&mut self, x: NodeId, w: NodeId, sizes: [NodeId; 4], spatial: usize, label: &str) -> NodeId {
        let groups = sizes[3];
        let cols = self.model(
            ModelOp::Unfold { spatial: spatial as u8 },
            &[x, w, sizes[0], sizes[1], sizes[2], groups],
            label,
        );
        let rest = self.constant(-1.0);
        let dims: Vec<NodeId> =
            (1..2 + spatial as i8).map(|axis| self.view(ViewOp::Dim { axis }, &[cols], label)).collect();
        let kc = self.view(ViewOp::Dim { axis: -1 }, &[cols], label);
        let flat = self.view(ViewOp::Reshape { rank: 3 }, &[cols, groups, rest, kc], label);
        let weights = self.view(ViewOp::Reshape { rank: 3 }, &[w, groups, rest, kc], label);
        let weights = self.view(ViewOp::Transpose { a: 1, b: 2 }, &[weights], label);
        let y = self.matmul(flat, weights, label);
        // [groups, b, out.., co / groups], then [b, groups, co / groups, out..], then [b, co, out..].
        let split: Vec<NodeId> = [&[y, groups][..], &dims, &[rest]].concat();
        let y = self.view(ViewOp::Reshape { rank: 3 + spatial as u8 }, &split, label);
        let order: Vec<usize> = [&[1, 0, 2 + spatial][..], &(2..2 + spatial).collect::<Vec<_>>()].concat();
        let axes = Axes::new(&order).expect("at most 5 axes");
        let y = self.view(ViewOp::Permute(axes), &[y], label);
        let joined: Vec<NodeId> = [&[y, dims[0], rest][..], &dims[1..]].concat();
        self.view(ViewOp::Reshape { rank: 2 + spatial as u8 }, &joined, label)
    }

    /// For each node, the nodes that use it (in order, without repeats).
    pub fn users(&self) -> Vec<Vec<NodeId>> {
        self.users_where(|_| true)
    }

    /// [`Graph::users`] of the nodes `wanted` keeps; the others' lists empty (no allocation for them: a
    /// call's executor asks this for a few nodes every call).
    pub fn users_where(&self, wanted: impl Fn(NodeId) -> bool) -> Vec<Vec<NodeId>> {
        let mut users = vec![Vec::new(); self.nodes.len()];
        for id in self.ids() {
            for &a in &self.node(id).args {
                if !wanted(a) {
                    continue;
                }
                let u: &mut Vec<NodeId> = &mut users[a.index()];
                if u.last() != Some(&id) {
                    u.push(id);
                }
            }
        }
        users
    }

    /// The same graph without nodes that no output depends on (arguments are always kept, in order).
    /// Node ids change; labels and hash-consing are rebuilt.
    pub fn without_dead_nodes(&self) -> Graph {
        let mut live = vec![false; self.nodes.len()];
        for o in &self.outputs {
            live[o.index()] = true;
        }
        // A write into an argument is an effect the caller sees: kept even when its result is not read.
        for id in self.ids().filter(|&id| self.op(id).writes_in_place()) {
            live[id.index()] = true;
        }
        for id in self.ids().rev() {
            if live[id.index()] {
                for a in &self.node(id).args {
                    live[a.index()] = true;
                }
            }
        }
        let mut g = Graph::new(self.name.clone());
        g.inputs = self.inputs.clone();
        let mut map: Vec<Option<NodeId>> = vec![None; self.nodes.len()];
        for id in self.ids() {
            let n = self.node(id);
            if live[id.index()] || matches!(n.op, Op::Input(_)) {
                let args: Vec<NodeId> = n.args.iter().map(|a| map[a.index()].expect("live args are mapped")).collect();
                map[id.index()] = Some(g.push(n.op, &args, &self.labels[n.label as usize]));
            }
        }
        g.outputs = self.outputs.iter().map(|o| map[o.index()].expect("outputs are live")).collect();
        g
    }

    /// The argument a `slice_set` destination `dest` writes into: `dest` itself, or the argument under a chain
    /// of views that are always strides over it (`narrow`, `transpose`, `permute`, `unsqueeze`, `squeeze`;
    /// not `reshape`, which may copy), with the chain from `dest` down. `None` for a computed value.
    pub fn written_argument(&self, dest: NodeId) -> Option<(NodeId, Vec<NodeId>)> {
        let mut chain = Vec::new();
        let mut id = dest;
        loop {
            match self.op(id) {
                Op::Input(_) => return Some((id, chain)),
                Op::Transpose
                | Op::View(
                    ViewOp::Narrow { .. }
                    | ViewOp::Transpose { .. }
                    | ViewOp::Permute(_)
                    | ViewOp::Unsqueeze { .. }
                    | ViewOp::Squeeze { .. },
                ) => {
                    chain.push(id);
                    id = self.node(id).args[0];
                }
                _ => return None,
            }
        }
    }

    /// What keeps `slice_set` node `id` from writing where it does, given every node's readers (`users`):
    /// a destination that is no argument (nor a view of one), a source that is the written memory, or another
    /// reader of the argument or of a view between it and the destination (each link may be read by the
    /// one above it only). `None` when the write is safe.
    pub fn write_conflict(&self, id: NodeId, users: &[Vec<NodeId>]) -> Option<WriteConflict> {
        let (dest, src) = (self.node(id).args[0], self.node(id).args[1]);
        let Some((argument, chain)) = self.written_argument(dest) else { return Some(WriteConflict::Computed) };
        if src == dest || chain.contains(&src) || src == argument {
            return Some(WriteConflict::IntoItself);
        }
        let readers = std::iter::once(id).chain(chain.iter().copied());
        for (node, reader) in chain.iter().copied().chain([argument]).zip(readers) {
            if let Some(&other) = users[node.index()].iter().find(|&&u| u != reader) {
                return Some(WriteConflict::ReadBy(other));
            }
        }
        None
    }

    /// `slice_set` writes into its destination in place, so the destination must be an argument (memory the
    /// caller owns, not a value of this graph), or a view of one ([`Graph::written_argument`]), that no other
    /// node reads (nor any other view of it): then no order of the ops can observe the write, and the graph
    /// still means one thing.
    pub fn verify_writes(&self) -> Result<(), String> {
        let users = self.users();
        for id in self.ids().filter(|&id| self.op(id).writes_in_place()) {
            let label = self.label_of(id);
            match self.write_conflict(id, &users) {
                None => {}
                Some(WriteConflict::Computed) => return Err(format!(
                    "`{label}` writes in place into a computed value; the destination of slice_set must be an argument of the function"
                )),
                Some(WriteConflict::IntoItself) => return Err(format!("`{label}` writes an argument into itself")),
                Some(WriteConflict::ReadBy(other)) => return Err(format!(
                    "`{label}` writes into an argument that `{}` also reads; read the result of slice_set instead (the write is in place)",
                    self.label_of(other)
                )),
            }
        }
        Ok(())
    }

    /// Checks the invariants every pass relies on; returns what is wrong.
    pub fn verify(&self) -> Result<(), String> {
        for id in self.ids() {
            let n = self.node(id);
            if n.args.len() != n.op.arity() {
                return Err(format!(
                    "%{} {}: {} arguments, expected {}",
                    id.0,
                    n.op.name(),
                    n.args.len(),
                    n.op.arity()
                ));
            }
            if let Some(a) = n.args.iter().find(|a| a.0 >= id.0) {
                return Err(format!("%{} uses %{}, which does not come before it", id.0, a.0));
            }
            if let Op::Input(k) = n.op {
                if k as usize >= self.inputs.len() {
                    return Err(format!("%{} reads input {k}, but there are {}", id.0, self.inputs.len()));
                }
            }
            if n.label as usize >= self.labels.len() {
                return Err(format!("%{}: label {} out of range", id.0, n.label));
            }
        }
        self.verify_writes()?;
        if let Some(o) = self.outputs.iter().find(|o| o.index() >= self.nodes.len()) {
            return Err(format!("output %{} does not exist", o.0));
        }
        if self.outputs.is_empty() {
            return Err("the graph has no outputs".into());
        }
        Ok(())
    }
}
