//! The skinny GEMM template (fuse-ir `codegen/gemm/templates/skinny.cuh`, configs in `SKINNY_CONFIGS`) from
//! the runtime's side: which operands it can read, and the `FuseGemmArgs` words that follow the
//! epilogue's `FuseArgs` in its one parameter.

use super::cublas::Matrix;
pub(crate) use fuse_ir::codegen::{SkinnyConfig, SKINNY_CONFIGS as CONFIGS};
use fuse_ir::DType;

/// The operands as the template reads them: `x` is `[m, k]` with row stride `lda`, weight j is `[n, k]`
/// (the `[out, in]` layout, multiplied as `.t()`) with row stride `ldw[j]`; addresses in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SkinnyGemm {
    pub x: u64,
    pub w: [u64; 2],
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldw: [usize; 2],
}

/// Why the template cannot take these operands, or them in its terms. `a` is the left operand (batches
/// fold into rows), `weights` the right operands of the group's one or two matmuls, all of `dtype`.
pub(crate) fn skinny_gemm(dtype: DType, a: &Matrix, weights: &[Matrix]) -> Result<SkinnyGemm, &'static str> {
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Err("the skinny template takes bf16 and f16");
    }
    let (k, rows) = (a.cols, a.batch * a.rows);
    if k < 8 || k % 8 != 0 {
        return Err("the inner dimension is not a multiple of 8");
    }
    if a.batch > 1 && a.batch_stride != a.rows * a.row_stride {
        return Err("the left operand's batches are not evenly spaced rows");
    }
    if a.col_stride != 1 {
        return Err("the left operand's rows are not dense");
    }
    let lda = if rows == 1 { k } else { a.row_stride };
    let aligned = |address: u64, ld: usize| address % 16 == 0 && ld % 8 == 0;
    if !aligned(a.address, lda) {
        return Err("the left operand's rows are not 16-byte aligned");
    }
    let mut ldw = [0usize; 2];
    let mut w = [0u64; 2];
    let n = weights.first().map_or(0, |b| b.cols);
    for (j, b) in weights.iter().enumerate().take(2) {
        if b.batch != 1 || b.rows != k || b.cols != n {
            return Err("the weights are not one [out, in] matrix each");
        }
        // A `.t()` view of an [out, in] weight: unit stride along k, `ld` between output columns.
        if b.row_stride != 1 {
            return Err("the weight is not read as `.t()` of an [out, in] matrix");
        }
        ldw[j] = if n == 1 { k } else { b.col_stride };
        if !aligned(b.address, ldw[j]) {
            return Err("the weight's rows are not 16-byte aligned");
        }
        w[j] = b.address;
    }
    if weights.is_empty() || weights.len() > 2 || n == 0 || rows == 0 {
        return Err("nothing to compute");
    }
    Ok(SkinnyGemm { x: a.address, w, m: rows, n, k, lda, ldw })
}

/// [`skinny_gemm`] for the quantized skinny template: `x` of a float `dtype`, the weights of one block type
/// `blocks` (each `.t()` of an `[out, in]` matrix whose rows are whole blocks).
pub(crate) fn quant_skinny_gemm(
    dtype: DType,
    blocks: DType,
    a: &Matrix,
    weights: &[Matrix],
) -> Result<SkinnyGemm, &'static str> {
    if !dtype.is_float() {
        return Err("the quantized skinny template takes f32, f16 and bf16 activations");
    }
    let Some(block) = blocks.block() else { return Err("the weights are not quantized blocks") };
    // The dense template's checks but for the weights' alignment: a whole block anywhere is aligned enough
    // for the block loads (blocks.cuh), and x is loaded as there (f32 rows 16-byte aligned as well).
    let anywhere: Vec<Matrix> = weights.iter().map(|m| Matrix { address: 0, ..*m }).collect();
    let mut gemm = skinny_gemm(if dtype == DType::F32 { DType::BF16 } else { dtype }, a, &anywhere)?;
    for (j, w) in weights.iter().enumerate().take(2) {
        gemm.w[j] = w.address;
    }
    if gemm.k % block.elements != 0 || gemm.ldw.iter().take(weights.len()).any(|ld| ld % block.elements != 0) {
        return Err("the weights' rows are not whole blocks");
    }
    Ok(gemm)
}

impl SkinnyGemm {
    /// The word of [`SkinnyGemm::words`] holding the left operand's address.
    pub(crate) const X_WORD: usize = 0;
    /// Words of [`SkinnyGemm::words`].
    pub(crate) const WORDS: usize = 11;

    /// The word of [`SkinnyGemm::words`] holding weight `j`'s address.
    pub(crate) fn weight_word(j: usize) -> usize {
        Self::X_WORD + 1 + j
    }

    /// `FuseGemmArgs { x, w0, w1, m, n, k, lda, ldw0, ldw1, ws, counters }`, every field 8 bytes; the
    /// split-K workspace and counters are 0 for a config without splits.
    pub(crate) fn words(&self, workspace: u64, counters: u64) -> [u64; Self::WORDS] {
        let [w0, w1] = self.w;
        let [l0, l1] = self.ldw;
        let (m, n, k, lda) = (self.m as u64, self.n as u64, self.k as u64, self.lda as u64);
        [self.x, w0, w1, m, n, k, lda, l0 as u64, l1 as u64, workspace, counters]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(address: u64, batch: usize, rows: usize, cols: usize, strides: [usize; 3]) -> Matrix {
        Matrix { address, batch, rows, cols, batch_stride: strides[0], row_stride: strides[1], col_stride: strides[2] }
    }

    #[test]
    fn checkpoint_weights_read_as_t_are_taken() {
        // x [3, 4096] times w.t() with w [14336, 4096]: the .t() view has strides (1, 4096).
        let x = matrix(0x1000, 1, 3, 4096, [0, 4096, 1]);
        let w = matrix(0x10_0000, 1, 4096, 14336, [0, 1, 4096]);
        let u = matrix(0x20_0000, 1, 4096, 14336, [0, 1, 4096]);
        let g = skinny_gemm(DType::BF16, &x, &[w, u]).unwrap();
        assert_eq!((g.m, g.n, g.k, g.lda, g.ldw), (3, 14336, 4096, 4096, [4096, 4096]));
        assert_eq!(g.words(0, 0), [0x1000, 0x10_0000, 0x20_0000, 3, 14336, 4096, 4096, 4096, 4096, 0, 0]);
        assert_eq!(g.words(0x30_0000, 0x40_0000)[9..], [0x30_0000, 0x40_0000]);
        // Batches fold into rows when evenly spaced.
        let xb = matrix(0x1000, 2, 3, 4096, [3 * 4096, 4096, 1]);
        assert_eq!(skinny_gemm(DType::F16, &xb, &[w]).unwrap().m, 6);
    }

    #[test]
    fn the_quantized_template_takes_whole_blocks_anywhere() {
        let x = matrix(0x1000, 1, 3, 512, [0, 512, 1]);
        // A Q4_0 weight of [14336, 512] read from its second row: 16 blocks of 18 bytes in, not 16-aligned.
        let w = matrix(0x10_0000 + 16 * 18, 1, 512, 14336, [0, 1, 512]);
        let g = quant_skinny_gemm(DType::BF16, DType::Q4_0, &x, &[w]).unwrap();
        assert_eq!((g.m, g.n, g.k, g.w[0], g.ldw[0]), (3, 14336, 512, 0x10_0000 + 288, 512));
        // 96 values a row: whole Q8_0 blocks, not whole Q4_K blocks.
        let (x96, w96) = (matrix(0x1000, 1, 3, 96, [0, 96, 1]), matrix(0x10_0000, 1, 96, 5, [0, 1, 96]));
        assert!(quant_skinny_gemm(DType::F32, DType::Q8_0, &x96, &[w96]).is_ok());
        assert!(quant_skinny_gemm(DType::F32, DType::Q4_K, &x96, &[w96]).unwrap_err().contains("whole blocks"));
        assert!(quant_skinny_gemm(DType::U32, DType::Q4_0, &x, &[w]).is_err());
        assert!(quant_skinny_gemm(DType::BF16, DType::BF16, &x, &[w]).unwrap_err().contains("blocks"));
        let misaligned = matrix(0x1008, 1, 3, 512, [0, 512, 1]);
        assert!(quant_skinny_gemm(DType::F32, DType::Q8_0, &misaligned, &[w]).unwrap_err().contains("aligned"));
    }

    #[test]
    fn what_the_template_cannot_read_is_refused_with_a_reason() {
        let x = matrix(0x1000, 1, 3, 4096, [0, 4096, 1]);
        let w = matrix(0x10_0000, 1, 4096, 14336, [0, 1, 4096]);
        assert!(skinny_gemm(DType::F32, &x, &[w]).unwrap_err().contains("bf16"));
        let stored_in_out = matrix(0x10_0000, 1, 4096, 14336, [0, 14336, 1]);
        assert!(skinny_gemm(DType::BF16, &x, &[stored_in_out]).unwrap_err().contains(".t()"));
        let odd_k = matrix(0x1000, 1, 3, 4100, [0, 4100, 1]);
        let w_odd = matrix(0x10_0000, 1, 4100, 14336, [0, 1, 4100]);
        assert!(skinny_gemm(DType::BF16, &odd_k, &[w_odd]).unwrap_err().contains("multiple of 8"));
        let misaligned = matrix(0x1002, 1, 3, 4096, [0, 4096, 1]);
        assert!(skinny_gemm(DType::BF16, &misaligned, &[w]).unwrap_err().contains("aligned"));
        let gapped = matrix(0x1000, 2, 3, 4096, [4 * 4096, 4096, 1]);
        assert!(skinny_gemm(DType::BF16, &gapped, &[w]).unwrap_err().contains("evenly"));
    }
}
