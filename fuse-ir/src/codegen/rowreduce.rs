//! Row-reduction kernels: one block per row of the domain (its last axis), grid-stride over rows.
//!
//! Values are *narrow* (one per row: reductions, literals, scalar arguments and pointwise work on those
//! only) or *wide* (one per element of the row). Each reduction is a pass over the row: the threads stride
//! along it, recompute from global memory the wide work its operand needs, accumulate in f32, and meet in a
//! block reduction that hands every thread the result. Narrow work is computed once per row as soon as its
//! reductions are known. A last pass computes and writes the wide outputs; thread 0 writes the narrow ones.
//!
//! A reduction runs over the row only if its operand really spans it: when every input it depends on has
//! stride 0 along the row (shape `[.., 1]`, broadcast), the reduction is over one element, as the reference
//! reduces a value's own last axis.

use super::emit::{self, KernelParts};
use crate::graph::{InputKind, NodeId};
use crate::op::{Op, ReduceOp};
use std::fmt::Write;

/// Columns of a row each thread has in flight at once in a row kernel's passes.
const ROW_UNROLL: usize = 4;

pub(super) fn source(parts: &KernelParts<'_>) -> String {
    let mut k = RowKernel::new(parts, 0);
    k.emit();
    k.text
}

/// The row work of one kernel; also what a GEMM template's in-kernel prologue is made of (`prologue.rs`).
pub(super) struct RowKernel<'a, 'p> {
    pub parts: &'p KernelParts<'a>,
    /// The `FuseArgs` slot of `parts.inputs[0]` (the others follow): a prologue's slots come after the
    /// epilogue's in a template kernel.
    first_slot: usize,
    /// Per graph node: one value per row.
    pub narrow: Vec<bool>,
    /// Per graph node: its variable exists in the row's scope (narrow and computed).
    pub available: Vec<bool>,
    pub text: String,
}

impl<'a, 'p> RowKernel<'a, 'p> {
    pub fn new(parts: &'p KernelParts<'a>, first_slot: usize) -> Self {
        let g = parts.g;
        // Values read from memory are wide unless they are scalar arguments.
        let mut narrow = vec![false; g.nodes.len()];
        for id in g.ids() {
            narrow[id.index()] = match g.op(id) {
                Op::Input(k) if parts.inputs.contains(&id) => {
                    g.inputs.get(k as usize).is_some_and(|i| i.kind == InputKind::Scalar)
                }
                Op::Const(_) => true,
                _ if !parts.nodes.contains(&id) => false,
                Op::Reduce(_) => true,
                op if op.is_pointwise() => g.node(id).args.iter().all(|a| narrow[a.index()]),
                _ => false,
            };
        }
        let mut available = vec![false; g.nodes.len()];
        for id in g.ids().filter(|&id| matches!(g.op(id), Op::Const(_))) {
            available[id.index()] = true;
        }
        RowKernel { parts, first_slot, narrow, available, text: String::new() }
    }

    /// The `FuseArgs` slot of `parts.inputs[k]`.
    pub fn slot(&self, k: usize) -> usize {
        self.first_slot + k
    }

    pub fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.text, "{:width$}{text}", "", width = indent * 2);
    }

    fn emit(&mut self) {
        let parts = self.parts;
        let g = parts.g;
        self.text = parts.preamble("rowreduce");
        self.text.push_str(&parts.signature());
        self.line(1, "__shared__ float fuse_smem[32];");
        self.line(1, "const long long n = fuse_row_length(args);");
        self.line(1, "const long long rows = fuse_row_count(args);");
        self.emit_scalar_reads(1);
        self.line(1, "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {");
        self.line(2, "long long bi[FUSE_NIN], si[FUSE_NIN], bo[FUSE_NOUT], so[FUSE_NOUT];");
        self.line(2, "fuse_row_offsets(args, row, bi, si, bo, so);");
        self.emit_ready_narrow();
        for &r in parts.nodes.iter().filter(|&&r| matches!(g.op(r), Op::Reduce(_))) {
            self.emit_reduction(r);
            self.emit_ready_narrow();
        }
        self.emit_outputs();
        self.line(1, "}");
        self.text.push_str("}\n");
    }

    /// The scalar arguments, read once.
    pub fn emit_scalar_reads(&mut self, indent: usize) {
        for (k, &id) in self.parts.inputs.iter().enumerate() {
            if self.narrow[id.index()] {
                self.line(indent, &format!("const float v{} = {};", id.0, emit::read(self.slot(k), "0")));
                self.available[id.index()] = true;
            }
        }
    }

    /// Narrow pointwise nodes whose arguments are all known, computed once for the row.
    pub fn emit_ready_narrow(&mut self) {
        let g = self.parts.g;
        for &id in self.parts.nodes {
            let ready = g.op(id).is_pointwise()
                && self.narrow[id.index()]
                && !self.available[id.index()]
                && g.node(id).args.iter().all(|a| self.available[a.index()]);
            if ready {
                self.line(2, &emit::compute(g, id));
                self.available[id.index()] = true;
            }
        }
    }

    /// The wide nodes and input slots `targets` depend on that are not yet in the row's scope, in
    /// topological order (inputs first, by slot).
    pub fn wide_work(&self, targets: &[NodeId]) -> (Vec<usize>, Vec<NodeId>) {
        let g = self.parts.g;
        let mut needed = vec![false; g.nodes.len()];
        let mut stack: Vec<NodeId> = targets.to_vec();
        while let Some(id) = stack.pop() {
            if self.available[id.index()] || std::mem::replace(&mut needed[id.index()], true) {
                continue;
            }
            if self.parts.nodes.contains(&id) {
                stack.extend(g.node(id).args.iter().copied());
            }
        }
        let slots = (0..self.parts.inputs.len()).filter(|&k| needed[self.parts.inputs[k].index()]).collect();
        let nodes = self.parts.nodes.iter().copied().filter(|n| needed[n.index()]).collect();
        (slots, nodes)
    }

    /// Inside a loop over `j`: read the slots (indices into `parts.inputs`) and compute the nodes.
    pub fn emit_wide(&mut self, slots: &[usize], nodes: &[NodeId]) {
        let g = self.parts.g;
        for &k in slots {
            let id = self.parts.inputs[k];
            let s = self.slot(k);
            self.line(3, &format!("const float v{} = {};", id.0, emit::read(s, &format!("bi[{s}] + j * si[{s}]"))));
        }
        for &id in nodes {
            self.line(3, &emit::compute(g, id));
        }
    }

    pub fn emit_reduction(&mut self, r: NodeId) {
        let g = self.parts.g;
        let Op::Reduce(op) = g.op(r) else { return };
        let operand = g.node(r).args[0];
        let (slots, nodes) = self.wide_work(&[operand]);
        let spans: Vec<String> = slots
            .iter()
            .map(|&k| self.slot(k))
            .map(|s| format!("(FUSE_IN{s} != FUSE_SCALAR && si[{s}] != 0)"))
            .collect();
        let len = if spans.is_empty() { "1".to_string() } else { format!("({}) ? n : 1", spans.join(" || ")) };
        let (identity, combine, block) = match op {
            ReduceOp::Sum | ReduceOp::Mean => ("0.0f", "+=", "fuse_block_sum"),
            ReduceOp::Max => ("-__int_as_float(0x7f800000)", "max", "fuse_block_max"),
            ReduceOp::Min => ("__int_as_float(0x7f800000)", "min", "fuse_block_min"),
        };
        let id = r.0;
        self.line(2, &format!("// %{id} = {}(%{}) over the row", op.name(), operand.0));
        self.line(2, &format!("const long long len{id} = {len};"));
        self.line(2, &format!("float acc{id} = {identity};"));
        let value = emit::value(g, operand);
        let fold = if combine == "max" {
            format!("acc{id} = fuse_max(acc{id}, {value});")
        } else if combine == "min" {
            format!("acc{id} = fuse_min(acc{id}, {value});")
        } else {
            format!("acc{id} += {value};")
        };
        self.emit_row_loop(&format!("len{id}"), |k| {
            k.emit_wide(&slots, &nodes);
            k.line(3, &fold);
        });
        let total = format!("{block}(acc{id}, fuse_smem)");
        match op {
            ReduceOp::Mean => self.line(2, &format!("const float v{id} = {total} / (float)len{id};")),
            _ => self.line(2, &format!("const float v{id} = {total};")),
        }
        self.available[r.index()] = true;
    }

    /// A loop over the row's columns `j < len` whose body `body` emits: each thread takes
    /// [`ROW_UNROLL`] columns at a time with no exit between them, so their loads are in flight together
    /// (a plain unrolled loop tests the bound between copies, which keeps each load behind the last), and
    /// the row's tail one column at a time. Each thread visits its columns in the same order either way.
    fn emit_row_loop(&mut self, len: &str, body: impl Fn(&mut Self)) {
        self.line(
            2,
            &format!("for (long long j0 = threadIdx.x; j0 < {len}; j0 += {ROW_UNROLL} * (long long)blockDim.x) {{"),
        );
        self.line(3, &format!("if (j0 + {} * (long long)blockDim.x < {len}) {{", ROW_UNROLL - 1));
        self.line(4, "#pragma unroll");
        self.line(4, &format!("for (int u = 0; u < {ROW_UNROLL}; ++u) {{"));
        self.line(4, "const long long j = j0 + u * (long long)blockDim.x;");
        body(self);
        self.line(4, "}");
        self.line(3, "} else {");
        self.line(3, &format!("for (long long j = j0; j < {len}; j += blockDim.x) {{"));
        body(self);
        self.line(3, "}");
        self.line(3, "}");
        self.line(2, "}");
    }

    /// The last pass writes the wide outputs (once per row for those broadcast along it); thread 0 writes
    /// the narrow ones.
    fn emit_outputs(&mut self) {
        let parts = self.parts;
        let (wide, narrow): (Vec<usize>, Vec<usize>) =
            (0..parts.outputs.len()).partition(|&k| !self.available[parts.outputs[k].index()]);
        if !wide.is_empty() {
            let targets: Vec<NodeId> = wide.iter().map(|&k| parts.outputs[k]).collect();
            let (slots, nodes) = self.wide_work(&targets);
            let store = |k: usize, value: &str| {
                format!("if (so[{k}] != 0 || j == 0) {}", emit::write(k, &format!("bo[{k}] + j * so[{k}]"), value))
            };
            // Four columns per thread at a time, computed before any is stored (a store may alias a later
            // load, so loads are not moved above it): their loads are in flight together.
            self.line(
                2,
                &format!("for (long long j0 = threadIdx.x; j0 < n; j0 += {ROW_UNROLL} * (long long)blockDim.x) {{"),
            );
            self.line(3, &format!("if (j0 + {} * (long long)blockDim.x < n) {{", ROW_UNROLL - 1));
            for &k in &wide {
                self.line(4, &format!("float y{k}[{ROW_UNROLL}];"));
            }
            self.line(4, "#pragma unroll");
            self.line(4, &format!("for (int u = 0; u < {ROW_UNROLL}; ++u) {{"));
            self.line(4, "const long long j = j0 + u * (long long)blockDim.x;");
            self.emit_wide(&slots, &nodes);
            for &k in &wide {
                self.line(4, &format!("y{k}[u] = {};", emit::value(parts.g, parts.outputs[k])));
            }
            self.line(4, "}");
            self.line(4, "#pragma unroll");
            self.line(4, &format!("for (int u = 0; u < {ROW_UNROLL}; ++u) {{"));
            self.line(4, "const long long j = j0 + u * (long long)blockDim.x;");
            for &k in &wide {
                self.line(5, &store(k, &format!("y{k}[u]")));
            }
            self.line(4, "}");
            self.line(3, "} else {");
            self.line(3, "for (long long j = j0; j < n; j += blockDim.x) {");
            self.emit_wide(&slots, &nodes);
            for &k in &wide {
                let value = emit::value(parts.g, parts.outputs[k]);
                self.line(4, &store(k, &value));
            }
            self.line(3, "}");
            self.line(3, "}");
            self.line(2, "}");
        }
        if !narrow.is_empty() {
            self.line(2, "if (threadIdx.x == 0) {");
            for &k in &narrow {
                let value = emit::value(parts.g, parts.outputs[k]);
                self.line(3, &emit::write(k, &format!("bo[{k}]"), &value));
            }
            self.line(2, "}");
        }
    }
}
