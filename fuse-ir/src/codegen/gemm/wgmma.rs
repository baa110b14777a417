//! The tensor-core GEMM kernel of a Gemm/DualGemm group for many rows on sm_90a (`templates/wgmma.cuh`:
//! TMA loads, a pipelined shared-memory ring, wgmma, warp-specialised), with the same epilogue hook as the
//! skinny template (`skinny.rs`), so any epilogue that fits one fits the other.
//!
//! The template names one `wgmma.mma_async` per accumulator width; this file writes those wrappers (one
//! per row count `BM` of the config set, bf16 and f16), so the kernel is still one static string.

use super::hook::epilogue_hook;
use super::tiling::GemmTiling;
use crate::codegen::emit::KernelParts;
use crate::graph::NodeId;
use crate::DType;
use std::fmt::Write;

/// The template, spliced after the generated epilogue and the wgmma wrappers.
pub const WGMMA_TEMPLATE: &str = include_str!("templates/wgmma.cuh");

/// One config of the template: rows of X per block (`BM`, the instruction's N), consumer warpgroups (64
/// weight rows each), ring stages, blocks splitting K, blocks per cluster sharing weight tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaConfig {
    /// The config's part of the path name (`wgmma:<name>`).
    pub name: &'static str,
    pub bm: usize,
    pub cw: usize,
    pub stages: usize,
    pub splits: usize,
    /// Blocks of a cluster along m that share each weight tile through TMA multicast (1 or 2).
    pub cluster: usize,
    /// The rows (inclusive) for which the fast tuning mode tries this config; the full mode tries all.
    pub fast_rows: (usize, usize),
}

/// `fast_rows` of a config the fast tuning mode never tries.
const NEVER: (usize, usize) = (usize::MAX, 0);

/// Shared memory an H200 block may have (227 KB).
pub const MAX_SHARED_BYTES: usize = 232_448;

const fn config(
    name: &'static str,
    bm: usize,
    cw: usize,
    stages: usize,
    splits: usize,
    fast_rows: (usize, usize),
) -> WgmmaConfig {
    WgmmaConfig { name, bm, cw, stages, splits, cluster: 1, fast_rows }
}

/// A config whose blocks pair up along m, each loading half of the weight tile for both.
const fn paired(name: &'static str, bm: usize, fast_rows: (usize, usize)) -> WgmmaConfig {
    WgmmaConfig { name, bm, cw: 2, stages: 4, splits: 1, cluster: 2, fast_rows }
}

/// Every config, in the order they are tried. Split-K (`k<SP>`) is for products with few weight rows (the
/// down projection's 4096 give 32 blocks of 128), `c1` for one consumer warpgroup (two blocks per SM, twice
/// the blocks), `m2` for pairs of blocks sharing weight tiles (many rows: L2 traffic, not DRAM, limits).
pub const WGMMA_CONFIGS: &[WgmmaConfig] = &[
    config("n16", 16, 2, 6, 1, (9, 16)),
    config("n16c1", 16, 1, 6, 1, (1, 16)),
    config("n16k4", 16, 2, 6, 4, (9, 16)),
    config("n16c1k4", 16, 1, 6, 4, (1, 16)),
    config("n32", 32, 2, 6, 1, (17, 32)),
    config("n32c1", 32, 1, 5, 1, (17, 32)),
    config("n32k4", 32, 2, 6, 4, (17, 32)),
    config("n32c1k4", 32, 1, 5, 4, (17, 32)),
    config("n64", 64, 2, 5, 1, (33, 64)),
    config("n64c1k2", 64, 1, 4, 2, (33, 64)),
    config("n64k4", 64, 2, 5, 4, (33, 64)),
    // Measured on an H200 (BENCHMARKS.md), these reach 76-89% of cuBLAS at the Llama MLP's sizes from 256
    // rows: the fast mode skips them (NEVER), the full mode times them.
    config("n128", 128, 2, 4, 1, NEVER),
    paired("n128m2", 128, NEVER),
    config("n128k2", 128, 2, 4, 2, NEVER),
    config("n256", 256, 2, 4, 1, NEVER),
    paired("n256m2", 256, NEVER),
    config("n256k4", 256, 2, 4, 4, NEVER),
];

impl WgmmaConfig {
    pub fn by_name(name: &str) -> Option<&'static WgmmaConfig> {
        WGMMA_CONFIGS.iter().find(|c| c.name == name)
    }

    /// `-DFUSE_WG_DT` for the dtype, then the config's shape.
    pub fn defines(&self, dtype: DType) -> Vec<String> {
        let dt = if dtype == DType::F16 { 1 } else { 2 };
        vec![
            format!("-DFUSE_WG_DT={dt}"),
            format!("-DFUSE_WG_BM={}", self.bm),
            format!("-DFUSE_WG_CW={}", self.cw),
            format!("-DFUSE_WG_S={}", self.stages),
            format!("-DFUSE_WG_SP={}", self.splits),
            format!("-DFUSE_WG_MC={}", self.cluster),
        ]
    }

    pub fn threads(&self) -> u32 {
        128 * (1 + self.cw as u32)
    }

    /// Whether the accumulators fit: `BM / 2` registers per product per thread, at most 128 in all.
    pub fn supports(&self, dual: bool) -> bool {
        self.bm * (1 + usize::from(dual)) <= 256 && self.shared_bytes(dual) <= MAX_SHARED_BYTES
    }

    /// The template's `FUSE_WG_SMEM_BYTES`.
    pub fn shared_bytes(&self, dual: bool) -> usize {
        let stage = 128 * ((1 + usize::from(dual)) * 64 * self.cw + self.bm);
        self.stages * stage + 16 * self.stages + 16 + 1024
    }

    /// Weight rows each block loads per stage (of each weight): half the tile's in a pair.
    pub fn weight_box_rows(&self) -> usize {
        self.cols_per_block() / self.cluster
    }
}

impl GemmTiling for WgmmaConfig {
    /// 64 per consumer warpgroup.
    fn cols_per_block(&self) -> usize {
        64 * self.cw
    }

    fn rows_per_block(&self) -> usize {
        self.bm
    }

    fn splits(&self) -> usize {
        self.splits
    }

    /// Rounded up to whole clusters (a block past the rows lends its half of the weight tiles).
    fn row_blocks(&self, m: usize) -> usize {
        m.div_ceil(self.bm).next_multiple_of(self.cluster)
    }
}

/// The kernel's source: the epilogue hook (after the CUDA prelude), the sm_90 header, the wgmma wrappers, the
/// defines, then the template.
pub(in crate::codegen) fn source(parts: &KernelParts<'_>, matmuls: &[NodeId]) -> String {
    let mut s = epilogue_hook(parts, matmuls, &[], "wgmma gemm");
    s.push_str(crate::codegen::SM90_HEADER);
    s.push_str(&mma_wrappers());
    let _ = writeln!(s, "#define FUSE_WGMMA_NAME {}", parts.name);
    let _ = writeln!(s, "#define FUSE_WGMMA_DUAL {}", u8::from(matmuls.len() == 2));
    s.push_str(WGMMA_TEMPLATE);
    s
}

/// `fuse_wg_mma<DT>(float (&d)[BM / 2], desc_a, desc_b)` for every BM of the config set: one
/// `wgmma.mma_async.sync.aligned.m64n<BM>k16.f32.<t>.<t>` accumulating into `d` (scale-d = 1, A and B
/// K-major from shared memory).
fn mma_wrappers() -> String {
    let mut widths: Vec<usize> = WGMMA_CONFIGS.iter().map(|c| c.bm).collect();
    widths.sort_unstable();
    widths.dedup();
    let mut s = String::from("#ifndef FUSE_WG_MMA_ONCE\n#define FUSE_WG_MMA_ONCE\n");
    for bm in widths {
        let acc = bm / 2;
        let regs: Vec<String> = (0..acc).map(|i| format!("%{i}")).collect();
        let outs: Vec<String> = (0..acc).map(|i| format!("\"+f\"(d[{i}])")).collect();
        let _ = writeln!(
            s,
            "template <int DT>\n__device__ __forceinline__ void fuse_wg_mma(float (&d)[{acc}], unsigned long long a, unsigned long long b) {{"
        );
        for (dt, ty) in [(2, "bf16"), (1, "f16")] {
            let _ = writeln!(
                s,
                "  if (DT == {dt})\n    asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{}, 0; wgmma.mma_async.sync.aligned.m64n{bm}k16.f32.{ty}.{ty} {{{}}}, %{}, %{}, p, 1, 1, 0, 0; }}\"\n      : {}\n      : \"l\"(a), \"l\"(b), \"r\"(1));",
                acc + 2,
                regs.join(", "),
                acc,
                acc + 1,
                outs.join(", ")
            );
        }
        s.push_str("}\n");
    }
    s.push_str("#endif\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_fit_an_h200_block_and_cover_their_grid() {
        for (i, c) in WGMMA_CONFIGS.iter().enumerate() {
            assert_eq!(WgmmaConfig::by_name(c.name), Some(c));
            assert!(WGMMA_CONFIGS[..i].iter().all(|o| o.name != c.name));
            assert!(c.supports(false), "{}: every config runs a single product", c.name);
            let blocks = c.grid(17, 1000).unwrap() as usize;
            assert!(blocks * c.cols_per_block() * c.bm >= 17 * 1000 * c.splits);
            assert_eq!(c.workspace_floats(17, 1000, true) > 0, c.splits > 1);
            assert_eq!(c.defines(DType::BF16)[0], "-DFUSE_WG_DT=2");
            assert!(
                c.cluster == 1 || (c.splits == 1 && c.grid(17, 1000).unwrap() % 2 == 0),
                "{}: whole clusters",
                c.name
            );
        }
        // The dual product needs twice the accumulators: BM 256 cannot hold them.
        assert!(!WgmmaConfig::by_name("n256").unwrap().supports(true));
        assert!(WgmmaConfig::by_name("n128").unwrap().supports(true));
        // FUSE_WG_SMEM_BYTES for n128, dual: 4 stages of (2 * 128 + 128) rows of 128 bytes, barriers, slack.
        assert_eq!(WgmmaConfig::by_name("n128").unwrap().shared_bytes(true), 4 * 128 * 384 + 64 + 16 + 1024);
        assert!(WGMMA_TEMPLATE.contains("#define FUSE_WG_SMEM_BYTES"));
    }

    #[test]
    fn one_wrapper_per_width_with_all_accumulators() {
        let s = mma_wrappers();
        assert_eq!(s.matches("template <int DT>").count(), 5, "{s}");
        assert!(s.contains("float (&d)[8]") && s.contains("float (&d)[128]"));
        assert!(s.contains("m64n256k16.f32.bf16.bf16") && s.contains("m64n16k16.f32.f16.f16"));
        // n16: eight accumulators %0..%7, descriptors %8 %9, scale-d %10.
        assert!(s.contains("{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;"), "{s}");
        assert!(s.contains("setp.ne.b32 p, %10, 0;"));
    }
}
