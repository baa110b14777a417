//! The wgmma template (fuse-ir `codegen/gemm/templates/wgmma.cuh`, configs in `WGMMA_CONFIGS`) from the
//! runtime's side: where it can run, and the TMA descriptors of its operands, which come first in its one
//! parameter (`FuseWgmmaParams { tx, tw0, tw1, FuseArgs, FuseGemmArgs }`).

use super::skinny::SkinnyGemm;
pub(crate) use fuse_ir::codegen::{WgmmaConfig, WGMMA_CONFIGS as CONFIGS};
use fuse_ir::DType;

/// Words (u64) of one tensor map in the parameter; the parameter's FuseArgs starts after three of them.
pub(crate) const MAP_WORDS: usize = 16;
/// The parameter is 128-byte aligned (CUDA 13's CUtensorMap), so its size is a multiple of 16 words.
pub(crate) const PARAM_ALIGN_WORDS: usize = 16;

/// The arch the template is compiled for on a GPU of `arch`, or `None` where it cannot run (wgmma and
/// TMA exist on sm_90 alone: Blackwell has other tensor-core instructions).
pub(crate) fn compile_arch(arch: &str) -> Option<&'static str> {
    (arch == "sm_90").then_some("sm_90a")
}

/// Why the template cannot take operands the skinny template takes (it has the same needs, plus TMA's
/// 32-bit coordinates).
pub(crate) fn check(gemm: &SkinnyGemm) -> Result<(), &'static str> {
    let limit = i32::MAX as usize;
    if gemm.m > limit || gemm.n > limit || gemm.k > limit {
        return Err("a dimension past 2^31 (TMA coordinates are 32-bit)");
    }
    Ok(())
}

/// How TMA reads one operand: `rows` rows of `k` elements, `ld` elements apart, in boxes of 64 elements of
/// k by `box_rows` rows, 128-byte swizzled; what lies past the edges reads as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TensorMapSpec {
    pub dtype: DType,
    pub rows: usize,
    pub k: usize,
    pub ld: usize,
    pub box_rows: usize,
}

impl TensorMapSpec {
    /// The three maps of a launch: X, W0, W1 (W0 again for a single product: never read).
    pub(crate) fn of(gemm: &SkinnyGemm, config: &WgmmaConfig, dtype: DType, dual: bool) -> [TensorMapSpec; 3] {
        let x = TensorMapSpec { dtype, rows: gemm.m, k: gemm.k, ld: gemm.lda, box_rows: config.bm };
        let w = |j: usize| TensorMapSpec {
            dtype,
            rows: gemm.n,
            k: gemm.k,
            ld: gemm.ldw[j],
            box_rows: config.weight_box_rows(),
        };
        [x, w(0), if dual { w(1) } else { w(0) }]
    }

    /// The CUtensorMap of this operand at `address`, as parameter words.
    pub(crate) fn encode(&self, address: u64) -> Result<[u64; MAP_WORDS], String> {
        use cudarc::driver::sys::{
            cuTensorMapEncodeTiled, CUresult, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
            CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
        };
        let data_type = match self.dtype {
            DType::BF16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            DType::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            _ => return Err("the wgmma template takes bf16 and f16".into()),
        };
        // A single row has no stride of its own: any multiple of 16 bytes will do.
        let ld = if self.rows == 1 { self.k.next_multiple_of(8) } else { self.ld };
        let dims = [self.k as u64, self.rows as u64];
        let strides = [(ld * 2) as u64];
        let boxes = [64u32, self.box_rows as u32];
        let element_strides = [1u32, 1];
        let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
        // SAFETY: every array has the length rank 2 asks for; the call only writes `map`. The address is
        // not dereferenced here (the kernel reads through the map, within dims).
        let status = unsafe {
            cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                data_type,
                2,
                address as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if status != CUresult::CUDA_SUCCESS {
            return Err(format!("cuTensorMapEncodeTiled({self:?} at {address:#x}): {status:?}"));
        }
        // SAFETY: initialised (zeroed, then written by the driver).
        let map = unsafe { map.assume_init() };
        let mut words = [0u64; MAP_WORDS];
        words.copy_from_slice(&map.opaque[..MAP_WORDS]);
        Ok(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hopper_runs_the_template() {
        assert_eq!(compile_arch("sm_90"), Some("sm_90a"));
        for arch in ["sm_80", "sm_89", "sm_100", "sm_120"] {
            assert_eq!(compile_arch(arch), None, "{arch}");
        }
    }

    #[test]
    fn maps_box_the_block_tiles() {
        let gemm =
            SkinnyGemm { x: 0x1000, w: [0x10_0000, 0x20_0000], m: 17, n: 14336, k: 4096, lda: 4096, ldw: [4096, 4104] };
        let config = WgmmaConfig::by_name("n32").unwrap();
        let [x, w0, w1] = TensorMapSpec::of(&gemm, config, DType::BF16, true);
        assert_eq!((x.rows, x.k, x.ld, x.box_rows), (17, 4096, 4096, 32));
        assert_eq!((w0.rows, w0.ld, w0.box_rows), (14336, 4096, 128));
        assert_eq!(w1.ld, 4104);
        assert_eq!(TensorMapSpec::of(&gemm, config, DType::BF16, false)[2], w0);
        // A pair of blocks loads half of each weight tile each.
        let paired = WgmmaConfig::by_name("n128m2").unwrap();
        assert_eq!(TensorMapSpec::of(&gemm, paired, DType::BF16, true)[1].box_rows, 64);
        let wide = SkinnyGemm { m: 1 << 31, ..gemm };
        assert!(check(&wide).unwrap_err().contains("2^31"));
        assert!(check(&gemm).is_ok());
    }
}
