//! The in-kernel prologue of the skinny GEMM template: a Gemm/DualGemm group's prologue (pointwise work on
//! the left operand, and row reductions such as rms_norm's mean of squares) computed while the template
//! loads the left operand, so the operand is never written to memory and needs no kernel of its own.
//!
//! The template streams one tensor in place of the left operand, the *primary*: the prologue's first tensor
//! input (the runtime checks that it has the left operand's shape and dtype, dense rows). It calls two
//! generated functions, compiled in only with `-DFUSE_GEMM_PRO=1`, for blocks of at most
//! [`PROLOGUE_MAX_ROWS`] rows:
//! - `fuse_gemm_pro_rows(args, m0, rows, k, part, stride)`, by the whole block once: the narrow values (reductions
//!   and the work on them) of left-operand rows `m0 .. m0 + rows`, kept in shared memory with the rows' slot
//!   offsets. Each reduction is one pass over all the block's rows at once (16-byte loads of the primary,
//!   so the loads of every row are in flight together), each thread's partial per row in `part` (shared
//!   memory the template lends: `PROLOGUE_MAX_ROWS` rows of 256 floats, `stride` floats apart, in its ring
//!   before the main loop, so that the prologue costs no occupancy), then one warp per row sums the 256
//!   partials in a fixed order
//!   (deterministic);
//! - `fuse_gemm_pro8(args, fuse_pro_row[r], j8, a)`: the left operand at block row `r`, columns
//!   `j8 .. j8 + 8`, given the primary's values `a` there (replaced by the result). The template keeps its
//!   row's `FuseProRow` in registers across the main loop.
//!
//! The prologue's input slots follow the epilogue's in the same `FuseArgs`; the runtime gives them strides
//! over the left operand's domain, whose rows are the product's rows.

use crate::codegen::emit::{self, KernelParts};
use crate::codegen::rowreduce::RowKernel;
use crate::graph::{Graph, InputKind, NodeId};
use crate::op::{BinaryOp, Op, ReduceOp};
use crate::plan::Group;

/// Rows of the left operand one block may hold: one warp of the 256-thread block finishes each row's
/// reductions (the skinny configs of 8 rows per block; the template refuses more at compile time).
pub const PROLOGUE_MAX_ROWS: usize = 8;

pub(in crate::codegen) struct Prologue {
    /// Values the prologue reads, in slot order; `inputs[primary]` is what the template streams.
    pub inputs: Vec<NodeId>,
    pub primary: usize,
    pub nodes: Vec<NodeId>,
    /// The matmuls' left operand.
    pub lhs: NodeId,
}

/// The group's prologue as the template can run it, or `None` (no prologue, or no tensor to stream).
pub(in crate::codegen) fn of(g: &Graph, grp: &Group) -> Option<Prologue> {
    let lhs = g.node(*grp.matmuls.first()?).args[0];
    if !grp.prologue.contains(&lhs) {
        return None;
    }
    let row_work = |n: &NodeId| g.op(*n).is_pointwise() || matches!(g.op(*n), Op::Reduce(_));
    if !grp.prologue.iter().all(row_work) {
        return None;
    }
    let inputs = crate::codegen::reads(g, &grp.prologue);
    let scalar = |id: NodeId| match g.op(id) {
        Op::Input(k) => g.inputs.get(k as usize).is_some_and(|i| i.kind == InputKind::Scalar),
        _ => false,
    };
    let primary = inputs.iter().position(|&id| !scalar(id))?;
    // Each reduction's pass runs over the primary's columns, so its operand must span them.
    let depends_on = |from: NodeId, on: NodeId| {
        let mut stack = vec![from];
        let mut seen = vec![false; g.nodes.len()];
        while let Some(n) = stack.pop() {
            if n == on {
                return true;
            }
            if !std::mem::replace(&mut seen[n.index()], true) && grp.prologue.contains(&n) {
                stack.extend(g.node(n).args.iter().copied());
            }
        }
        false
    };
    let reductions = grp.prologue.iter().filter(|&&n| matches!(g.op(n), Op::Reduce(_)));
    if !reductions.clone().all(|&r| depends_on(g.node(r).args[0], inputs[primary])) {
        return None;
    }
    Some(Prologue { inputs, primary, nodes: grp.prologue.clone(), lhs })
}

/// Eight values of a slot from column `j8` on: one 16-byte-aligned vector load where the slot is dense
/// along the row, else one load each.
const READ8: &str = "template <int D>\n\
__device__ __forceinline__ void fuse_pro_read8(const FuseIn& in, long long b, long long s, long long j8, float (&v)[8]) {\n\
  const unsigned long long at = (unsigned long long)in.ptr + (unsigned long long)(b + j8) * (D == FUSE_F32 ? 4 : 2);\n\
  if (D != FUSE_SCALAR && s == 1 && (at & 15) == 0) {\n\
    fuse_read8<D>(in, b + j8, v);\n\
  } else {\n\
#pragma unroll\n\
    for (int e = 0; e < 8; ++e) v[e] = fuse_read<D>(in, b + (j8 + e) * s);\n\
  }\n\
}\n";

/// The two functions, for a kernel whose prologue slots start at `first_slot`.
pub(in crate::codegen) fn hooks(g: &Graph, pro: &Prologue, first_slot: usize) -> String {
    let parts = KernelParts { g, name: "", inputs: &pro.inputs, outputs: &[], nodes: &pro.nodes };
    let mut k = RowKernel::new(&parts, first_slot);
    let slots = pro.inputs.len();
    let primary = pro.inputs[pro.primary];
    let primary_slot = k.slot(pro.primary);
    // Narrow values kept per row, in shared-memory order; the first `top` need no reduction.
    let mut kept: Vec<NodeId> = Vec::new();
    let newly_narrow = |k: &RowKernel<'_, '_>, kept: &[NodeId]| -> Vec<NodeId> {
        pro.nodes
            .iter()
            .copied()
            .filter(|n| k.narrow[n.index()] && k.available[n.index()] && !kept.contains(n))
            .collect()
    };

    k.line(0, "__device__ void fuse_gemm_pro_rows(const FuseArgs& args, long long m0, int rows, long long n, float* part, int stride) {");
    k.line(1, "const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;");
    k.emit_scalar_reads(1);
    k.emit_ready_narrow();
    kept.extend(newly_narrow(&k, &kept));
    let top = kept.len();
    k.line(1, "if (tid < rows) {");
    k.line(2, "long long bi[FUSE_NIN], si[FUSE_NIN], bo[FUSE_NOUT], so[FUSE_NOUT];");
    k.line(2, "fuse_row_offsets(args, m0 + tid, bi, si, bo, so);");
    for i in 0..slots {
        let s = k.slot(i);
        k.line(2, &format!("fuse_pro_row[tid].bi[{i}] = bi[{s}];"));
        k.line(2, &format!("fuse_pro_row[tid].si[{i}] = si[{s}];"));
    }
    for (q, id) in kept.iter().enumerate() {
        k.line(2, &format!("fuse_pro_row[tid].v[{q}] = v{};", id.0));
    }
    k.line(1, "}");
    k.line(1, "__syncthreads();");
    k.line(1, "const long long n8 = n >> 3;  // the template guarantees k % 8 == 0");
    for &r in pro.nodes.iter().filter(|&&r| matches!(g.op(r), Op::Reduce(_))) {
        let Op::Reduce(op) = g.op(r) else { continue };
        let operand = g.node(r).args[0];
        let (identity, combine, warp_reduce) = match op {
            ReduceOp::Sum | ReduceOp::Mean => ("0.0f", "{a} + {b}", "fuse_warp_sum"),
            ReduceOp::Max => ("-__int_as_float(0x7f800000)", "fuse_max({a}, {b})", "fuse_warp_max"),
            ReduceOp::Min => ("__int_as_float(0x7f800000)", "fuse_min({a}, {b})", "fuse_warp_min"),
        };
        let fold = |a: &str, b: &str| combine.replace("{a}", a).replace("{b}", b);
        k.line(1, &format!("{{  // %{} = {}(%{}) over each row", r.0, op.name(), operand.0));
        k.line(2, &format!("for (int r = 0; r < rows; ++r) part[r * stride + tid] = {identity};"));
        k.line(2, "int row = -1;");
        k.line(2, &format!("float acc = {identity};"));
        k.line(2, "long long bi[FUSE_NIN], si[FUSE_NIN];");
        k.line(2, "#pragma unroll 4");
        k.line(2, "for (long long q = tid; q < rows * n8; q += blockDim.x) {");
        k.line(3, "const int r = (int)(q / n8);");
        k.line(
            3,
            &format!("if (r != row) {{ if (row >= 0) part[row * stride + tid] = acc; row = r; acc = {identity}; }}"),
        );
        k.line(3, "const FuseProRow& p = fuse_pro_row[r];");
        for i in 0..slots {
            let s = k.slot(i);
            k.line(3, &format!("bi[{s}] = p.bi[{i}]; si[{s}] = p.si[{i}];"));
        }
        for (q, id) in kept.iter().enumerate().skip(top) {
            k.line(3, &format!("const float v{} = p.v[{q}];", id.0));
        }
        k.line(3, "const long long j8 = 8 * (q - (long long)r * n8);");
        k.line(3, "float xv[8];");
        k.line(3, &format!("fuse_read8<FUSE_IN{primary_slot}>(args.in[{primary_slot}], bi[{primary_slot}] + j8, xv);"));
        k.line(3, "#pragma unroll");
        k.line(3, "for (int e = 0; e < 8; ++e) {");
        k.line(4, "const long long j = j8 + e;");
        k.line(4, &format!("const float v{} = xv[e];", primary.0));
        k.available[primary.index()] = true;
        let (wide_slots, wide_nodes) = k.wide_work(&[operand]);
        k.emit_wide(&wide_slots, &wide_nodes);
        k.line(4, &format!("acc = {};", fold("acc", &emit::value(g, operand))));
        k.line(3, "}");
        k.line(2, "}");
        k.line(2, "if (row >= 0) part[row * stride + tid] = acc;");
        k.line(2, "__syncthreads();");
        // Forget the wide values: the next pass recomputes what it needs.
        for &n in &wide_nodes {
            k.available[n.index()] = false;
        }
        k.available[primary.index()] = false;
        k.line(2, "if (warp < rows) {");
        k.line(3, &format!("float s = {identity};"));
        k.line(3, &format!("for (int i = lane; i < 256; i += 32) s = {};", fold("s", "part[warp * stride + i]")));
        k.line(3, &format!("s = {warp_reduce}(s);"));
        k.line(3, "if (lane == 0) {");
        for (q, id) in kept.iter().enumerate().skip(top) {
            k.line(4, &format!("const float v{} = fuse_pro_row[warp].v[{q}];", id.0));
        }
        let value = if op == ReduceOp::Mean { "s / (float)n" } else { "s" };
        k.line(4, &format!("const float v{} = {value};", r.0));
        k.available[r.index()] = true;
        k.emit_ready_narrow();
        let fresh = newly_narrow(&k, &kept);
        for id in fresh {
            k.line(4, &format!("fuse_pro_row[warp].v[{}] = v{};", kept.len(), id.0));
            kept.push(id);
        }
        k.line(3, "}");
        k.line(2, "}");
        k.line(2, "__syncthreads();");
        k.line(1, "}");
    }
    k.line(0, "}");
    let rows_fn = std::mem::take(&mut k.text);

    // Eight consecutive columns: the narrow values back from shared memory, each other input's eight
    // values (one 16-byte load where it is dense along k), then the wide work the operand needs.
    k.line(0, "__device__ __forceinline__ void fuse_gemm_pro8(const FuseArgs& args, const FuseProRow& p, long long j8, float (&a)[8]) {");
    k.line(1, "long long bi[FUSE_NIN], si[FUSE_NIN];");
    for i in 0..slots {
        let s = k.slot(i);
        k.line(1, &format!("bi[{s}] = p.bi[{i}]; si[{s}] = p.si[{i}];"));
    }
    k.emit_scalar_reads(1);
    for (q, id) in kept.iter().enumerate() {
        k.line(1, &format!("const float v{} = p.v[{q}];", id.0));
    }
    open_columns(&mut k, g, pro, &[pro.lhs]);
    k.line(2, &format!("a[e] = {};", emit::value(g, pro.lhs)));
    k.line(1, "}");
    k.line(0, "}");
    let apply_fn = std::mem::take(&mut k.text);

    let kept_len = kept.len().max(1);
    let scaled_fns = scaled(g, pro, first_slot).unwrap_or_default();
    format!(
        "#if FUSE_GEMM_PRO\n#define FUSE_GEMM_PRO_ROWS {PROLOGUE_MAX_ROWS}\n\
         struct FuseProRow {{ long long bi[{slots}], si[{slots}]; float v[{kept_len}]; }};\n\
         __shared__ FuseProRow fuse_pro_row[FUSE_GEMM_PRO_ROWS];\n{READ8}{rows_fn}{apply_fn}{scaled_fns}#endif  // FUSE_GEMM_PRO\n"
    )
}

/// The left operand as a product of factors, split into those that need a reduction (`row`: one value a
/// row, given their other inputs are constant along the row, which the kernel checks at run time) and the
/// rest (`element`: per element, needing no reduction); with the nodes and input slots the row factors
/// need besides the reductions. `None` when the operand is no such product, a row factor reads the primary
/// other than through a reduction, or a reduction's operand needs another reduction (a variance after a
/// mean).
struct Factors {
    row: Vec<NodeId>,
    element: Vec<NodeId>,
    row_nodes: Vec<NodeId>,
    row_slots: Vec<usize>,
}

/// The 8-column loop's head, inside `fuse_gemm_pro8` and its scaled form: each wide input's 8 values (one
/// 16-byte load where dense along k), then per element the primary operand's value (the template's load, so
/// available from here on), the inputs' and the wide nodes `targets` need. The caller writes the loop's last
/// lines and closes it.
fn open_columns(k: &mut RowKernel<'_, '_>, g: &Graph, pro: &Prologue, targets: &[NodeId]) {
    let primary = pro.inputs[pro.primary];
    k.available[primary.index()] = true;
    let (wide_slots, wide_nodes) = k.wide_work(targets);
    for &i in &wide_slots {
        let s = k.slot(i);
        k.line(1, &format!("float in{s}[8];"));
        k.line(1, &format!("fuse_pro_read8<FUSE_IN{s}>(args.in[{s}], bi[{s}], si[{s}], j8, in{s});"));
    }
    k.line(1, "#pragma unroll");
    k.line(1, "for (int e = 0; e < 8; ++e) {");
    k.line(2, &format!("const float v{} = a[e];", primary.0));
    for &i in &wide_slots {
        let s = k.slot(i);
        k.line(2, &format!("const float v{} = in{s}[e];", pro.inputs[i].0));
    }
    for &n in &wide_nodes {
        k.line(2, &emit::compute(g, n));
    }
}

fn factors(g: &Graph, pro: &Prologue) -> Option<Factors> {
    let mut needs_reduction = vec![false; g.nodes.len()];
    for &n in &pro.nodes {
        needs_reduction[n.index()] =
            matches!(g.op(n), Op::Reduce(_)) || g.node(n).args.iter().any(|a| needs_reduction[a.index()]);
    }
    let (mut row, mut element) = (Vec::new(), Vec::new());
    let mut stack = vec![pro.lhs];
    while let Some(n) = stack.pop() {
        if needs_reduction[n.index()] && pro.nodes.contains(&n) && g.op(n) == Op::Binary(BinaryOp::Mul) {
            stack.extend(g.node(n).args.iter().rev().copied());
        } else if needs_reduction[n.index()] {
            row.push(n);
        } else {
            element.push(n);
        }
    }
    // What the row factors read besides the reductions' results: computed at column 0.
    let mut in_cone = vec![false; g.nodes.len()];
    let mut stack = row.clone();
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut in_cone[n.index()], true) || matches!(g.op(n), Op::Reduce(_)) {
            continue;
        }
        if pro.nodes.contains(&n) {
            stack.extend(g.node(n).args.iter().copied());
        }
    }
    let primary = pro.inputs[pro.primary];
    let row_nodes: Vec<NodeId> =
        pro.nodes.iter().copied().filter(|n| in_cone[n.index()] && !matches!(g.op(*n), Op::Reduce(_))).collect();
    let row_slots: Vec<usize> = (0..pro.inputs.len()).filter(|&i| in_cone[pro.inputs[i].index()]).collect();
    let reductions = pro.nodes.iter().filter(|&&r| matches!(g.op(r), Op::Reduce(_)));
    let operands_plain = reductions.clone().all(|&r| !needs_reduction[g.node(r).args[0].index()]);
    let usable = !row.is_empty() && !element.is_empty() && !in_cone[primary.index()] && operands_plain;
    usable.then_some(Factors { row, element, row_nodes, row_slots })
}

/// Row i's folds from a block's 8 warps (`red[w][i]`) merged in warp order, so that every template that
/// takes the scaled form sums a row's reductions alike.
const RED_WARPS: &str = "template <int ROWS>\n\
__device__ __forceinline__ void fuse_gemm_pro_red_warps(const float (&red)[8][ROWS][FUSE_GEMM_PRO_REDUCTIONS], int i, float (&total)[FUSE_GEMM_PRO_REDUCTIONS]) {\n\
#pragma unroll\n\
  for (int q = 0; q < FUSE_GEMM_PRO_REDUCTIONS; ++q) total[q] = red[0][i][q];\n\
#pragma unroll\n\
  for (int w = 1; w < 8; ++w) fuse_gemm_pro_red_merge(total, red[w][i]);\n\
}\n";

/// The scaled form of the prologue (`FUSE_GEMM_PRO_CAN_SCALE`), where the left operand is `s * h` with `s`
/// one value a row (`factors`): the template then streams `h` from the start of its main loop, folds each
/// reduction's operand over the elements it loads, and multiplies each row's sums by `s` before the
/// epilogue, with no pass over the rows before the main loop (`skinny.cuh`). The functions:
/// - `fuse_gemm_pro_offsets(args, row, p)`: the row's slot offsets;
/// - `fuse_gemm_pro_can_scale(p)`: whether `s`'s other inputs are constant along the row (scalars, or a
///   stride of 0 there), which the factoring needs;
/// - `fuse_gemm_pro_red_init(red)`, `fuse_gemm_pro_red_merge(a, b)`: the reductions' identities and folds;
///   `fuse_gemm_pro_red_warps(red, i, total)`: row i's folds of 8 warps merged in warp order;
/// - `fuse_gemm_pro8_scaled(args, p, j8, a, red)`: `h` at 8 columns in place of the primary's values `a`,
///   each reduction's operand folded into `red`;
/// - `fuse_gemm_pro_scale(args, p, n, red)`: `s` from the reductions over all `n` columns.
fn scaled(g: &Graph, pro: &Prologue, first_slot: usize) -> Option<String> {
    let f = factors(g, pro)?;
    let parts = KernelParts { g, name: "", inputs: &pro.inputs, outputs: &[], nodes: &pro.nodes };
    let mut k = RowKernel::new(&parts, first_slot);
    let reductions: Vec<(NodeId, ReduceOp)> = pro
        .nodes
        .iter()
        .filter_map(|&r| match g.op(r) {
            Op::Reduce(op) => Some((r, op)),
            _ => None,
        })
        .collect();
    let fold = |op: ReduceOp, a: &str, b: &str| match op {
        ReduceOp::Sum | ReduceOp::Mean => format!("{a} + {b}"),
        ReduceOp::Max => format!("fuse_max({a}, {b})"),
        ReduceOp::Min => format!("fuse_min({a}, {b})"),
    };
    let identity = |op: ReduceOp| match op {
        ReduceOp::Sum | ReduceOp::Mean => "0.0f",
        ReduceOp::Max => "-__int_as_float(0x7f800000)",
        ReduceOp::Min => "__int_as_float(0x7f800000)",
    };
    let slots = pro.inputs.len();
    let offsets_from_row = |k: &mut RowKernel<'_, '_>| {
        k.line(1, "long long bi[FUSE_NIN], si[FUSE_NIN];");
        for i in 0..slots {
            let s = k.slot(i);
            k.line(1, &format!("bi[{s}] = p.bi[{i}]; si[{s}] = p.si[{i}];"));
        }
    };
    k.line(0, "#define FUSE_GEMM_PRO_CAN_SCALE 1");
    k.line(0, &format!("#define FUSE_GEMM_PRO_REDUCTIONS {}", reductions.len()));
    k.line(
        0,
        "__device__ __forceinline__ void fuse_gemm_pro_offsets(const FuseArgs& args, long long row, FuseProRow& p) {",
    );
    k.line(1, "long long bi[FUSE_NIN], si[FUSE_NIN], bo[FUSE_NOUT], so[FUSE_NOUT];");
    k.line(1, "fuse_row_offsets(args, row, bi, si, bo, so);");
    for i in 0..slots {
        let s = k.slot(i);
        k.line(1, &format!("p.bi[{i}] = bi[{s}]; p.si[{i}] = si[{s}];"));
    }
    k.line(0, "}");
    k.line(0, "__device__ __forceinline__ bool fuse_gemm_pro_can_scale(const FuseProRow& p) {");
    let constant: Vec<String> =
        f.row_slots.iter().map(|&i| format!("(FUSE_IN{} == FUSE_SCALAR || p.si[{i}] == 0)", k.slot(i))).collect();
    k.line(1, &format!("return {};", if constant.is_empty() { "true".to_string() } else { constant.join(" && ") }));
    k.line(0, "}");
    k.line(0, "__device__ __forceinline__ void fuse_gemm_pro_red_init(float (&red)[FUSE_GEMM_PRO_REDUCTIONS]) {");
    for (q, &(_, op)) in reductions.iter().enumerate() {
        k.line(1, &format!("red[{q}] = {};", identity(op)));
    }
    k.line(0, "}");
    k.line(0, "__device__ __forceinline__ void fuse_gemm_pro_red_merge(float (&a)[FUSE_GEMM_PRO_REDUCTIONS], const float (&b)[FUSE_GEMM_PRO_REDUCTIONS]) {");
    for (q, &(_, op)) in reductions.iter().enumerate() {
        k.line(1, &format!("a[{q}] = {};", fold(op, &format!("a[{q}]"), &format!("b[{q}]"))));
    }
    k.line(0, "}");
    k.text.push_str(RED_WARPS);
    // h and the reductions' operands at 8 columns: scalars first, then the other inputs' 8 values, then per
    // element the work on them.
    k.line(0, "__device__ __forceinline__ void fuse_gemm_pro8_scaled(const FuseArgs& args, const FuseProRow& p, long long j8, float (&a)[8], float (&red)[FUSE_GEMM_PRO_REDUCTIONS]) {");
    offsets_from_row(&mut k);
    k.emit_scalar_reads(1);
    k.emit_ready_narrow();
    let targets: Vec<NodeId> =
        f.element.iter().copied().chain(reductions.iter().map(|&(r, _)| g.node(r).args[0])).collect();
    open_columns(&mut k, g, pro, &targets);
    for (q, &(r, op)) in reductions.iter().enumerate() {
        let operand = emit::value(g, g.node(r).args[0]);
        k.line(2, &format!("red[{q}] = {};", fold(op, &format!("red[{q}]"), &operand)));
    }
    let h: Vec<String> = f.element.iter().map(|&w| emit::value(g, w)).collect();
    k.line(2, &format!("a[e] = {};", h.join(" * ")));
    k.line(1, "}");
    k.line(0, "}");
    // s: the reductions' results, the row factors' other inputs at column 0, the work on them.
    k.line(0, "__device__ __forceinline__ float fuse_gemm_pro_scale(const FuseArgs& args, const FuseProRow& p, long long n, const float (&red)[FUSE_GEMM_PRO_REDUCTIONS]) {");
    offsets_from_row(&mut k);
    for (q, &(r, op)) in reductions.iter().enumerate() {
        let value = if op == ReduceOp::Mean { format!("red[{q}] / (float)n") } else { format!("red[{q}]") };
        k.line(1, &format!("const float v{} = {value};", r.0));
    }
    for &i in &f.row_slots {
        let s = k.slot(i);
        k.line(1, &format!("const float v{} = {};", pro.inputs[i].0, emit::read(s, &format!("bi[{s}]"))));
    }
    for &n in &f.row_nodes {
        k.line(1, &emit::compute(g, n));
    }
    let scale: Vec<String> = f.row.iter().map(|&n| emit::value(g, n)).collect();
    k.line(1, &format!("return {};", scale.join(" * ")));
    k.line(0, "}");
    Some(k.text)
}
