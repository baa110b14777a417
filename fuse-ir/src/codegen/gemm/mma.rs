//! The tiled tensor-core GEMM kernel of a Gemm/DualGemm group for many rows on sm_80 and later
//! (`templates/mma.cuh`: mma.sync, a cp.async ring, ldmatrix), the many-rows counterpart of the skinny
//! template for GPUs without wgmma, with the same epilogue hook.

use super::skinny::epilogue_hook;
use super::tiling::GemmTiling;
use crate::codegen::emit::KernelParts;
use crate::graph::NodeId;
use crate::DType;
use std::fmt::Write;

/// The template, spliced after the generated epilogue.
pub const MMA_TEMPLATE: &str = include_str!("templates/mma.cuh");

/// One config of the template: the block's output tile and the ring's stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaConfig {
    /// The config's part of the path name (`mma:<name>`).
    pub name: &'static str,
    pub bm: usize,
    pub bn: usize,
    pub stages: usize,
}

/// Every config, in the order they are tried. 128 x 128 holds one product's accumulators only.
pub const MMA_CONFIGS: &[MmaConfig] = &[
    MmaConfig { name: "m128n128", bm: 128, bn: 128, stages: 4 },
    MmaConfig { name: "m128n64", bm: 128, bn: 64, stages: 4 },
    MmaConfig { name: "m64n64", bm: 64, bn: 64, stages: 4 },
];

impl MmaConfig {
    pub fn by_name(name: &str) -> Option<&'static MmaConfig> {
        MMA_CONFIGS.iter().find(|c| c.name == name)
    }

    /// `-DFUSE_MM_DT` for the dtype, then the config's shape.
    pub fn defines(&self, dtype: DType) -> Vec<String> {
        let dt = if dtype == DType::F16 { 1 } else { 2 };
        vec![
            format!("-DFUSE_MM_DT={dt}"),
            format!("-DFUSE_MM_BM={}", self.bm),
            format!("-DFUSE_MM_BN={}", self.bn),
            format!("-DFUSE_MM_S={}", self.stages),
        ]
    }

    /// Whether the accumulators fit: at most 64 per thread (`BM * BN / 256` per product).
    pub fn supports(&self, dual: bool) -> bool {
        self.bm * self.bn * (1 + usize::from(dual)) / 256 <= 64
    }

    /// The template's `FUSE_MM_SMEM_BYTES`: the ring, or the accumulators staged for the epilogue.
    pub fn shared_bytes(&self, dual: bool) -> usize {
        let d = 1 + usize::from(dual);
        let ring = self.stages * (self.bm + d * self.bn) * 64;
        let staged = d * self.bm * (self.bn + 4) * 4;
        ring.max(staged)
    }
}

impl GemmTiling for MmaConfig {
    fn cols_per_block(&self) -> usize {
        self.bn
    }

    fn rows_per_block(&self) -> usize {
        self.bm
    }

    fn splits(&self) -> usize {
        1
    }
}

/// The kernel's source: the epilogue hook, the defines, then the template.
pub(in crate::codegen) fn source(parts: &KernelParts<'_>, matmuls: &[NodeId]) -> String {
    let mut s = epilogue_hook(parts, matmuls, "mma gemm");
    let _ = writeln!(s, "#define FUSE_MMA_NAME {}", parts.name);
    let _ = writeln!(s, "#define FUSE_MMA_DUAL {}", u8::from(matmuls.len() == 2));
    s.push_str(MMA_TEMPLATE);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_follow_the_template_and_cover_their_grid() {
        for (i, c) in MMA_CONFIGS.iter().enumerate() {
            assert_eq!(MmaConfig::by_name(c.name), Some(c));
            assert!(MMA_CONFIGS[..i].iter().all(|o| o.name != c.name));
            assert!(c.supports(false));
            let blocks = c.grid(300, 1000).unwrap() as usize;
            assert_eq!(blocks, 300usize.div_ceil(c.bm) * 1000usize.div_ceil(c.bn));
            assert_eq!(c.workspace_floats(300, 1000, true), 0);
            assert_eq!(c.defines(DType::F16)[0], "-DFUSE_MM_DT=1");
            // An H200 block may have 227 KB, an A100's 163 KB, an RTX 4090's 99 KB.
            assert!(c.shared_bytes(c.supports(true)) <= 99 * 1024, "{}", c.name);
        }
        assert!(!MmaConfig::by_name("m128n128").unwrap().supports(true));
        assert!(MmaConfig::by_name("m128n64").unwrap().supports(true));
        // FUSE_MM_SMEM_BYTES for m128n64, dual: the staged accumulators, 2 x 128 x 68 floats, exceed the ring.
        assert_eq!(MmaConfig::by_name("m128n64").unwrap().shared_bytes(true), 2 * 128 * 68 * 4);
        assert_eq!(MmaConfig::by_name("m64n64").unwrap().shared_bytes(true), 4 * (64 + 128) * 64);
        assert!(MMA_TEMPLATE.contains("#define FUSE_MM_SMEM_BYTES"));
    }
}
