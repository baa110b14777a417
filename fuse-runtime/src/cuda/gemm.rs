//! Row-major matmuls on cuBLAS. cuBLAS is column-major: a row-major C = A·B is the column-major
//! Cᵀ = Bᵀ·Aᵀ, so the operands swap places and each is read as stored (no copy): a row-major matrix is a
//! column-major transpose with its row stride as leading dimension, and a `.t()` view (unit row stride) is
//! a column-major matrix read with `op = T`. Everything about that mapping lives in `plan_gemm`.

use super::device::CudaDevice;
use crate::{Error, Result};
use cudarc::cublas::sys::{self, cublasOperation_t as BlasOp, cudaDataType_t};
use fuse_ir::DType;

/// A matrix operand: `batch` matrices of `rows x cols` at `address`, strides in elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Matrix {
    pub address: u64,
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
    pub batch_stride: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

/// How cuBLAS reads one operand: the stored column-major matrix, its op and leading dimension.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BlasOperand {
    op: BlasOp,
    ld: usize,
}

/// One `cublasGemmStridedBatchedEx` call, in cuBLAS's (column-major) terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GemmPlan {
    /// cuBLAS m, n, k: N, M (rows of the product, batches folded in when they can be), K.
    m: usize,
    n: usize,
    k: usize,
    /// The first cuBLAS operand is the row-major right operand B, the second is A.
    first: BlasOperand,
    second: BlasOperand,
    first_address: u64,
    second_address: u64,
    first_batch_stride: usize,
    second_batch_stride: usize,
    ldc: usize,
    c_batch_stride: usize,
    batch: usize,
}

/// A row-major-indexed `rows x cols` matrix seen by cuBLAS as its transpose: `op = N` on a column-major
/// `cols x rows` matrix when rows are dense (unit column stride), `op = T` on the matrix itself stored
/// column-major when columns are dense. `None` when neither axis is dense (the caller must copy).
fn as_transposed_operand(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> Option<BlasOperand> {
    if (cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols) {
        let ld = if rows == 1 { cols } else { row_stride };
        return Some(BlasOperand { op: BlasOp::CUBLAS_OP_N, ld: ld.max(1) });
    }
    if (rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows) {
        let ld = if cols == 1 { rows } else { col_stride };
        return Some(BlasOperand { op: BlasOp::CUBLAS_OP_T, ld: ld.max(1) });
    }
    None
}

/// Maps row-major `C[batch, m, n] = A[batch, m, k] · B[(batch,) k, n]` (C dense at `c_address`) onto one
/// cuBLAS call. A 2-D weight with A's batches evenly spaced folds the batch into rows (one plain GEMM).
pub(crate) fn plan_gemm(a: &Matrix, b: &Matrix) -> std::result::Result<GemmPlan, String> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || (b.batch != 1 && b.batch != a.batch) {
        return Err(format!("cannot multiply {}x{}x{} by {}x{}x{}", a.batch, m, k, b.batch, b.rows, n));
    }
    let folds = b.batch == 1 && (a.batch == 1 || a.batch_stride == m * a.row_stride);
    let (rows, batch) = if folds { (a.batch * m, 1) } else { (m, a.batch) };
    let folded_a = if folds { as_transposed_operand(rows, k, a.row_stride, a.col_stride) } else { None };
    let (rows, batch, second) = match folded_a {
        Some(op) => (rows, batch, op),
        None => {
            let op = as_transposed_operand(m, k, a.row_stride, a.col_stride).ok_or_else(|| {
                format!("the left operand's strides ({}, {}) have no dense axis", a.row_stride, a.col_stride)
            })?;
            (m, a.batch, op)
        }
    };
    let first = as_transposed_operand(k, n, b.row_stride, b.col_stride).ok_or_else(|| {
        format!("the right operand's strides ({}, {}) have no dense axis", b.row_stride, b.col_stride)
    })?;
    Ok(GemmPlan {
        m: n,
        n: rows,
        k,
        first,
        second,
        first_address: b.address,
        second_address: a.address,
        first_batch_stride: if b.batch == 1 { 0 } else { b.batch_stride },
        second_batch_stride: if batch == 1 { 0 } else { a.batch_stride },
        ldc: n.max(1),
        c_batch_stride: m * n,
        batch,
    })
}

fn data_type(dtype: DType) -> cudaDataType_t {
    match dtype {
        DType::F32 => cudaDataType_t::CUDA_R_32F,
        DType::F16 => cudaDataType_t::CUDA_R_16F,
        DType::BF16 => cudaDataType_t::CUDA_R_16BF,
    }
}

fn to_i32(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Cuda {
        op: "cublas gemm".into(),
        message: format!("{what} = {v} exceeds cuBLAS's 32-bit sizes"),
    })
}

fn to_i64(v: usize) -> i64 {
    v as i64
}

/// Runs the planned GEMM on the device's stream; operands and product are `dtype`, accumulation is f32.
pub(crate) fn run_gemm(device: &CudaDevice, plan: &GemmPlan, dtype: DType, c_address: u64) -> Result<()> {
    if plan.m == 0 || plan.n == 0 || plan.batch == 0 {
        return Ok(());
    }
    let (m, n, k) = (to_i32("n", plan.m)?, to_i32("m", plan.n)?, to_i32("k", plan.k)?);
    let (lda, ldb, ldc) = (to_i32("ld", plan.first.ld)?, to_i32("ld", plan.second.ld)?, to_i32("ld", plan.ldc)?);
    let batch = to_i32("batch", plan.batch)?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let ty = data_type(dtype);
    let guard = device.blas()?;
    let blas = guard.as_ref().ok_or_else(|| Error::Cuda { op: "cublas".into(), message: "no handle".into() })?;
    // SAFETY: the addresses are live device allocations of this GPU holding the planned matrices (the
    // executor checked shapes and strides against their allocations), the handle is bound to this GPU's
    // stream and locked for the call, and alpha/beta are host f32 as the 32F compute type expects.
    let status = unsafe {
        sys::cublasGemmStridedBatchedEx(
            *blas.handle(),
            plan.first.op,
            plan.second.op,
            m,
            n,
            k,
            (&alpha as *const f32).cast(),
            plan.first_address as *const std::ffi::c_void,
            ty,
            lda,
            to_i64(plan.first_batch_stride),
            plan.second_address as *const std::ffi::c_void,
            ty,
            ldb,
            to_i64(plan.second_batch_stride),
            (&beta as *const f32).cast(),
            c_address as *mut std::ffi::c_void,
            ty,
            ldc,
            to_i64(plan.c_batch_stride),
            batch,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    };
    status.result().map_err(|e| Error::Cuda { op: "cublas gemm".into(), message: format!("{e:?}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mat(batch: usize, rows: usize, cols: usize, strides: [usize; 3]) -> Matrix {
        Matrix {
            address: 0x100,
            batch,
            rows,
            cols,
            batch_stride: strides[0],
            row_stride: strides[1],
            col_stride: strides[2],
        }
    }

    #[test]
    fn row_major_operands_swap_and_stay_untransposed() {
        // [3, 17] x [17, 5]: cuBLAS computes the [5, 3] column-major product as B' (5x17) x A' (17x3).
        let p = plan_gemm(&mat(1, 3, 17, [0, 17, 1]), &mat(1, 17, 5, [0, 5, 1])).unwrap();
        assert_eq!((p.m, p.n, p.k, p.batch), (5, 3, 17, 1));
        assert_eq!(p.first, BlasOperand { op: BlasOp::CUBLAS_OP_N, ld: 5 });
        assert_eq!(p.second, BlasOperand { op: BlasOp::CUBLAS_OP_N, ld: 17 });
        assert_eq!(p.ldc, 5);
    }

    #[test]
    fn a_transposed_weight_is_read_with_op_t() {
        // w [5, 17] stored row-major, used as w.t() [17, 5]: strides (1, 17).
        let p = plan_gemm(&mat(1, 3, 17, [0, 17, 1]), &mat(1, 17, 5, [0, 1, 17])).unwrap();
        assert_eq!(p.first, BlasOperand { op: BlasOp::CUBLAS_OP_T, ld: 17 });
    }

    #[test]
    fn batches_fold_into_rows_for_a_2d_weight() {
        let p = plan_gemm(&mat(4, 3, 17, [51, 17, 1]), &mat(1, 17, 5, [0, 5, 1])).unwrap();
        assert_eq!((p.n, p.batch), (12, 1));
        // A batch stride that is not m rows (a sliced or permuted view) falls back to a batched call.
        let p = plan_gemm(&mat(4, 3, 17, [64, 17, 1]), &mat(1, 17, 5, [0, 5, 1])).unwrap();
        assert_eq!((p.n, p.batch, p.second_batch_stride, p.first_batch_stride), (3, 4, 64, 0));
        // 3-D x 3-D: batched, the product batch stride is m * n.
        let p = plan_gemm(&mat(2, 3, 17, [51, 17, 1]), &mat(2, 17, 5, [85, 5, 1])).unwrap();
        assert_eq!((p.batch, p.first_batch_stride, p.c_batch_stride), (2, 85, 15));
    }

    #[test]
    fn single_rows_and_columns_take_any_stride() {
        // One row (decode): the row stride is irrelevant.
        let p = plan_gemm(&mat(1, 1, 17, [0, 0, 1]), &mat(1, 17, 1, [0, 1, 1])).unwrap();
        assert_eq!((p.m, p.n, p.k), (1, 1, 17));
        assert_eq!(p.second.ld, 17);
    }

    #[test]
    fn operands_without_a_dense_axis_are_refused() {
        let err = plan_gemm(&mat(1, 3, 17, [0, 34, 2]), &mat(1, 17, 5, [0, 5, 1])).unwrap_err();
        assert!(err.contains("left operand"), "{err}");
        assert!(plan_gemm(&mat(1, 3, 17, [0, 17, 1]), &mat(1, 16, 5, [0, 5, 1])).is_err());
    }
}
