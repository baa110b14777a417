//! The plan in words: one line per kernel (what it fuses, reads and writes) and, given shapes, the memory
//! traffic fusion saves against the unfused plan. What `FUSE_DEBUG=1` prints and `llama_mlp` shows.

use super::{Group, GroupKind, Plan};
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::DType;
use std::fmt::Write;

/// Distinct op names shown in a kernel name; more would make the symbol unreadable.
const MAX_OPS_IN_NAME: usize = 4;

impl Plan {
    /// The kernel's symbol: graph name, group index, kind, then the distinct pointwise, reduce and model ops
    /// in node order (at most four), e.g. `mlp_k0_dualgemm_silu_mul`, `layer_k2_model_attention`. Only `[a-z0-9_]`, never starting with
    /// a digit, so it is a valid C identifier.
    pub fn kernel_name(&self, g: &Graph, i: usize) -> String {
        let mut name = format!("{}_k{i}", identifier(&g.name));
        let Some(group) = self.groups.get(i) else { return name };
        name.push('_');
        name.push_str(group.kind.name());
        let mut ops: Vec<&str> = Vec::new();
        for &n in &group.nodes {
            let op = g.op(n);
            let shown = op.is_pointwise() || matches!(op, Op::Reduce(_) | Op::Model(_));
            if shown && !ops.contains(&op.name()) && ops.len() < MAX_OPS_IN_NAME {
                ops.push(op.name());
            }
        }
        for op in ops {
            name.push('_');
            name.push_str(op);
        }
        name
    }
}

/// Lower-case `[a-z0-9_]` form of a function name (`Block::forward` -> `block_forward`).
fn identifier(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "f_");
        out = out.trim_end_matches('_').to_string();
    }
    out
}

/// What runs a plan, for the words of its description: a group is a kernel launch on the GPU and a pass
/// over memory on the CPU, where fused intermediates stay in registers and cache rather than on chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Gpu,
    Cpu,
}

impl Backend {
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Backend::Gpu => ("kernels", "on chip", "launches"),
            Backend::Cpu => ("passes", "in registers and cache", "passes over memory"),
        }
    }
}

/// [`describe_for`] in the GPU's words.
#[allow(clippy::type_complexity)] // the signature other crates call
pub fn describe(g: &Graph, plan: &Plan, shapes: Option<(&[Vec<usize>], &[Option<DType>])>) -> String {
    describe_for(g, plan, shapes, Backend::Gpu)
}

/// One line per group, then a total line. With `shapes` (per node shapes and dtypes, as `infer_shapes` and
/// `infer_dtypes` return them) each line also says how many bytes of intermediates are never written: a
/// value the unfused plan writes and reads back once but the fused plan keeps. A dtype `None` counts as f32.
#[allow(clippy::type_complexity)]
pub fn describe_for(
    g: &Graph,
    plan: &Plan,
    shapes: Option<(&[Vec<usize>], &[Option<DType>])>,
    backend: Backend,
) -> String {
    let (units, kept_where, saved_what) = backend.words();
    let mut text = String::new();
    let mut total_saved = 0usize;
    for (i, group) in plan.groups.iter().enumerate() {
        let _ = write!(text, "k{i} {} {}: ", group.kind.name(), plan.kernel_name(g, i));
        let fused: Vec<String> = group.nodes.iter().map(|&n| value(g, n)).collect();
        let _ = write!(text, "fuses {}", fused.join(", "));
        // A block-quantized operand says its format: the GEMM dequantizes it in its loads.
        let format = |n: NodeId| match shapes.and_then(|(_, dtypes)| dtypes.get(n.index()).copied().flatten()) {
            Some(d) if d.is_quantized() => format!(" (as {d} blocks)"),
            _ => String::new(),
        };
        let reads: Vec<String> = group.inputs.iter().map(|&n| value(g, n) + &format(n)).collect();
        let _ = write!(text, "; reads {}", list_or_nothing(&reads));
        let writes: Vec<String> = group.outputs.iter().map(|&n| value(g, n)).collect();
        let _ = write!(text, "; writes {}", list_or_nothing(&writes));
        if member_by_member(group, backend) {
            let _ = write!(text, "; runs its {} members one by one", group.nodes.len());
        }
        if let Some((shapes, dtypes)) = shapes {
            let kept = kept_on_chip(group, backend);
            let saved: usize = kept.iter().map(|&n| round_trip_bytes(n, shapes, dtypes)).sum();
            total_saved += saved;
            let _ = write!(text, "; keeps {} intermediates {kept_where}, saving {saved} bytes", kept.len());
        }
        text.push('\n');
    }
    let unfused = Plan::unfused(g).groups.len();
    let fused: usize =
        plan.groups.iter().map(|grp| if member_by_member(grp, backend) { grp.nodes.len() } else { 1 }).sum();
    let _ = write!(
        text,
        "total: {fused} {units} for {} ({unfused} unfused, {} {saved_what} saved)",
        g.name,
        unfused as i64 - fused as i64
    );
    if shapes.is_some() {
        let _ = write!(text, ", {total_saved} bytes of intermediates never written nor read back");
    }
    text.push('\n');
    text
}

/// `%3 silu "silu(x.matmul(w))"`: id, op and the user's source text when there is one.
fn value(g: &Graph, n: NodeId) -> String {
    let op = match g.op(n) {
        Op::Input(_) => "arg",
        op => op.name(),
    };
    match g.label_of(n) {
        "" => format!("%{} {op}", n.0),
        label => format!("%{} {op} {label:?}", n.0),
    }
}

fn list_or_nothing(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_string()
    } else {
        items.join(", ")
    }
}

/// Whether `backend` runs `group` as its members, a pass each: the CPU a rope_append_attention group (the
/// one-launch form is the GPU's).
fn member_by_member(group: &Group, backend: Backend) -> bool {
    backend == Backend::Cpu && group.kind == GroupKind::RopeAppendAttention
}

/// Computed nodes of the group that are not written: the unfused plan writes every one of them (and so does
/// a group run member by member).
fn kept_on_chip(group: &Group, backend: Backend) -> Vec<NodeId> {
    if member_by_member(group, backend) {
        return Vec::new();
    }
    group.nodes.iter().copied().filter(|n| !group.outputs.contains(n)).collect()
}

/// One write and one read of the node's value; 0 when its shape is unknown.
fn round_trip_bytes(n: NodeId, shapes: &[Vec<usize>], dtypes: &[Option<DType>]) -> usize {
    let Some(shape) = shapes.get(n.index()) else { return 0 };
    let dtype = dtypes.get(n.index()).copied().flatten().unwrap_or(DType::F32);
    2 * dtype.storage_bytes(shape.iter().product::<usize>()).unwrap_or(0)
}
