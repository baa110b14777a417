//! The tiled tensor-core GEMM kernel of a Gemm/DualGemm group for many rows on sm_80 and later
//! (`templates/mma.cuh`: mma.sync, a cp.async ring, ldmatrix), the many-rows counterpart of the skinny
//! template for GPUs without wgmma, with the same epilogue hook.

use super::hook::epilogue_hook;
use super::tiling::GemmTiling;
use crate::codegen::emit::KernelParts;
use crate::graph::NodeId;
use crate::plan::Product;
use crate::DType;
use std::fmt::Write;

/// The template, spliced after the generated epilogue.
pub const MMA_TEMPLATE: &str = include_str!("templates/mma.cuh");
/// The template's kernel for weights of quantized blocks (`-DFUSE_MM_WQ`), spliced after it.
pub const MMA_QUANT_TEMPLATE: &str = include_str!("templates/mma_quant.cuh");

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

    /// `-DFUSE_MM_DT` for activations of `dtype` (f32 ones are rounded to bf16 as they are loaded), the
    /// config's shape, then for weights of quantized blocks their type (`-DFUSE_MM_WQ`, `-DFUSE_MM_XF32`).
    /// `None` for f32 activations by dense weights, which the template does not read.
    pub fn defines(&self, dtype: DType, weights: DType) -> Option<Vec<String>> {
        let dt = if dtype == DType::F16 { 1 } else { 2 };
        let mut defines = vec![
            format!("-DFUSE_MM_DT={dt}"),
            format!("-DFUSE_MM_BM={}", self.bm),
            format!("-DFUSE_MM_BN={}", self.bn),
            format!("-DFUSE_MM_S={}", self.stages),
        ];
        if weights.is_quantized() {
            defines.push(format!("-DFUSE_MM_WQ={}", crate::codegen::block_dtype_code(weights)));
            if dtype == DType::F32 {
                defines.push("-DFUSE_MM_XF32=1".into());
            }
        } else if dtype == DType::F32 || weights != dtype {
            return None;
        }
        Some(defines)
    }

    /// The dtype the tensor cores multiply for activations of `dtype`: bf16 for f32 activations (rounded as
    /// they are loaded), else theirs.
    pub fn operand_dtype(dtype: DType) -> DType {
        if dtype == DType::F32 {
            DType::BF16
        } else {
            dtype
        }
    }

    /// Whether the accumulators fit: at most 64 per thread (`BM * BN / 256` per product).
    pub fn supports(&self, dual: bool) -> bool {
        self.bm * self.bn * (1 + usize::from(dual)) / 256 <= 64
    }

    /// The template's `FUSE_MM_SMEM_BYTES` for activations of `dtype` by weights of `weights`: the ring, or
    /// for quantized weights mma_quant.cuh's regions (the X ring, raw f32 rows and their converted tiles, two
    /// columns of raw weight rows, two decoded tiles), or the accumulators staged for the epilogue.
    pub fn shared_bytes(&self, dual: bool, dtype: DType, weights: DType) -> usize {
        let d = 1 + usize::from(dual);
        let staged = d * self.bm * (self.bn + 4) * 4;
        let Some(block) = weights.block() else {
            return (self.stages * (self.bm + d * self.bn) * 64).max(staged);
        };
        let column = 256 / block.elements * block.bytes;
        let slot = (column + 30) / 16 * 16;
        let x = match dtype {
            DType::F32 => self.stages * self.bm * 128 + 2 * self.bm * 64,
            _ => self.stages * self.bm * 64,
        };
        (x + 2 * d * self.bn * (slot + 64)).max(staged)
    }
}

/// Values of each stretch of a weight row the mma template copies and decodes at once (K must be a multiple).
pub const MMA_QUANT_COLUMN: usize = 256;

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
pub(in crate::codegen) fn source(parts: &KernelParts<'_>, matmuls: &[NodeId], products: &[Product]) -> String {
    let mut s = epilogue_hook(parts, matmuls, products, "mma gemm");
    let _ = writeln!(s, "#define FUSE_MMA_NAME {}", parts.name);
    let _ = writeln!(s, "#define FUSE_MMA_DUAL {}", u8::from(matmuls.len() == 2 && products.is_empty()));
    s.push_str(MMA_TEMPLATE);
    s.push_str(MMA_QUANT_TEMPLATE);
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
            assert_eq!(c.defines(DType::F16, DType::F16).unwrap()[0], "-DFUSE_MM_DT=1");
            let q = c.defines(DType::F32, DType::Q4_K).unwrap();
            assert_eq!(
                (q[0].as_str(), &q[4..]),
                ("-DFUSE_MM_DT=2", &["-DFUSE_MM_WQ=21".to_string(), "-DFUSE_MM_XF32=1".into()][..])
            );
            assert_eq!(c.defines(DType::BF16, DType::Q6_K).unwrap()[4..], ["-DFUSE_MM_WQ=23".to_string()]);
            assert_eq!(c.defines(DType::F32, DType::F32), None);
            assert_eq!(c.defines(DType::BF16, DType::F16), None);
            // An H200 block may have 227 KB, an A100's 163 KB, an RTX 4090's 99 KB.
            let dual = c.supports(true);
            assert!(c.shared_bytes(dual, DType::BF16, DType::BF16) <= 99 * 1024, "{}", c.name);
            // Quantized weights: within an H100's or H200's 227 KB with any block type.
            for w in DType::QUANTIZED {
                assert!(c.shared_bytes(dual, DType::F32, w) <= 227 * 1024, "{} {w}", c.name);
            }
        }
        assert!(!MmaConfig::by_name("m128n128").unwrap().supports(true));
        assert!(MmaConfig::by_name("m128n64").unwrap().supports(true));
        // FUSE_MM_SMEM_BYTES for m128n64, dual: the staged accumulators, 2 x 128 x 68 floats, exceed the ring.
        let m128n64 = MmaConfig::by_name("m128n64").unwrap();
        assert_eq!(m128n64.shared_bytes(true, DType::BF16, DType::BF16), 2 * 128 * 68 * 4);
        assert_eq!(
            MmaConfig::by_name("m64n64").unwrap().shared_bytes(true, DType::BF16, DType::BF16),
            4 * (64 + 128) * 64
        );
        // Q6_K (210 bytes a 256-value block: slots of 240) by f32 activations, dual: mma_quant.cuh's regions.
        let q6 = 4 * 128 * 128 + 2 * 128 * 64 + 2 * 128 * (240 + 64);
        assert_eq!(m128n64.shared_bytes(true, DType::F32, DType::Q6_K), q6);
        assert!(MMA_TEMPLATE.contains("#define FUSE_MM_SMEM_BYTES"));
    }
}
