//! The CUDA code generator: each group of a plan becomes the CUDA C of its kernels, as deterministic text.
//!
//! Every kernel has one parameter, a `FuseArgs` struct passed by value (see `prelude.rs` and the kernel ABI):
//! the iteration domain's sizes, then per input slot a pointer, element strides over the domain and a scalar,
//! then per output slot a pointer and strides. Dtypes are not in the source: the runtime specialises it at
//! load time with the `-D` defines of [`defines`], so one string serves every dtype and layout.
//!
//! - Pointwise groups: one grid-stride loop over the domain (a 16-byte vector path when everything is dense).
//! - RowReduce groups: one block per row; each reduction is a pass over the row from global memory that
//!   recomputes the pointwise work it needs, then a block reduction; a last pass writes the row's outputs.
//! - Gemm/DualGemm groups: the matmuls are library calls; a Prologue kernel writes their left operand when
//!   the group has pointwise work on it, an Epilogue kernel reads the products and applies the rest.
//!   Such a group also gets a Skinny kernel (`gemm/skinny.rs`): the matmuls and the epilogue in one kernel,
//!   for few rows, which can also run the prologue as it loads the left operand (`gemm/prologue.rs`), an Mma
//!   kernel (`gemm/mma.rs`), the same for many rows on sm_80 and later, and a Wgmma kernel
//!   (`gemm/wgmma.rs`), the same for many rows on sm_90a; the runtime picks, per shape, among them and the
//!   library calls. `gemm/` mirrors fuse-runtime's `cuda/gemm/`: templates and configs here, launches there.
//!
//! Every kernel source, generated or hand-written (`model/`), is built on the two shared CUDA texts in `cuda/`:
//! [`CUDA_PRELUDE`] (conversions, reductions, grid dependency) and, for sm_90 kernels, [`SM90_HEADER`].

mod cuda;
mod emit;
mod gemm;
mod meta;
mod model;
mod one_launch;
mod pointwise;
mod prelude;
mod rowreduce;
#[cfg(test)]
mod tests;

pub use cuda::{CUDA_PRELUDE, SM90_HEADER};
pub use gemm::{
    GemmTiling, MmaConfig, QuantSkinnyConfig, SkinnyConfig, WgmmaConfig, BULK_STREAM_DEFINE, EARLY_WEIGHTS_DEFINE,
    MMA_CONFIGS, MMA_QUANT_COLUMN, MMA_QUANT_TEMPLATE, MMA_TEMPLATE, PROLOGUE_MAX_ROWS, QUANT_SKINNY_CONFIGS,
    QUANT_SKINNY_TEMPLATE, ROW_PREFETCH_DEFINE, SCALED_PROLOGUE_DEFINE, SKINNY_CONFIGS, SKINNY_TEMPLATE,
    TASK_PREFETCH_BYTES_DEFINE, WGMMA_CONFIGS, WGMMA_TEMPLATE, X_RING_DEFINE,
};
pub use model::{
    attention_launch, attention_launch_with_split_floor, AttentionLaunch, AttentionShape, ModelKernel,
    ATTENTION_COMBINE_THREADS, ATTENTION_DECODE_CLUSTER_DEFINE, ATTENTION_DECODE_CLUSTER_MAX,
    ATTENTION_DECODE_EARLY_DEFINE, ATTENTION_DECODE_MAX_SPLITS, ATTENTION_DECODE_PASS_ROWS,
    ATTENTION_DECODE_ROPE_DEFINE, ATTENTION_DECODE_ROPE_VECTOR_DEFINE, ATTENTION_DECODE_ROWS,
    ATTENTION_DECODE_ROW_GROUP_KEYS, ATTENTION_DECODE_SPLIT_KEYS, ATTENTION_DECODE_THREADS,
    ATTENTION_DECODE_VECTOR_DEFINE, ATTENTION_HEAD_DIMS, ATTENTION_KEY_TILE, ATTENTION_MAX_HEAD_DIM,
    ATTENTION_ROW_TILE, ATTENTION_THREADS, MODEL_BLOCK_THREADS, MODEL_CAT_COPIES, MODEL_RANK, SORT_CHUNK, SORT_THREADS,
};
pub use one_launch::{
    define_parts, is_c_identifier, one_launch_source, step_argument_words, task_refusal, StepLaunchRecord, TaskKernel,
    ONE_LAUNCH_COPY, ONE_LAUNCH_ENTRY, ONE_LAUNCH_FILL, ONE_LAUNCH_MACHINERY, ONE_LAUNCH_MAX_PARAM_WORDS,
    ONE_LAUNCH_MAX_TASK_THREADS, ONE_LAUNCH_SHARED_LAUNCHES, ONE_LAUNCH_TRACE_STAMPS,
};
pub use prelude::{BLOCK_THREADS, VECTOR_ELEMENTS};

use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::plan::{GroupKind, Plan};
use crate::DType;
use gemm::{hook, mma, prologue, skinny, wgmma};
use std::fmt::Write;

/// Most axes a kernel's domain may have (`FuseArgs::sizes` has this many entries).
pub const MAX_RANK: usize = 6;

/// The define that selects the dense 16-byte vector path; the runtime adds it (after [`defines`]) when every
/// tensor input and output is dense row-major over the whole domain, with 16-byte-aligned base pointers.
pub const CONTIGUOUS_DEFINE: &str = "-DFUSE_CONTIGUOUS=1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// One grid-stride loop over the domain; any 1-D grid of [`BLOCK_THREADS`]-thread blocks.
    Pointwise,
    /// One block of [`BLOCK_THREADS`] threads per row (the domain's last axis); grid-stride over rows.
    RowReduce,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The whole group (Pointwise and RowReduce groups).
    Whole,
    /// The pointwise work on a Gemm/DualGemm group's left operand, written before the matmuls.
    Prologue,
    /// The pointwise work on a Gemm/DualGemm group's products, after the matmuls.
    Epilogue,
    /// A Gemm/DualGemm group's matmuls and epilogue in one kernel (after the prologue, if any): the
    /// alternative to library matmuls plus the Epilogue kernel.
    Skinny,
    /// The same as Skinny with the tensor-core template for many rows (sm_90a only).
    Wgmma,
    /// The same with the tiled mma.sync template for many rows (sm_80 and later).
    Mma,
}

impl Role {
    fn suffix(self) -> &'static str {
        match self {
            Role::Whole => "",
            Role::Prologue => "_prologue",
            Role::Epilogue => "_epilogue",
            Role::Skinny => "_skinny",
            Role::Wgmma => "_wgmma",
            Role::Mma => "_mma",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct KernelSpec {
    /// The `extern "C"` symbol: [`Plan::kernel_name`] plus `_prologue`/`_epilogue` for those roles.
    pub name: String,
    /// Self-contained CUDA C (no `#include`); the same graph and plan give byte-identical text. Borrowed when
    /// it is the `&'static str` that `#[fuse]` emitted (see `meta.rs`).
    pub source: std::borrow::Cow<'static, str>,
    pub kind: KernelKind,
    /// Index into `plan.groups`.
    pub group: usize,
    pub role: Role,
    /// Values read: input slot k is `inputs[k]`. An Epilogue reads its group's matmul products.
    pub inputs: Vec<NodeId>,
    /// A Skinny kernel of a group whose prologue it can run itself (with `-DFUSE_GEMM_PRO=1`): where the
    /// prologue's input slots are (see `prologue.rs`).
    pub prologue: Option<PrologueSlots>,
    /// Values written: output slot k is `outputs[k]`. A Prologue writes the matmuls' left operand.
    pub outputs: Vec<NodeId>,
    /// Nodes computed inside, in topological order.
    pub nodes: Vec<NodeId>,
}

/// The input slots of a Skinny kernel's in-kernel prologue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrologueSlots {
    /// The prologue's slots are `first..` (after the epilogue's), read over the left operand's domain.
    pub first: usize,
    /// The slot of the tensor the template streams in place of the left operand.
    pub primary: usize,
}

/// What the runtime passes in an input slot (not [`crate::graph::InputKind`], which is what the macro saw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Tensor(DType),
    /// A number in `FuseIn::scalar`; the pointer is ignored.
    Scalar,
}

/// The kernels of one group, in launch order (Gemm/DualGemm: prologue, then the library matmuls, then the
/// epilogue; either may be absent), then a Gemm/DualGemm group's Skinny, Wgmma and Mma kernels, which each
/// stand in for the matmuls and the epilogue. Empty for an index out of range. Assumes a plan that `Plan::verify` accepts.
/// Same input => byte-identical output.
pub fn group_kernels(g: &Graph, plan: &Plan, group: usize) -> Vec<KernelSpec> {
    let Some(grp) = plan.groups.get(group) else { return Vec::new() };
    GROUPS_GENERATED.with(|n| n.set(n.get() + 1));
    // `cat` and `slice_set` have no generated kernel: the GPU executor runs the hand-written copy
    // (`codegen/model/cat.cu`).
    if grp
        .nodes
        .iter()
        .any(|&n| matches!(g.op(n), Op::View(crate::view::ViewOp::Cat { .. })) || g.op(n).writes_in_place())
    {
        return Vec::new();
    }
    let base = plan.kernel_name(g, group);
    let parts: Vec<(Role, Vec<NodeId>, Vec<NodeId>)> = match grp.kind {
        GroupKind::Pointwise | GroupKind::RowReduce => vec![(Role::Whole, grp.nodes.clone(), grp.outputs.clone())],
        GroupKind::Gemm | GroupKind::DualGemm | GroupKind::MultiGemm => {
            let mut parts = Vec::new();
            if let Some(&first) = grp.matmuls.first() {
                if !grp.prologue.is_empty() {
                    let lhs = g.node(first).args[0];
                    parts.push((Role::Prologue, grp.prologue.clone(), vec![lhs]));
                }
            }
            // A MultiGemm group's products have an epilogue kernel each (their domains differ).
            let epilogues: Vec<Vec<NodeId>> = match grp.kind {
                GroupKind::MultiGemm => grp.products(g).into_iter().map(|p| p.epilogue).collect(),
                _ => vec![grp.epilogue().collect()],
            };
            for epilogue in epilogues.into_iter().filter(|e| !e.is_empty()) {
                let written = grp.outputs.iter().copied().filter(|o| epilogue.contains(o)).collect();
                parts.push((Role::Epilogue, epilogue, written));
            }
            parts
        }
        // Model ops have no generated kernels: the GPU executor runs the hand-written ones (`codegen/model/`).
        GroupKind::Model | GroupKind::RopeAppendAttention => Vec::new(),
    };
    let epilogue_kernels = parts.iter().filter(|p| p.0 == Role::Epilogue).count();
    let mut epilogue_index = 0;
    let mut specs: Vec<KernelSpec> = parts
        .into_iter()
        .map(|(role, nodes, outputs)| {
            // Several epilogue kernels (a MultiGemm group's) are numbered.
            let mut name = format!("{base}{}", role.suffix());
            if role == Role::Epilogue && epilogue_kernels > 1 {
                let _ = write!(name, "{epilogue_index}");
                epilogue_index += 1;
            }
            kernel(g, group, name, role, nodes, outputs)
        })
        .collect();
    let (epilogue, products) = match grp.kind {
        GroupKind::MultiGemm => hook::multi_epilogue(g, grp).map_or((None, Vec::new()), |(e, p)| (Some(e), p)),
        _ => (skinny::epilogue(g, grp), Vec::new()),
    };
    if let Some(epilogue) = epilogue {
        let hook::SkinnyEpilogue { inputs, outputs, nodes } = epilogue;
        let pro = prologue::of(g, grp);
        // The wgmma template reads its operands through tensor maps in its parameter, which a block cannot
        // swap for its product's: a MultiGemm group has no wgmma kernel.
        let roles = [(Role::Skinny, pro.as_ref()), (Role::Wgmma, None), (Role::Mma, None)];
        for (role, pro) in roles.into_iter().filter(|(r, _)| !(products.len() > 1 && *r == Role::Wgmma)) {
            let name = format!("{base}{}", role.suffix());
            let parts = emit::KernelParts { g, name: &name, inputs: &inputs, outputs: &outputs, nodes: &nodes };
            let source = match role {
                Role::Skinny => skinny::source(&parts, &grp.matmuls, &products, pro),
                Role::Wgmma => wgmma::source(&parts, &grp.matmuls),
                _ => mma::source(&parts, &grp.matmuls, &products),
            };
            let mut all_inputs = inputs.clone();
            all_inputs.extend(pro.iter().flat_map(|p| p.inputs.iter().copied()));
            let prologue = pro.map(|p| PrologueSlots { first: inputs.len(), primary: inputs.len() + p.primary });
            let (kind, outputs, nodes) = (KernelKind::Pointwise, outputs.clone(), nodes.clone());
            specs.push(KernelSpec {
                name,
                source: source.into(),
                kind,
                group,
                role,
                inputs: all_inputs,
                prologue,
                outputs,
                nodes,
            });
        }
    }
    specs
}

thread_local! {
    static GROUPS_GENERATED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many groups [`group_kernels`] generated on this thread: tests show with it that the runtime launches
/// the kernels a `#[fuse]` function emitted instead of generating them.
pub fn groups_generated_on_this_thread() -> usize {
    GROUPS_GENERATED.with(|n| n.get())
}

/// The kernels of every group, in plan order.
pub fn plan_kernels(g: &Graph, plan: &Plan) -> Vec<KernelSpec> {
    (0..plan.groups.len()).flat_map(|i| group_kernels(g, plan, i)).collect()
}

fn kernel(g: &Graph, group: usize, name: String, role: Role, nodes: Vec<NodeId>, outputs: Vec<NodeId>) -> KernelSpec {
    let inputs = reads(g, &nodes);
    let kind = if nodes.iter().any(|&n| matches!(g.op(n), Op::Reduce(_))) {
        KernelKind::RowReduce
    } else {
        KernelKind::Pointwise
    };
    let parts = emit::KernelParts { g, name: &name, inputs: &inputs, outputs: &outputs, nodes: &nodes };
    let source = match kind {
        KernelKind::Pointwise => pointwise::source(&parts),
        KernelKind::RowReduce => rowreduce::source(&parts),
    };
    KernelSpec { name, source: source.into(), kind, group, role, inputs, prologue: None, outputs, nodes }
}

/// Values `nodes` read from memory, in order of first use: arguments of theirs computed elsewhere (literals
/// are inlined, so they are not read).
pub(in crate::codegen) fn reads(g: &Graph, nodes: &[NodeId]) -> Vec<NodeId> {
    let mut inputs: Vec<NodeId> = Vec::new();
    for &n in nodes {
        for &a in &g.node(n).args {
            if !nodes.contains(&a) && !matches!(g.op(a), Op::Const(_)) && !inputs.contains(&a) {
                inputs.push(a);
            }
        }
    }
    inputs
}

/// The `-D` defines that specialise `spec` for the given slot kinds, in a fixed order: `FUSE_NIN`,
/// `FUSE_NOUT` (at least 1 each: the runtime pads with a dummy slot), then `FUSE_IN<k>` (0 f32, 1 f16, 2 bf16,
/// 3 scalar) and `FUSE_OUT<k>` (0 f32, 1 f16, 2 bf16). `inputs` and `outputs` follow `spec.inputs` and
/// `spec.outputs`. The runtime appends [`CONTIGUOUS_DEFINE`] when it applies.
pub fn defines(spec: &KernelSpec, inputs: &[InputKind], outputs: &[DType]) -> Vec<String> {
    debug_assert_eq!(inputs.len(), spec.inputs.len(), "{}: one InputKind per input slot", spec.name);
    debug_assert_eq!(outputs.len(), spec.outputs.len(), "{}: one DType per output slot", spec.name);
    let mut out = vec![format!("-DFUSE_NIN={}", inputs.len().max(1)), format!("-DFUSE_NOUT={}", outputs.len().max(1))];
    for (k, input) in inputs.iter().enumerate() {
        let code = match input {
            InputKind::Tensor(d) => dtype_code(*d),
            InputKind::Scalar => 3,
        };
        out.push(format!("-DFUSE_IN{k}={code}"));
    }
    for (k, &d) in outputs.iter().enumerate() {
        out.push(format!("-DFUSE_OUT{k}={}", dtype_code(d)));
    }
    out
}

fn dtype_code(d: DType) -> u8 {
    match d {
        // No kernel reads or writes token ids yet (the runtime refuses them first); 4 is reserved for them.
        DType::U32 => 4,
        q if q.is_quantized() => block_dtype_code(q),
        f => float_dtype_code(f).unwrap_or(0),
    }
}

/// The prelude's code of a float dtype (`FUSE_F32` 0, `FUSE_F16` 1, `FUSE_BF16` 2) in every kernel's
/// defines; `None` for the others.
pub fn float_dtype_code(d: DType) -> Option<u8> {
    match d {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::BF16 => Some(2),
        _ => None,
    }
}

/// The code of a block-quantized dtype in every kernel's defines: 16 + its place in `DType::QUANTIZED`
/// (the same in the generated kernels' and the model kernels' defines).
pub(crate) fn block_dtype_code(d: DType) -> u8 {
    16 + DType::QUANTIZED.iter().position(|&q| q == d).expect("a block-quantized dtype") as u8
}
