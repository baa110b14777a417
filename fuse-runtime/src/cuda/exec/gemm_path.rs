//! The ways a Gemm/DualGemm group can run on the GPU, as values and as the text the results table and
//! `fuse::tune::with_gemm_choice` use:
//!
//! - `cublas`: cuBLAS for the matmuls (a DualGemm's two as one batched call where the two weights lie a
//!   whole number of elements apart), then the epilogue kernel; `cublas:split`: a DualGemm's two as two
//!   calls (at some shapes cuBLAS picks a slower kernel for the batched call);
//! - `cublaslt:<i>`: the same through cuBLASLt with algorithm `i` of its heuristic's list;
//! - `skinny:<config>`: the skinny template, matmuls and epilogue in one kernel (`cuda/gemm/skinny.rs`);
//! - `qskinny:<config>`: the same for weights of quantized blocks, decoded as they stream (cuBLAS takes
//!   them dequantized into scratch memory first);
//! - `wgmma:<config>`: the same with the tensor-core template for many rows, sm_90 only (`cuda/gemm/wgmma.rs`);
//! - `mma:<config>`: the same with the tiled mma.sync template for many rows, sm_80 and later.

use crate::cuda::gemm::skinny::SkinnyConfig;
use crate::cuda::gemm::wgmma::WgmmaConfig;
use fuse_ir::codegen::QuantSkinnyConfig;
use fuse_ir::codegen::{GemmTiling, MmaConfig, Role};

/// One way to run a Gemm/DualGemm group.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GemmPath {
    /// cuBLAS; a DualGemm's two products as one batched call where the weights allow it.
    Cublas,
    /// cuBLAS, a DualGemm's products as two calls.
    CublasSplit,
    Lt(usize),
    Skinny(&'static SkinnyConfig),
    QuantSkinny(&'static QuantSkinnyConfig),
    Wgmma(&'static WgmmaConfig),
    Mma(&'static MmaConfig),
}

impl GemmPath {
    pub(crate) fn name(&self) -> String {
        match self {
            GemmPath::Cublas => "cublas".into(),
            GemmPath::CublasSplit => "cublas:split".into(),
            GemmPath::Lt(i) => format!("cublaslt:{i}"),
            GemmPath::Skinny(c) => format!("skinny:{}", c.name),
            GemmPath::QuantSkinny(c) => format!("qskinny:{}", c.name),
            GemmPath::Wgmma(c) => format!("wgmma:{}", c.name),
            GemmPath::Mma(c) => format!("mma:{}", c.name),
        }
    }

    pub(crate) fn parse(text: &str) -> Option<GemmPath> {
        match text.split_once(':') {
            None if text == "cublas" => Some(GemmPath::Cublas),
            Some(("cublas", "split")) => Some(GemmPath::CublasSplit),
            Some(("cublaslt", i)) => i.parse().ok().map(GemmPath::Lt),
            Some(("skinny", c)) => SkinnyConfig::by_name(c).map(GemmPath::Skinny),
            Some(("qskinny", c)) => QuantSkinnyConfig::by_name(c).map(GemmPath::QuantSkinny),
            Some(("wgmma", c)) => WgmmaConfig::by_name(c).map(GemmPath::Wgmma),
            Some(("mma", c)) => MmaConfig::by_name(c).map(GemmPath::Mma),
            _ => None,
        }
    }

    /// Why a template config cannot run a group of one product or two (`dual`), if it cannot.
    pub(crate) fn lacks_room(&self, dual: bool) -> Option<String> {
        let fits = match self {
            GemmPath::Wgmma(c) => c.supports(dual),
            GemmPath::Mma(c) => c.supports(dual),
            _ => true,
        };
        (!fits).then(|| format!("{} has no room for two products' accumulators", self.name()))
    }

    /// The generated kernel a template path launches (`None`: library calls plus the epilogue kernel).
    pub(crate) fn splits(&self) -> usize {
        match self {
            GemmPath::Skinny(c) => GemmTiling::splits(*c),
            GemmPath::QuantSkinny(c) => c.splits(),
            GemmPath::Wgmma(c) => GemmTiling::splits(*c),
            GemmPath::Mma(c) => c.splits(),
            _ => 1,
        }
    }

    pub(crate) fn template_role(&self) -> Option<Role> {
        match self {
            GemmPath::Skinny(_) | GemmPath::QuantSkinny(_) => Some(Role::Skinny),
            GemmPath::Wgmma(_) => Some(Role::Wgmma),
            GemmPath::Mma(_) => Some(Role::Mma),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names_round_trip() {
        let mut paths = vec![GemmPath::Cublas, GemmPath::CublasSplit, GemmPath::Lt(3)];
        paths.extend(fuse_ir::codegen::SKINNY_CONFIGS.iter().map(GemmPath::Skinny));
        paths.extend(fuse_ir::codegen::QUANT_SKINNY_CONFIGS.iter().map(GemmPath::QuantSkinny));
        paths.extend(fuse_ir::codegen::WGMMA_CONFIGS.iter().map(GemmPath::Wgmma));
        paths.extend(fuse_ir::codegen::MMA_CONFIGS.iter().map(GemmPath::Mma));
        for p in paths {
            assert_eq!(GemmPath::parse(&p.name()), Some(p));
        }
        for bad in [
            "",
            "cublaslt",
            "cublaslt:x",
            "cublas:joined",
            "skinny:nope",
            "qskinny:r1c8x",
            "wgmma:n7",
            "mma:m7",
            "magic",
        ] {
            assert_eq!(GemmPath::parse(bad), None, "{bad}");
        }
    }
}
