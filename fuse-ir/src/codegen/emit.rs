//! Text shared by both kernel shapes: the header comment, one f32 variable per node (`v<id>`), literals, and
//! the per-slot reads and writes (each slot has its own dtype define, so these lines are emitted per slot).

use super::prelude::{BLOCK_THREADS, PRELUDE};
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::view::ViewOp;
use crate::DType;
use std::fmt::Write;

/// What a kernel is made of; see `KernelSpec`.
pub(super) struct KernelParts<'a> {
    pub g: &'a Graph,
    pub name: &'a str,
    pub inputs: &'a [NodeId],
    pub outputs: &'a [NodeId],
    pub nodes: &'a [NodeId],
}

impl KernelParts<'_> {
    /// The header comment (what the kernel computes, in the user's words) and the prelude.
    pub fn preamble(&self, kind: &str) -> String {
        let g = self.g;
        let mut s = format!("// fuse {kind} kernel `{}` of `{}`\n", self.name, comment_text(&g.name));
        for (k, &id) in self.inputs.iter().enumerate() {
            let _ = writeln!(s, "// in[{k}]  = {}", describe(g, id));
        }
        for (k, &id) in self.outputs.iter().enumerate() {
            let _ = writeln!(s, "// out[{k}] = {}", describe(g, id));
        }
        for &id in self.nodes {
            let _ = writeln!(s, "//   {}", describe(g, id));
        }
        s.push_str(PRELUDE);
        s.push('\n');
        s
    }

    /// The kernel's signature (the ABI: one `FuseArgs` by value) and its first statements: wait for the
    /// kernel before it (a launch may overlap it, see the prelude), then let the next one launch. (`FUSE_KERNEL`:
    /// the prelude's entry macro, a device function in a one-launch step.)
    pub fn signature(&self) -> String {
        format!(
            "FUSE_KERNEL({BLOCK_THREADS}) {}(FUSE_KERNEL_PARAM(FuseArgs) args) {{\n  fuse_grid_wait();\n  fuse_grid_release();\n",
            self.name
        )
    }
}

/// `%7 = silu(%6)  "silu(x.matmul(w))"`, safe inside a `//` comment.
fn describe(g: &Graph, id: NodeId) -> String {
    let n = g.node(id);
    let args: Vec<String> = n.args.iter().map(|a| format!("%{}", a.0)).collect();
    let op = match n.op {
        Op::Input(k) => format!("arg {}", g.inputs.get(k as usize).map_or("?", |i| i.name.as_str())),
        Op::Const(c) => format!("const {c:?}"),
        Op::Cast(d) => format!("to_dtype({})", d.name()),
        op => op.name().to_string(),
    };
    let call = if args.is_empty() { op } else { format!("{op}({})", args.join(", ")) };
    match without_location(g.label_of(id)) {
        "" => format!("%{} = {call}", id.0),
        label => format!("%{} = {call}  \"{}\"", id.0, comment_text(label)),
    }
}

/// A label without the ` at FILE:LINE` the macro appends: kernel sources quote the expression only, so that
/// moving a function to other lines leaves its kernels (and their compiled cubins) as they are.
fn without_location(label: &str) -> &str {
    match label.rsplit_once(" at ") {
        Some((text, at)) if at.rsplit_once(':').is_some_and(|(_, line)| line.parse::<u32>().is_ok()) => text,
        _ => label,
    }
}

/// Printable ASCII only: a backslash would splice the next line into a `//` comment, a newline end it.
fn comment_text(text: &str) -> String {
    text.chars().map(|c| if (c.is_ascii_graphic() && c != '\\') || c == ' ' { c } else { '?' }).collect()
}

/// The variable holding a node's value, or the literal itself.
pub(super) fn value(g: &Graph, id: NodeId) -> String {
    match g.op(id) {
        Op::Const(c) => literal(c),
        _ => format!("v{}", id.0),
    }
}

/// `const float v<id> = <expr>;` for a pointwise node (arithmetic in f32; a cast rounds to its dtype).
pub(super) fn compute(g: &Graph, id: NodeId) -> String {
    let n = g.node(id);
    let arg = |i: usize| value(g, n.args[i]);
    let expr = match n.op {
        Op::Unary(u) => u.cuda(&arg(0)),
        Op::Binary(b) => b.cuda(&arg(0), &arg(1)),
        Op::Where => format!("({} != 0.0f ? {} : {})", arg(0), arg(1), arg(2)),
        Op::Cast(DType::F32) => arg(0),
        Op::Cast(DType::F16) => format!("fuse_round_f16({})", arg(0)),
        Op::Cast(DType::BF16) => format!("fuse_round_bf16({})", arg(0)),
        // `contiguous` is a copy: the kernel reads its operand through strides and writes it dense.
        Op::View(ViewOp::Contiguous | ViewOp::BroadcastAs { .. }) => arg(0),
        // Only pointwise nodes are computed this way; the kernel shapes handle the rest.
        op => format!("0.0f /* {} is not pointwise */", op.name()),
    };
    format!("const float v{} = {expr};", id.0)
}

/// An f32 literal (graph literals are f64; kernels compute in f32, as the CPU backend does): the shortest
/// text that reads back to the same f32, so the output is deterministic and exact.
pub(super) fn literal(c: f64) -> String {
    let v = c as f32;
    if v.is_nan() {
        "__int_as_float(0x7fc00000)".to_string()
    } else if v.is_infinite() {
        let inf = "__int_as_float(0x7f800000)";
        if v > 0.0 {
            inf.to_string()
        } else {
            format!("(-{inf})")
        }
    } else if v.is_sign_negative() {
        format!("(-{:?}f)", -v)
    } else {
        format!("{v:?}f")
    }
}

/// `x[k]`-style read of input slot `k` at element offset `offset`.
pub(super) fn read(k: usize, offset: &str) -> String {
    format!("fuse_read<FUSE_IN{k}>(args.in[{k}], {offset})")
}

/// Statement writing `value` to output slot `k` at element offset `offset`.
pub(super) fn write(k: usize, offset: &str, value: &str) -> String {
    format!("fuse_write<FUSE_OUT{k}>(args.out[{k}], {offset}, {value});")
}
