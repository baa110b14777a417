//! The in-kernel prologue of the skinny GEMM template: a Gemm/DualGemm group's prologue (pointwise work on
//! the left operand, and row reductions such as rms_norm's mean of squares) computed while the template
//! loads the left operand, so the operand is never written to memory and needs no kernel of its own.
//!
//! The template streams one tensor in place of the left operand, the *primary*: the prologue's first tensor
//! input (the runtime checks that it has the left operand's shape and dtype). It calls two generated
//! functions, compiled in only with `-DFUSE_GEMM_PRO=1`:
//! - `fuse_gemm_pro_rows(args, m0, rows, k)`, by the whole block once: the narrow values (reductions and the
//!   work on them) of left-operand rows `m0 .. m0 + rows`, each a pass over the row with a block
//!   reduction as in a row kernel, kept in shared memory with the rows' slot offsets;
//! - `fuse_gemm_pro(args, r, j, a)`: the left operand at block row `r`, column `j`, given the primary's
//!   value `a` there.
//!
//! The prologue's input slots follow the epilogue's in the same `FuseArgs`; the runtime gives them strides
//! over the left operand's domain, whose rows are the product's rows.

use super::emit::{self, KernelParts};
use super::rowreduce::RowKernel;
use crate::graph::{Graph, InputKind, NodeId};
use crate::op::Op;
use crate::plan::Group;

/// Rows of the left operand one block may hold (the skinny template's largest row tile).
pub const PROLOGUE_MAX_ROWS: usize = 64;

pub(super) struct Prologue {
    /// Values the prologue reads, in slot order; `inputs[primary]` is what the template streams.
    pub inputs: Vec<NodeId>,
    pub primary: usize,
    pub nodes: Vec<NodeId>,
    /// The matmuls' left operand.
    pub lhs: NodeId,
}

/// The group's prologue as the template can run it, or `None` (no prologue, or no tensor to stream).
pub(super) fn of(g: &Graph, grp: &Group) -> Option<Prologue> {
    let lhs = g.node(*grp.matmuls.first()?).args[0];
    if !grp.prologue.contains(&lhs) {
        return None;
    }
    let row_work = |n: &NodeId| g.op(*n).is_pointwise() || matches!(g.op(*n), Op::Reduce(_));
    if !grp.prologue.iter().all(row_work) {
        return None;
    }
    let inputs = super::reads(g, &grp.prologue);
    let scalar = |id: NodeId| match g.op(id) {
        Op::Input(k) => g.inputs.get(k as usize).is_some_and(|i| i.kind == InputKind::Scalar),
        _ => false,
    };
    let primary = inputs.iter().position(|&id| !scalar(id))?;
    Some(Prologue { inputs, primary, nodes: grp.prologue.clone(), lhs })
}

/// The two functions, for a kernel whose prologue slots start at `first_slot`.
pub(super) fn hooks(g: &Graph, pro: &Prologue, first_slot: usize) -> String {
    let parts = KernelParts { g, name: "", inputs: &pro.inputs, outputs: &[], nodes: &pro.nodes };
    let mut k = RowKernel::new(&parts, first_slot);
    let slots = pro.inputs.len();

    // The row pass, as a row kernel's, then the row's narrow values and slot offsets to shared memory.
    k.line(0, "__device__ void fuse_gemm_pro_rows(const FuseArgs& args, long long m0, int rows, long long n) {");
    k.line(1, "__shared__ float fuse_smem[32];");
    k.emit_scalar_reads(1);
    k.line(1, "for (int r = 0; r < rows; ++r) {");
    k.line(2, "long long bi[FUSE_NIN], si[FUSE_NIN], bo[FUSE_NOUT], so[FUSE_NOUT];");
    k.line(2, "fuse_row_offsets(args, m0 + r, bi, si, bo, so);");
    k.emit_ready_narrow();
    for &r in pro.nodes.iter().filter(|&&r| matches!(g.op(r), Op::Reduce(_))) {
        k.emit_reduction(r);
        k.emit_ready_narrow();
    }
    let kept: Vec<NodeId> = pro.nodes.iter().copied().filter(|n| k.narrow[n.index()] && k.available[n.index()]).collect();
    k.line(2, "if (threadIdx.x == 0) {");
    for i in 0..slots {
        let s = k.slot(i);
        k.line(3, &format!("fuse_pro_row[r].bi[{i}] = bi[{s}];"));
        k.line(3, &format!("fuse_pro_row[r].si[{i}] = si[{s}];"));
    }
    for (q, id) in kept.iter().enumerate() {
        k.line(3, &format!("fuse_pro_row[r].v[{q}] = v{};", id.0));
    }
    k.line(2, "}");
    k.line(1, "}");
    k.line(0, "}");
    let rows_fn = std::mem::take(&mut k.text);

    // One element: the narrow values back from shared memory, then the wide work the operand needs.
    k.line(0, "__device__ __forceinline__ float fuse_gemm_pro(const FuseArgs& args, int r, long long j, float a) {");
    k.line(1, "const FuseProRow& p = fuse_pro_row[r];");
    k.line(1, "long long bi[FUSE_NIN], si[FUSE_NIN];");
    for i in 0..slots {
        let s = k.slot(i);
        k.line(1, &format!("bi[{s}] = p.bi[{i}];"));
        k.line(1, &format!("si[{s}] = p.si[{i}];"));
    }
    k.emit_scalar_reads(1);
    for (q, id) in kept.iter().enumerate() {
        k.line(1, &format!("const float v{} = p.v[{q}];", id.0));
    }
    let primary = pro.inputs[pro.primary];
    k.line(1, &format!("const float v{} = a;", primary.0));
    k.available[primary.index()] = true;
    let (wide_slots, wide_nodes) = k.wide_work(&[pro.lhs]);
    k.emit_wide(&wide_slots, &wide_nodes);
    k.line(1, &format!("return {};", emit::value(g, pro.lhs)));
    k.line(0, "}");
    let apply_fn = std::mem::take(&mut k.text);

    let kept_len = kept.len().max(1);
    format!(
        "#if FUSE_GEMM_PRO\n#define FUSE_GEMM_PRO_ROWS {PROLOGUE_MAX_ROWS}\n\
         struct FuseProRow {{ long long bi[{slots}], si[{slots}]; float v[{kept_len}]; }};\n\
         __shared__ FuseProRow fuse_pro_row[FUSE_GEMM_PRO_ROWS];\n{rows_fn}{apply_fn}#endif  // FUSE_GEMM_PRO\n"
    )
}
