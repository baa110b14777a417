//! Row programs: a group of pointwise ops and last-axis reductions compiled, for the shapes of this call,
//! into straight-line code over one row of the group's domain. Running it (see `rowrun.rs`) makes one pass
//! over memory: sources are read through broadcast strides, intermediates live in small per-thread row
//! buffers, and only the group's outputs are written.

use crate::call::Value;
use crate::element::round_to;
use crate::layout::{broadcast_strides, coalesce};
use crate::tensor::contiguous_strides;
use crate::{Error, Result, Tensor};
use fuse_ir::infer::broadcast;
use fuse_ir::view::ViewOp;
use fuse_ir::{BinaryOp, DType, Graph, NodeId, Op, ReduceOp, UnaryOp};

/// The facts about this call that compiling needs.
pub(crate) struct CallInfo<'a> {
    pub function: &'a str,
    pub graph: &'a Graph,
    pub shapes: &'a [Vec<usize>],
    pub dtypes: &'a [Option<DType>],
}

/// What to compile.
pub(crate) struct RowSpec<'a> {
    /// Nodes computed by the program, in topological order.
    pub nodes: &'a [NodeId],
    /// Values written out, in order (nodes of the program, or values it only reads: a copy).
    pub sinks: &'a [NodeId],
    /// Values handed over as dense row-major f32 buffers of the domain's shape (matmul products).
    pub blocks: &'a [NodeId],
    /// The domain the program must iterate (e.g. the matmul's A or product shape), if imposed.
    pub domain: Option<&'a [usize]>,
    /// Keep the last axis apart when merging axes, so rows are rows of the imposed domain.
    pub keep_last_axis: bool,
}

pub(crate) enum Compiled {
    Fits(RowProgram),
    /// The shapes do not make one row domain; the reason is for FUSE_DEBUG.
    DoesNotFit(String),
}

/// A value the program reads from memory.
pub(crate) enum Source {
    /// A tensor (argument, view or earlier output), read through its strides broadcast onto the domain.
    Tensor { tensor: Tensor, prefix_strides: Vec<usize>, last_stride: usize },
    /// The k-th block buffer: dense rows of the domain, starting at the block's first row.
    Block(usize),
}

/// A row buffer: `wide` ones hold a tile of the row, the others one value for the whole row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Reg {
    pub slot: usize,
    pub wide: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    Reg(Reg),
    Lit(f32),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Instr {
    Load {
        source: usize,
        dst: Reg,
    },
    Unary {
        op: UnaryOp,
        src: Reg,
        dst: Reg,
    },
    Binary {
        op: BinaryOp,
        lhs: Operand,
        rhs: Operand,
        dst: Reg,
    },
    /// `where_cond`: `on_true` where `cond` is not 0, else `on_false`.
    Select {
        cond: Operand,
        on_true: Operand,
        on_false: Operand,
        dst: Reg,
    },
    /// Reduces a wide register (a whole row) to one value.
    Reduce {
        op: ReduceOp,
        src: Reg,
        dst: Reg,
    },
    /// `to_dtype` to f16/bf16 inside a group: round as storing would.
    Round {
        dtype: DType,
        src: Reg,
        dst: Reg,
    },
    Store {
        sink: usize,
        src: Operand,
    },
}

pub(crate) struct RowProgram {
    /// The merged domain without its last axis; rows are numbered row-major over it.
    pub(crate) prefix_dims: Vec<usize>,
    pub(crate) rows: usize,
    /// Length of a row (the domain's last axis).
    pub(crate) n: usize,
    pub(crate) has_reduce: bool,
    pub(crate) instrs: Vec<Instr>,
    pub(crate) slots: usize,
    pub(crate) sources: Vec<Source>,
    /// Per sink: whether it holds a whole row (else one value per row).
    pub(crate) sink_wide: Vec<bool>,
}

impl RowProgram {
    /// Elements of sink `i` per row.
    pub(crate) fn sink_width(&self, i: usize) -> usize {
        if self.sink_wide[i] {
            self.n
        } else {
            1
        }
    }

    /// Whether a row may be split between threads (no reductions, no one-value-per-row outputs).
    pub(crate) fn columns_split(&self) -> bool {
        !self.has_reduce && self.sink_wide.iter().all(|&w| w)
    }
}

/// A value while compiling: a virtual register (before slots are assigned) or a literal.
#[derive(Clone, Copy)]
enum Val {
    V { vreg: usize, wide: bool },
    Lit(f32),
}

struct Builder {
    instrs: Vec<VInstr>,
    vregs: usize,
}

/// Instructions over virtual registers (indices into `Builder::vregs`).
#[derive(Clone, Copy)]
enum VInstr {
    Load { source: usize, dst: (usize, bool) },
    Unary { op: UnaryOp, src: (usize, bool), dst: (usize, bool) },
    Binary { op: BinaryOp, lhs: Val, rhs: Val, dst: (usize, bool) },
    Select { cond: Val, on_true: Val, on_false: Val, dst: (usize, bool) },
    Reduce { op: ReduceOp, src: (usize, bool), dst: (usize, bool) },
    Round { dtype: DType, src: (usize, bool), dst: (usize, bool) },
    Store { sink: usize, src: Val },
}

impl Builder {
    fn fresh(&mut self, wide: bool) -> (usize, bool) {
        self.vregs += 1;
        (self.vregs - 1, wide)
    }
}

fn val_of(v: (usize, bool)) -> Val {
    Val::V { vreg: v.0, wide: v.1 }
}

/// Compiles `spec` for this call's shapes; externals are looked up with `resolve`.
pub(crate) fn compile(
    info: &CallInfo<'_>,
    spec: &RowSpec<'_>,
    resolve: &dyn Fn(NodeId) -> Result<Value>,
) -> Result<Compiled> {
    let g = info.graph;
    let mut local = vec![false; g.nodes.len()];
    spec.nodes.iter().for_each(|n| local[n.index()] = true);
    let is_block = |id: NodeId| spec.blocks.contains(&id);

    // Values read from memory, in order of first use (deterministic).
    let mut externals: Vec<NodeId> = Vec::new();
    let mut note_external = |id: NodeId| {
        if !local[id.index()] && !matches!(g.op(id), Op::Const(_)) && !externals.contains(&id) {
            externals.push(id);
        }
    };
    spec.sinks.iter().for_each(|&s| note_external(s));
    for &n in spec.nodes {
        g.node(n).args.iter().for_each(|&a| note_external(a));
    }

    // The domain: every value broadcast together.
    let mut domain: Vec<usize> = spec.domain.map(|d| d.to_vec()).unwrap_or_default();
    for &id in spec.nodes.iter().chain(&externals).chain(spec.sinks) {
        match broadcast(&domain, &info.shapes[id.index()]) {
            Some(d) => domain = d,
            None => {
                return Ok(Compiled::DoesNotFit(format!(
                    "shapes {:?} and {:?} make no one domain",
                    domain,
                    info.shapes[id.index()]
                )))
            }
        }
    }
    if let Some(imposed) = spec.domain {
        if domain != imposed {
            return Ok(Compiled::DoesNotFit(format!(
                "values of shape {domain:?} around a matmul of shape {imposed:?}"
            )));
        }
    }
    let has_reduce = spec.nodes.iter().any(|&n| matches!(g.op(n), Op::Reduce(_)));

    // Memory operands and their strides over the domain: sources, then sinks (dense outputs).
    let mut sources: Vec<Source> = Vec::new();
    let mut source_of: Vec<Option<Val>> = vec![None; g.nodes.len()];
    let mut strides: Vec<Vec<usize>> = Vec::new();
    for &e in &externals {
        let shape = &info.shapes[e.index()];
        if is_block(e) {
            strides.push(broadcast_strides(shape, &contiguous_strides(shape), &domain));
            sources.push(Source::Block(spec.blocks.iter().position(|&b| b == e).unwrap_or(0)));
            continue;
        }
        match resolve(e)? {
            Value::Scalar(v) => source_of[e.index()] = Some(Val::Lit(v as f32)),
            Value::Tensor(t) => {
                strides.push(broadcast_strides(t.shape(), t.strides(), &domain));
                sources.push(Source::Tensor { tensor: t, prefix_strides: Vec::new(), last_stride: 0 });
            }
        }
    }
    let source_count = strides.len();
    for &s in spec.sinks {
        let shape = &info.shapes[s.index()];
        strides.push(broadcast_strides(shape, &contiguous_strides(shape), &domain));
    }
    let (dims, merged) = coalesce(&domain, &strides, spec.keep_last_axis || has_reduce);
    let (n, prefix_dims) = match dims.split_last() {
        Some((&n, prefix)) => (n, prefix.to_vec()),
        None => return Err(Error::internal(info.function, "coalesced domain without axes")),
    };
    let rows: usize = prefix_dims.iter().product();
    let is_wide = |s: &[usize]| n != 1 && s.last().is_some_and(|&l| l != 0);
    for (i, source) in sources.iter_mut().enumerate() {
        if let Source::Tensor { prefix_strides, last_stride, .. } = source {
            let s = &merged[i];
            *prefix_strides = s[..s.len() - 1].to_vec();
            *last_stride = s[s.len() - 1];
        }
    }
    // Each output must be dense over the domain's rows, so rows write disjoint memory.
    let mut sink_wide = Vec::with_capacity(spec.sinks.len());
    for (k, &s) in spec.sinks.iter().enumerate() {
        let st = &merged[source_count + k];
        let wide = is_wide(st);
        let width = if wide { n } else { 1 };
        let mut want = contiguous_strides(&prefix_dims);
        want.iter_mut().for_each(|w| *w *= width);
        want.push(if wide { 1 } else { 0 });
        let dense = st.iter().zip(&want).zip(&dims).all(|((&a, &b), &d)| a == b || d == 1);
        if !dense {
            return Ok(Compiled::DoesNotFit(format!(
                "output %{} of shape {:?} does not cover the domain {domain:?} row by row",
                s.0,
                info.shapes[s.index()]
            )));
        }
        sink_wide.push(wide);
    }

    // Straight-line code over virtual registers.
    let mut b = Builder { instrs: Vec::new(), vregs: 0 };
    let mut vals: Vec<Option<Val>> = source_of;
    let mut next_source = 0usize;
    let mut source_index: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for &e in &externals {
        if vals[e.index()].is_none() {
            source_index[e.index()] = Some(next_source);
            next_source += 1;
        }
    }
    let operand = |b: &mut Builder, vals: &mut Vec<Option<Val>>, id: NodeId| -> Result<Val> {
        if let Op::Const(c) = g.op(id) {
            return Ok(Val::Lit(c as f32));
        }
        if let Some(v) = vals[id.index()] {
            return Ok(v);
        }
        let source = source_index[id.index()].ok_or_else(|| {
            Error::internal(info.function, format!("row program reads %{} before computing it", id.0))
        })?;
        let s = &merged[source];
        let dst = b.fresh(is_wide(s));
        b.instrs.push(VInstr::Load { source, dst });
        let v = val_of(dst);
        vals[id.index()] = Some(v);
        Ok(v)
    };
    let store = |b: &mut Builder, id: NodeId, v: Val| {
        for (k, _) in spec.sinks.iter().enumerate().filter(|(_, &s)| s == id) {
            b.instrs.push(VInstr::Store { sink: k, src: v });
        }
    };
    for &s in spec.sinks.iter().filter(|s| !local[s.index()]) {
        let v = operand(&mut b, &mut vals, s)?;
        store(&mut b, s, v);
    }
    for &id in spec.nodes {
        let node = g.node(id);
        // `broadcast_as` is its operand, read broadcast over the result's shape (its sizes are that shape's).
        if let Op::View(ViewOp::BroadcastAs { .. }) = node.op {
            let v = operand(&mut b, &mut vals, node.args[0])?;
            vals[id.index()] = Some(v);
            store(&mut b, id, v);
            continue;
        }
        // Row-program ops take one to three operands; a node with more is refused below, by its op.
        let mut operands = [Val::Lit(0.0); 3];
        let arity = node.args.len().min(operands.len() + 1);
        for (slot, &a) in operands.iter_mut().zip(&node.args) {
            *slot = operand(&mut b, &mut vals, a)?;
        }
        let args: &[Val] = if arity <= operands.len() { &operands[..arity] } else { &[] };
        let v = match (node.op, args) {
            (Op::Unary(op), [Val::Lit(x)]) => Val::Lit(op.eval_f32(*x)),
            (Op::Unary(op), [Val::V { vreg, wide }]) => {
                let dst = b.fresh(*wide);
                b.instrs.push(VInstr::Unary { op, src: (*vreg, *wide), dst });
                val_of(dst)
            }
            (Op::Binary(op), [Val::Lit(x), Val::Lit(y)]) => Val::Lit(op.eval_f32(*x, *y)),
            (Op::Binary(op), [lhs, rhs]) => {
                let wide = [lhs, rhs].iter().any(|v| matches!(v, Val::V { wide: true, .. }));
                let dst = b.fresh(wide);
                b.instrs.push(VInstr::Binary { op, lhs: *lhs, rhs: *rhs, dst });
                val_of(dst)
            }
            (Op::Where, [Val::Lit(c), on_true, on_false]) => {
                if *c != 0.0 {
                    *on_true
                } else {
                    *on_false
                }
            }
            (Op::Where, [cond, on_true, on_false]) => {
                let wide = [cond, on_true, on_false].iter().any(|v| matches!(v, Val::V { wide: true, .. }));
                let dst = b.fresh(wide);
                b.instrs.push(VInstr::Select { cond: *cond, on_true: *on_true, on_false: *on_false, dst });
                val_of(dst)
            }
            (Op::Cast(dtype), [Val::Lit(x)]) => Val::Lit(round_to(dtype, *x)),
            (Op::Cast(DType::F32), [v]) => *v,
            (Op::Cast(dtype), [Val::V { vreg, wide }]) => {
                let dst = b.fresh(*wide);
                b.instrs.push(VInstr::Round { dtype, src: (*vreg, *wide), dst });
                val_of(dst)
            }
            // `contiguous` is its operand, written densely by the program's one pass.
            (Op::View(ViewOp::Contiguous), [v]) => *v,
            // A reduction over an axis of length 1 is the value itself.
            (Op::Reduce(_), [v @ (Val::Lit(_) | Val::V { wide: false, .. })]) => *v,
            (Op::Reduce(op), [Val::V { vreg, wide: true }]) => {
                let dst = b.fresh(false);
                b.instrs.push(VInstr::Reduce { op, src: (*vreg, true), dst });
                val_of(dst)
            }
            (op, _) => {
                return Err(Error::internal(
                    info.function,
                    format!("{} (%{}) cannot run in a row program", op.name(), id.0),
                ))
            }
        };
        vals[id.index()] = Some(v);
        store(&mut b, id, v);
    }
    for (k, &s) in spec.sinks.iter().enumerate() {
        if matches!(vals[s.index()], Some(Val::V { wide: true, .. })) && !sink_wide[k] {
            return Ok(Compiled::DoesNotFit(format!("output %{} holds a row where one value was expected", s.0)));
        }
    }
    let (instrs, slots) = assign_slots(&b);
    Ok(Compiled::Fits(RowProgram { prefix_dims, rows, n, has_reduce, instrs, slots, sources, sink_wide }))
}

/// Maps virtual registers to as few row buffers as their lifetimes allow. A destination never shares a
/// buffer with its own operands (kernels read and write different slices).
fn assign_slots(b: &Builder) -> (Vec<Instr>, usize) {
    let mut last_use = vec![0usize; b.vregs];
    // The virtual registers an instruction reads (at most three).
    let uses = |i: &VInstr| -> [Option<usize>; 3] {
        let vs = |v: &Val| match v {
            Val::V { vreg, .. } => Some(*vreg),
            Val::Lit(_) => None,
        };
        match i {
            VInstr::Load { .. } => [None; 3],
            VInstr::Unary { src, .. } | VInstr::Reduce { src, .. } | VInstr::Round { src, .. } => {
                [Some(src.0), None, None]
            }
            VInstr::Binary { lhs, rhs, .. } => [vs(lhs), vs(rhs), None],
            VInstr::Select { cond, on_true, on_false, .. } => [vs(cond), vs(on_true), vs(on_false)],
            VInstr::Store { src, .. } => [vs(src), None, None],
        }
    };
    for (at, i) in b.instrs.iter().enumerate() {
        for v in uses(i).into_iter().flatten() {
            last_use[v] = at;
        }
    }
    let mut slot_of = vec![usize::MAX; b.vregs];
    let mut free: Vec<usize> = Vec::new();
    let mut slots = 0;
    let mut out = Vec::with_capacity(b.instrs.len());
    for (at, i) in b.instrs.iter().enumerate() {
        let dst = match i {
            VInstr::Load { dst, .. }
            | VInstr::Unary { dst, .. }
            | VInstr::Binary { dst, .. }
            | VInstr::Select { dst, .. }
            | VInstr::Reduce { dst, .. }
            | VInstr::Round { dst, .. } => Some(*dst),
            VInstr::Store { .. } => None,
        };
        if let Some((v, _)) = dst {
            slot_of[v] = free.pop().unwrap_or_else(|| {
                slots += 1;
                slots - 1
            });
        }
        let reg = |(v, wide): (usize, bool)| Reg { slot: slot_of[v], wide };
        let opnd = |v: Val| match v {
            Val::V { vreg, wide } => Operand::Reg(reg((vreg, wide))),
            Val::Lit(x) => Operand::Lit(x),
        };
        out.push(match *i {
            VInstr::Load { source, dst } => Instr::Load { source, dst: reg(dst) },
            VInstr::Unary { op, src, dst } => Instr::Unary { op, src: reg(src), dst: reg(dst) },
            VInstr::Binary { op, lhs, rhs, dst } => Instr::Binary { op, lhs: opnd(lhs), rhs: opnd(rhs), dst: reg(dst) },
            VInstr::Select { cond, on_true, on_false, dst } => {
                Instr::Select { cond: opnd(cond), on_true: opnd(on_true), on_false: opnd(on_false), dst: reg(dst) }
            }
            VInstr::Reduce { op, src, dst } => Instr::Reduce { op, src: reg(src), dst: reg(dst) },
            VInstr::Round { dtype, src, dst } => Instr::Round { dtype, src: reg(src), dst: reg(dst) },
            VInstr::Store { sink, src } => Instr::Store { sink, src: opnd(src) },
        });
        // Operands whose last use is here free their buffers for later instructions. A value defined
        // and never used is freed at once.
        let [first, second, third] = uses(i).map(|v| v.filter(|&v| last_use[v] == at));
        let unused = dst.map(|(v, _)| v).filter(|&v| last_use[v] <= at);
        let second = second.filter(|&v| Some(v) != first);
        let third = third.filter(|&v| Some(v) != first && Some(v) != second);
        let mut dying = [first, second, third, unused];
        dying.sort_unstable();
        for v in dying.into_iter().flatten() {
            free.push(slot_of[v]);
        }
    }
    (out, slots)
}
