//! The skinny GEMM kernel of a Gemm/DualGemm group: the matmuls and the epilogue in one kernel, for few
//! rows (decode). The template (`templates/skinny.cuh`) streams the weights ([out, in] layout, read as
//! `.t()`) once through the tensor cores and calls `fuse_gemm_epilogue(args, row, col, acc0, acc1)` once
//! per element of the product; this file generates that function from the group's epilogue and pastes the
//! template after it, so the kernel is still one static string.
//!
//! The epilogue's arguments are an ordinary `FuseArgs` over the product's domain with the last axis kept
//! apart (as a row kernel's), so `row` is the product's row with any batch axes folded in. The products'
//! own input slots carry no pointer: their values come from the accumulators.

use super::hook::{epilogue_hook, SkinnyEpilogue};
use super::prologue::Prologue;
use super::tiling::GemmTiling;
use crate::codegen::emit::KernelParts;
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::plan::{Group, GroupKind, Product};
use crate::DType;
use std::fmt::Write;

/// The template, spliced after the generated epilogue (see its header comment for the contract): the contract
/// and helpers (`skinny.cuh`), then the kernel (`skinny_kernel.cuh`).
pub const SKINNY_TEMPLATE: &str =
    concat!(include_str!("templates/skinny.cuh"), include_str!("templates/skinny_kernel.cuh"));
/// The skinny template for weights of quantized blocks (`templates/skinny_quant.cuh`), in the same kernel
/// source behind `-DFUSE_SK_WQ` (see [`source`]).
pub const QUANT_SKINNY_TEMPLATE: &str = concat!(
    include_str!("templates/skinny_quant.cuh"),
    include_str!("templates/skinny_q8x.cuh"),
    include_str!("templates/skinny_q8s.cuh")
);
/// The define that lets a skinny kernel copy its first weight chunks before it waits for the kernel before it
/// (only where the host knows that kernel does not write them).
pub const EARLY_WEIGHTS_DEFINE: &str = "-DFUSE_GEMM_EARLY_W=1";
/// The quantized bodies (f32 and 8-bit) send their whole weight rows toward L2 before the grid wait, not each
/// lane's first piece only (`fuse_qg_prefetch_row`).
pub const ROW_PREFETCH_DEFINE: &str = "-DFUSE_QG_ROW_PREFETCH=1";
/// As a task of a one-launch step built with `FUSE_STEP_PREFETCH`: the most bytes of its weights a step block
/// fetches toward L2 while it runs the task before (`=N` appended; the template's own default otherwise).
pub const TASK_PREFETCH_BYTES_DEFINE: &str = "-DFUSE_QG_TASK_PREFETCH_BYTES";
/// The 8-bit bodies take the in-kernel prologue's scaled form where the generated prologue has one (X = s * h:
/// h staged in one pass, s applied before the epilogue; `skinny_q8x.cuh`).
pub const SCALED_PROLOGUE_DEFINE: &str = "-DFUSE_QX_SCALED=1";
/// The streaming 8-bit body copies each step's rows as bulk copies completing on a barrier a stage, issued by
/// one lane a warp, rather than as every lane's 16-byte cp.async units (sm_90 and later; `skinny_q8s.cuh`).
pub const BULK_STREAM_DEFINE: &str = "-DFUSE_QS_BULK=1";
/// The define that gives each warp of a skinny kernel an X ring beside its weight ring (X copied with the
/// weights, S-1 chunks ahead, rather than loaded one chunk ahead): for tasks of a one-launch step, where
/// the latency of each chunk's load is the task's time and a block has its multiprocessor to itself.
/// [`SkinnyConfig::shared_bytes_with`] counts its shared memory.
pub const X_RING_DEFINE: &str = "-DFUSE_SK_XR=1";

/// One config of the template (see its header for what each define does): the defines, the output tile
/// of one 256-thread block, and the dynamic shared memory it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkinnyConfig {
    /// The config's part of the path name (`skinny:<name>`): rows x columns per block, `xs` when the left
    /// operand is staged through shared memory.
    pub name: &'static str,
    pub defines: &'static [&'static str],
    /// 16-row weight tiles per warp, 8-row tiles of the left operand per block, warps splitting K, ring
    /// stages, and whether the left operand goes through shared memory.
    pub mt: usize,
    pub nt: usize,
    pub kw: usize,
    pub stages: usize,
    pub xs: bool,
    /// Blocks that split K across the grid (`FUSE_SK_SP`); above 1 the kernel needs a workspace.
    pub splits: usize,
    /// The rows (inclusive) for which the fast tuning mode tries this config; the full mode tries it
    /// everywhere. From the template's measurements on an H200 (see its header).
    pub fast_rows: (usize, usize),
}

macro_rules! skinny_config {
    ($name:literal: mt $mt:literal, nt $nt:literal, kw $kw:literal, s $s:literal, xs $xs:literal, minb $minb:literal, rows $lo:literal..=$hi:literal) => {
        skinny_config!($name: mt $mt, nt $nt, kw $kw, s $s, xs $xs, minb $minb, sp 1, rows $lo..=$hi)
    };
    ($name:literal: mt $mt:literal, nt $nt:literal, kw $kw:literal, s $s:literal, xs $xs:literal, minb $minb:literal, sp $sp:literal, rows $lo:literal..=$hi:literal) => {
        SkinnyConfig {
            name: $name,
            defines: &[
                concat!("-DFUSE_SK_MT=", $mt),
                concat!("-DFUSE_SK_NT=", $nt),
                concat!("-DFUSE_SK_KW=", $kw),
                concat!("-DFUSE_SK_S=", $s),
                concat!("-DFUSE_SK_XS=", $xs),
                concat!("-DFUSE_SK_MINB=", $minb),
                concat!("-DFUSE_SK_SP=", $sp),
                "-DFUSE_SK_PF=1",
                "-DFUSE_SK_U=1",
            ],
            mt: $mt,
            nt: $nt,
            kw: $kw,
            stages: $s,
            xs: $xs == 1,
            splits: $sp,
            fast_rows: ($lo, $hi),
        }
    };
}

/// Every config of the skinny template (its header's CONFIG SET), in the order they are tried.
pub const SKINNY_CONFIGS: &[SkinnyConfig] = &[
    skinny_config!("r8c16": mt 1, nt 1, kw 8, s 4, xs 0, minb 3, rows 1..=8),
    skinny_config!("r8c32": mt 2, nt 1, kw 8, s 2, xs 0, minb 2, rows 2..=8),
    skinny_config!("r16c16": mt 1, nt 2, kw 8, s 4, xs 0, minb 2, rows 9..=16),
    skinny_config!("r16c64xs": mt 1, nt 2, kw 2, s 4, xs 1, minb 2, rows 9..=16),
    skinny_config!("r32c16": mt 1, nt 4, kw 8, s 4, xs 0, minb 2, rows 17..=32),
    skinny_config!("r32c64xs": mt 1, nt 4, kw 2, s 4, xs 1, minb 2, rows 17..=32),
    skinny_config!("r64c128xs": mt 1, nt 8, kw 1, s 4, xs 1, minb 1, rows 33..=64),
    skinny_config!("r64c32xs": mt 1, nt 8, kw 4, s 4, xs 1, minb 1, rows 33..=64),
    // K split across 2 blocks: twice the blocks where N is small (the down projection's 4096 columns).
    // Correct on the H200 (the GPU suite forces it); not faster yet as measured (see BENCHMARKS.md), where
    // each forced or tuning run also allocated and zeroed its workspace.
    skinny_config!("r8c16k2": mt 1, nt 1, kw 8, s 4, xs 0, minb 3, sp 2, rows 1..=8),
];

impl SkinnyConfig {
    pub fn by_name(name: &str) -> Option<&'static SkinnyConfig> {
        SKINNY_CONFIGS.iter().find(|c| c.name == name)
    }

    /// `-DFUSE_SK_DT` for the dtype, then the config's own defines.
    pub fn defines(&self, dtype: DType) -> Vec<String> {
        let dt = if dtype == DType::F16 { 1 } else { 2 };
        std::iter::once(format!("-DFUSE_SK_DT={dt}")).chain(self.defines.iter().map(|d| d.to_string())).collect()
    }

    /// Dynamic shared memory of one block, the template's `FUSE_SK_SMEM_BYTES` (U = 1):
    /// `512 * S * (16 * (1 + DUAL) * MT + (XS ? KW * NT : 0))`.
    pub fn shared_bytes(&self, dual: bool) -> usize {
        self.shared_bytes_with(dual, false)
    }

    /// Whether `-DFUSE_SK_XR=1` gives this config an X ring (no X staging, at most 2 X tiles).
    pub fn takes_x_ring(&self) -> bool {
        !self.xs && self.nt <= 2
    }

    /// [`SkinnyConfig::shared_bytes`] with the X ring of [`X_RING_DEFINE`] when `x_ring` (and the config takes
    /// one): `+ 512 * S * 8 * NT`.
    pub fn shared_bytes_with(&self, dual: bool, x_ring: bool) -> usize {
        let staged = if self.xs {
            self.kw * self.nt
        } else if x_ring && self.takes_x_ring() {
            8 * self.nt
        } else {
            0
        };
        512 * self.stages * (16 * (1 + usize::from(dual)) * self.mt + staged)
    }
}

impl GemmTiling for SkinnyConfig {
    /// `16 * MT * (8 / KW)`.
    fn cols_per_block(&self) -> usize {
        16 * self.mt * (8 / self.kw)
    }

    /// `8 * NT`.
    fn rows_per_block(&self) -> usize {
        8 * self.nt
    }

    fn splits(&self) -> usize {
        self.splits
    }
}

/// One config of the quantized skinny template (`templates/skinny_quant.cuh`, f32 products of decoded values,
/// or `templates/skinny_q8x.cuh`, 8-bit integer products against X quantized twice in shared memory, the
/// weights loaded into registers or, `templates/skinny_q8s.cuh`, streamed through a shared-memory ring by a
/// grid of one wave): weight rows per warp (per lane group) and rows of the left operand per block, for
/// 256-thread blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantSkinnyConfig {
    /// The config's part of the path name (`qskinny:<name>`).
    pub name: &'static str,
    /// Weight rows per lane group (the f32 body: per warp).
    pub rows_per_warp: usize,
    pub rows: usize,
    /// The rows (inclusive) for which the fast tuning mode and the fixed rule try it.
    pub fast_rows: (usize, usize),
    /// The 8-bit body's lanes per weight row (32, 16, 8 or 4); 0 for the f32 body.
    pub x8_lanes: usize,
    /// The streaming body's ring stages (`FUSE_QS_STAGES`); 0 for the bodies that load into registers.
    pub stages: usize,
}

const fn f32_body(
    name: &'static str,
    rows_per_warp: usize,
    rows: usize,
    fast_rows: (usize, usize),
) -> QuantSkinnyConfig {
    QuantSkinnyConfig { name, rows_per_warp, rows, fast_rows, x8_lanes: 0, stages: 0 }
}

const fn x8_body(
    name: &'static str,
    lanes: usize,
    rows_per_group: usize,
    rows: usize,
    fast_rows: (usize, usize),
) -> QuantSkinnyConfig {
    QuantSkinnyConfig { name, rows_per_warp: rows_per_group, rows, fast_rows, x8_lanes: lanes, stages: 0 }
}

/// The streaming body: the 8-bit body's config with a whole warp a weight row and a ring of `stages`.
const fn x8_stream(
    name: &'static str,
    rows_per_warp: usize,
    rows: usize,
    stages: usize,
    fast_rows: (usize, usize),
) -> QuantSkinnyConfig {
    QuantSkinnyConfig { stages, ..x8_body(name, 32, rows_per_warp, rows, fast_rows) }
}

/// Shared memory an SM of the GPUs the templates target gives its blocks (Hopper's 228 KB), and what each
/// block of those takes besides its own (1 KB): the streaming body's blocks an SM.
const SM_SHARED_BYTES: usize = 228 * 1024;
const BLOCK_RESERVED_BYTES: usize = 1024;
/// The streaming body's blocks an SM at most (its 256 threads need up to 128 registers each at two).
const STREAM_MAX_BLOCKS_PER_SM: usize = 2;

/// Every config of the quantized skinny template, in the order they are tried (the first, the f32 body at
/// one row, reads every operand the template takes: it is the probe of whether the template can run).
pub const QUANT_SKINNY_CONFIGS: &[QuantSkinnyConfig] = &[
    f32_body("r1c8", 1, 1, (1, 1)),
    f32_body("r1c16", 2, 1, (1, 1)),
    f32_body("r2c8", 1, 2, (2, 2)),
    f32_body("r4c8", 1, 4, (3, 4)),
    f32_body("r8c8", 1, 8, (5, 16)),
    f32_body("r4c16", 2, 4, (3, 8)),
    x8_body("x32r1", 32, 1, 1, (1, 1)),
    x8_body("x16r1", 16, 1, 1, (1, 1)),
    x8_body("x16r2", 16, 2, 1, (1, 1)),
    x8_body("x32r2", 32, 2, 1, (1, 1)),
    x8_body("x8r2", 8, 2, 1, (1, 1)),
    x8_body("x16r4", 16, 4, 1, (1, 1)),
    x8_body("x32r1m2", 32, 1, 2, (2, 2)),
    x8_body("x32r1m4", 32, 1, 4, (3, 4)),
    x8_stream("x32r1s4", 1, 1, 4, (1, 1)),
    x8_stream("x32r2s3", 2, 1, 3, (1, 1)),
    x8_stream("x32r1s4m4", 1, 4, 4, (2, 4)),
];

impl QuantSkinnyConfig {
    pub fn by_name(name: &str) -> Option<&'static QuantSkinnyConfig> {
        QUANT_SKINNY_CONFIGS.iter().find(|c| c.name == name)
    }

    /// Whether this config sums every output in the same order as `other`, so that the two give the same
    /// bits: both f32 bodies (a lane's units of each block in the same order, one warp butterfly, whatever
    /// the weight rows a warp and the rows of X a block), or 8-bit bodies of as many lanes a weight row
    /// (a lane's pieces li, li + L, .. each as two halves, then the group's butterfly; the streaming body's
    /// steps are L = 32's pieces in the same order). A one-launch step may then run either as the graph does.
    pub fn sums_like(&self, other: &QuantSkinnyConfig) -> bool {
        self.x8_lanes == other.x8_lanes
    }

    /// The activations' dtype (`-DFUSE_SK_DT`), the weights' block type (`-DFUSE_SK_WQ`), then the config's.
    /// `None` when `weights` is not a block-quantized type or `x` not a float type.
    pub fn defines(&self, x: DType, weights: DType) -> Option<Vec<String>> {
        let dt = crate::codegen::float_dtype_code(x)?;
        if !weights.is_quantized() {
            return None;
        }
        let mut defines = vec![
            format!("-DFUSE_SK_DT={dt}"),
            format!("-DFUSE_SK_WQ={}", crate::codegen::block_dtype_code(weights)),
            format!("-DFUSE_QG_R={}", self.rows_per_warp),
            format!("-DFUSE_QG_BM={}", self.rows),
        ];
        if self.x8_lanes > 0 {
            defines.push(format!("-DFUSE_QX_LANES={}", self.x8_lanes));
        }
        if self.stages > 0 {
            defines.push(format!("-DFUSE_QS_STAGES={}", self.stages));
            defines.push(format!("-DFUSE_QS_SLOT={}", self.slot_bytes(weights)?));
        }
        Some(defines)
    }

    /// The streaming body's slot of one row's step (`FUSE_QS_SLOT`): `x8_lanes` pieces of 64 values (a K
    /// type's quarter blocks, two 32-value blocks each) rounded up to 16 bytes, plus 32 (the stretch's offset
    /// in its first 16-byte unit, and the word past its end that a 2-byte-aligned load reads).
    pub fn slot_bytes(&self, weights: DType) -> Option<usize> {
        let block = weights.block()?;
        let step = match block.elements {
            32 => 2 * self.x8_lanes * block.bytes,
            _ => self.x8_lanes / 4 * block.bytes,
        };
        Some(step.div_ceil(16) * 16 + 32)
    }

    /// Dynamic shared memory a launch over `k` columns of `weights` takes: the 8-bit bodies' rows of X, and
    /// the streaming body's rings (8 warps, its stages, 32 / lanes groups, each weight's rows); the f32 body none.
    pub fn shared_bytes(&self, k: usize, weights: DType, dual: bool) -> usize {
        if self.x8_lanes == 0 {
            return 0;
        }
        let x = self.rows * (2 * k + k / 2);
        let slots = 8 * self.stages * (32 / self.x8_lanes) * (1 + usize::from(dual)) * self.rows_per_warp;
        x + slots * self.slot_bytes(weights).unwrap_or(0)
    }

    /// The streaming body's grid for an `m x n` product: one wave of blocks (as many an SM as its shared memory
    /// allows, at most two) for each row block of X, fewer where `n` has fewer sets of rows than 8 warps'
    /// groups would take; `None` for the other bodies (their grid is their tiles) or past the grid limit.
    /// `most_per_sm` caps the blocks an SM (a one-launch step's tasks run one block an SM at a time).
    pub fn stream_grid(
        &self,
        m: usize,
        n: usize,
        shared_bytes: usize,
        sm_count: usize,
        most_per_sm: usize,
    ) -> Option<u32> {
        if self.stages == 0 {
            return None;
        }
        let most = most_per_sm.clamp(1, STREAM_MAX_BLOCKS_PER_SM);
        let per_sm = (SM_SHARED_BYTES / (shared_bytes + BLOCK_RESERVED_BYTES)).clamp(1, most);
        let row_blocks = m.div_ceil(self.rows);
        let wave = (sm_count.max(1) * per_sm).div_ceil(row_blocks);
        let blocks = n.div_ceil(self.cols_per_block()).min(wave).max(1).checked_mul(row_blocks)?;
        u32::try_from(blocks).ok().filter(|&b| b < (1 << 31))
    }

    /// Why this config cannot read `k` columns of `weights` (two of them where `dual`) whose first two rows start
    /// at `row_starts` (bytes, each weight's two in turn), or `None`: the 8-bit bodies take pieces of 64 values,
    /// each at its type's alignment (skinny_q8x.cuh), the streaming body 16-byte units from each weight's start.
    pub fn rejects(&self, weights: DType, k: usize, dual: bool, row_starts: &[u64]) -> Option<String> {
        if self.x8_lanes == 0 {
            return None;
        }
        if k % 64 != 0 {
            return Some(format!("the 8-bit body takes rows of a multiple of 64 values, not {k}"));
        }
        // Hopper's and Ampere's largest opt-in shared memory of a block (the in-kernel prologue's part too).
        if self.shared_bytes(k, weights, dual) + self.rows * 1024 > 227 * 1024 {
            return Some(format!("{} rows of X over {k} columns do not fit in shared memory", self.rows));
        }
        if self.stages > 0 {
            if let Some(a) = row_starts.iter().step_by(2).find(|&&a| a % 16 != 0) {
                return Some(format!("the streaming body copies 16-byte units from a weight's start, not {a:#x}"));
            }
        }
        // A piece is a K block's part or two 32-value blocks; it starts at the largest power of two up to 16
        // dividing those bytes (skinny_q8x.cuh's fuse_qx_align).
        let block = weights.block()?;
        let piece = if block.elements == 32 { 2 * block.bytes } else { block.bytes };
        let align = 1u64 << piece.trailing_zeros().min(4);
        row_starts
            .iter()
            .find(|&&a| a % align != 0)
            .map(|a| format!("the 8-bit body reads {weights} pieces at {align}-byte alignment; a row starts at {a:#x}"))
    }
}

impl GemmTiling for QuantSkinnyConfig {
    /// 8 warps of `rows_per_warp` weight rows (the 8-bit body: per group of `x8_lanes` lanes).
    fn cols_per_block(&self) -> usize {
        let groups = if self.x8_lanes == 0 { 1 } else { 32 / self.x8_lanes };
        8 * groups * self.rows_per_warp
    }

    fn rows_per_block(&self) -> usize {
        self.rows
    }

    fn splits(&self) -> usize {
        1
    }
}

pub(in crate::codegen) fn epilogue(g: &Graph, grp: &Group) -> Option<SkinnyEpilogue> {
    if !matches!(grp.kind, GroupKind::Gemm | GroupKind::DualGemm) || grp.matmuls.is_empty() || grp.matmuls.len() > 2 {
        return None;
    }
    let nodes: Vec<NodeId> = grp.epilogue().collect();
    if nodes.iter().any(|&n| !g.op(n).is_pointwise() && !matches!(g.op(n), Op::Const(_))) {
        return None;
    }
    if nodes.is_empty() {
        // A lone matmul whose product is the group's output: the epilogue writes it as it is.
        let [mm] = grp.matmuls[..] else { return None };
        return grp.outputs.contains(&mm).then(|| SkinnyEpilogue { inputs: vec![mm], outputs: vec![mm], nodes });
    }
    if grp.matmuls.iter().any(|mm| grp.outputs.contains(mm)) {
        return None;
    }
    let inputs = crate::codegen::reads(g, &nodes);
    if !grp.matmuls.iter().all(|mm| inputs.contains(mm)) {
        return None;
    }
    let outputs = grp.outputs.iter().copied().filter(|o| nodes.contains(o)).collect();
    Some(SkinnyEpilogue { inputs, outputs, nodes })
}

/// The kernel's source: the prelude, the epilogue's body, `fuse_gemm_epilogue`, the in-kernel prologue's
/// functions (when the group has a prologue the template can run), then the template.
pub(in crate::codegen) fn source(
    parts: &KernelParts<'_>,
    matmuls: &[NodeId],
    products: &[Product],
    pro: Option<&Prologue>,
) -> String {
    let mut s = epilogue_hook(parts, matmuls, products, "skinny gemm");
    if let Some(pro) = pro {
        let names: Vec<String> = pro.inputs.iter().map(|id| format!("%{}", id.0)).collect();
        let first = parts.inputs.len();
        let _ =
            writeln!(s, "// in[{first}..] = the prologue's inputs {}; it computes %{}", names.join(", "), pro.lhs.0);
        s.push_str(&super::prologue::hooks(parts.g, pro, first));
    }
    let _ = writeln!(s, "#define FUSE_SKINNY_NAME {}", parts.name);
    let _ = writeln!(s, "#define FUSE_SKINNY_DUAL {}", u8::from(matmuls.len() == 2 && products.is_empty()));
    // Weights of quantized blocks (`-DFUSE_SK_WQ=<type code>`, a runtime choice) or of the activations' dtype.
    s.push_str("#if defined(FUSE_SK_WQ)\n");
    // The streaming body's bulk copies and mbarriers (`-DFUSE_QS_BULK` on sm_90; unused helpers emit nothing).
    s.push_str(crate::codegen::SM90_HEADER);
    s.push_str(QUANT_SKINNY_TEMPLATE);
    s.push_str("#else\n");
    s.push_str(SKINNY_TEMPLATE);
    s.push_str("#endif  // FUSE_SK_WQ\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_follows_the_template_header() {
        // From the CONFIG SET table in skinny.cuh (r8c16k2: r8c16's): dual / single bytes.
        let want = [
            (65536, 32768),
            (65536, 32768),
            (65536, 32768),
            (73728, 40960),
            (65536, 32768),
            (81920, 49152),
            (81920, 49152),
            (131072, 98304),
            (65536, 32768),
        ];
        let got: Vec<(usize, usize)> =
            SKINNY_CONFIGS.iter().map(|c| (c.shared_bytes(true), c.shared_bytes(false))).collect();
        assert_eq!(got, want);
        assert!(SKINNY_TEMPLATE.contains("#define FUSE_SK_SMEM_BYTES"), "the template states its shared memory");
    }

    #[test]
    fn quant_configs_have_unique_names_and_name_their_types() {
        for (i, c) in QUANT_SKINNY_CONFIGS.iter().enumerate() {
            assert_eq!(QuantSkinnyConfig::by_name(c.name), Some(c));
            assert!(QUANT_SKINNY_CONFIGS[..i].iter().all(|o| o.name != c.name));
            match c.x8_lanes {
                // The f32 body: rows x columns of a block; a lane of the warp an output.
                0 => {
                    assert_eq!(c.name, format!("r{}c{}", c.rows, c.cols_per_block()));
                    assert!(c.rows * c.rows_per_warp <= 32, "a lane an output");
                }
                // The 8-bit bodies: lanes a row, rows a group, the ring's stages (and rows of X past one); a
                // lane of the group an output.
                lanes => {
                    let m = if c.rows > 1 { format!("m{}", c.rows) } else { String::new() };
                    let s = if c.stages > 0 { format!("s{}", c.stages) } else { String::new() };
                    assert_eq!(c.name, format!("x{lanes}r{}{s}{m}", c.rows_per_warp));
                    assert!([4, 8, 16, 32].contains(&lanes) && c.rows * c.rows_per_warp <= lanes, "{}", c.name);
                    assert_eq!(c.cols_per_block(), 8 * (32 / lanes) * c.rows_per_warp);
                    assert!(c.defines(DType::F32, DType::Q6_K).unwrap().contains(&format!("-DFUSE_QX_LANES={lanes}")));
                    let ring = |w: DType, dual: bool| {
                        let slots = 8 * c.stages * (32 / lanes) * c.rows_per_warp * if dual { 2 } else { 1 };
                        slots * c.slot_bytes(w).unwrap()
                    };
                    assert_eq!(c.shared_bytes(4096, DType::Q4_K, true), c.rows * 10240 + ring(DType::Q4_K, true));
                    assert!(c.rejects(DType::Q4_K, 4096, false, &[0, 2304]).is_none());
                    assert!(c.rejects(DType::Q4_0, 96, false, &[0]).unwrap().contains("multiple of 64"));
                    assert!(c.rejects(DType::Q4_0, 128, false, &[0, 2]).unwrap().contains("alignment"));
                    assert!(c.rejects(DType::Q6_K, 256, true, &[0, 210, 4096, 4306]).is_none());
                    // The streaming body: a 16-byte-aligned start of each weight (the rows' own alignment does).
                    let unaligned = c.rejects(DType::Q6_K, 256, true, &[0, 210, 4098, 4308]);
                    assert_eq!(unaligned.is_some(), c.stages > 0, "{}: {unaligned:?}", c.name);
                }
            }
            assert!(c.rows <= super::super::PROLOGUE_MAX_ROWS, "the prologue's rows");
            let d = c.defines(DType::BF16, DType::Q4_K).unwrap();
            assert_eq!(d[..2], ["-DFUSE_SK_DT=2".to_string(), "-DFUSE_SK_WQ=21".to_string()]);
            assert!(c.defines(DType::BF16, DType::BF16).is_none() && c.defines(DType::Q8_0, DType::Q8_0).is_none());
        }
        // Every row count up to 16 has a config the fast mode tries.
        for rows in 1..=16 {
            assert!(QUANT_SKINNY_CONFIGS.iter().any(|c| c.fast_rows.0 <= rows && rows <= c.fast_rows.1), "{rows}");
        }
        assert!(QUANT_SKINNY_TEMPLATE.contains("FUSE_SK_WQ") && QUANT_SKINNY_TEMPLATE.contains("FUSE_QG_BM"));
        assert!(QUANT_SKINNY_TEMPLATE.contains("FUSE_QX_LANES") && QUANT_SKINNY_TEMPLATE.contains("__dp4a"));
    }

    #[test]
    fn the_streaming_body_takes_one_wave_of_whole_steps() {
        let c = QuantSkinnyConfig::by_name("x32r1s4").unwrap();
        // 32 pieces a step: 8 Q4_K blocks (1,152 bytes), 64 Q4_0 blocks (1,152), 8 Q6_K blocks (1,680); + 32.
        assert_eq!(c.slot_bytes(DType::Q4_K), Some(1184));
        assert_eq!(c.slot_bytes(DType::Q4_0), Some(1184));
        assert_eq!(c.slot_bytes(DType::Q6_K), Some(1712));
        assert_eq!(c.slot_bytes(DType::F32), None);
        let d = c.defines(DType::F32, DType::Q6_K).unwrap();
        assert!(d.contains(&"-DFUSE_QS_STAGES=4".to_string()) && d.contains(&"-DFUSE_QS_SLOT=1712".to_string()));
        // The 8B gate/up pair (14336 x 4096 Q4_K, dual): X 10 KB + 8 warps x 4 stages x 2 slots: two an SM.
        let bytes = c.shared_bytes(4096, DType::Q4_K, true);
        assert_eq!(bytes, 10240 + 64 * 1184);
        assert_eq!(c.stream_grid(1, 14336, bytes, 132, usize::MAX), Some(264));
        // As a one-launch step's tasks (one block an SM): one block an SM.
        assert_eq!(c.stream_grid(1, 14336, bytes, 132, 1), Some(132));
        // Few rows: a block for each 8 sets; rows of X past the config's: a wave for each row block.
        assert_eq!(c.stream_grid(1, 20, bytes, 132, usize::MAX), Some(3));
        let m4 = QuantSkinnyConfig::by_name("x32r1s4m4").unwrap();
        let m4_bytes = m4.shared_bytes(4096, DType::Q4_K, false);
        assert_eq!(m4.stream_grid(9, 100_000, m4_bytes, 132, usize::MAX), Some(264));
        assert_eq!(m4.stream_grid(9, 100_000, m4_bytes, 132, 1), Some(132));
        // More shared memory than half an SM's: one block an SM; the other bodies: no such grid.
        assert_eq!(c.stream_grid(1, 14336, 150 * 1024, 132, usize::MAX), Some(132));
        assert_eq!(QuantSkinnyConfig::by_name("x32r1").unwrap().stream_grid(1, 14336, 0, 132, usize::MAX), None);
        // Configs that sum alike: the f32 bodies together, the 8-bit bodies by their lanes a row.
        let q = |n: &str| QuantSkinnyConfig::by_name(n).unwrap();
        assert!(
            q("r1c8").sums_like(q("r4c16")) && q("x32r1").sums_like(q("x32r2s3")) && q("x16r1").sums_like(q("x16r4"))
        );
        assert!(!q("r1c8").sums_like(q("x32r1")) && !q("x16r1").sums_like(q("x32r1")));
    }

    #[test]
    fn configs_have_unique_names_and_cover_their_grid() {
        for (i, c) in SKINNY_CONFIGS.iter().enumerate() {
            assert_eq!(SkinnyConfig::by_name(c.name), Some(c));
            assert!(SKINNY_CONFIGS[..i].iter().all(|o| o.name != c.name));
            let blocks = c.grid(17, 1000).unwrap() as usize;
            assert!(blocks * c.cols_per_block() * c.rows_per_block() >= 17 * 1000 * c.splits);
            assert_eq!(blocks, c.tiles(17, 1000) * c.splits);
            assert_eq!(c.workspace_floats(17, 1000, true) > 0, c.splits > 1);
            // The template's header lists each config's shared memory; an H200 block may have 227 KB.
            assert!(c.shared_bytes(true) <= 131072 && c.shared_bytes(false) <= c.shared_bytes(true));
            // The X ring: a warp's S stages of NT 512-byte fragments, where the config takes one.
            let ring = if c.takes_x_ring() { 512 * c.stages * 8 * c.nt } else { 0 };
            assert_eq!(c.shared_bytes_with(true, true), c.shared_bytes(true) + ring, "{}", c.name);
            assert_eq!(c.shared_bytes_with(false, false), c.shared_bytes(false));
            assert!(c.shared_bytes_with(true, true) <= 131072);
            assert_eq!(c.defines(DType::BF16)[0], "-DFUSE_SK_DT=2");
            assert_eq!(c.defines(DType::F16)[0], "-DFUSE_SK_DT=1");
        }
    }
}
