//! Row-major matmuls on cuBLAS. cuBLAS is column-major: a row-major C = A·B is the column-major
//! Cᵀ = Bᵀ·Aᵀ, so the operands swap places and each is read as stored (no copy): a row-major matrix is a
//! column-major transpose with its row stride as leading dimension, and a `.t()` view (unit row stride) is
//! a column-major matrix read with `op = T`. Everything about that mapping lives in `plan_gemm`.

use crate::cuda::device::CudaDevice;
use crate::cuda::driver::lock;
use crate::{Error, Result};
use cudarc::cublas::sys::{self, cublasOperation_t as BlasOp, cudaDataType_t};
use cudarc::driver::{CudaSlice, DevicePtr};
use fuse_ir::DType;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

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
        // Never reached: inference refuses a matmul of ids, and blocks reach cuBLAS dequantized.
        DType::U32 => cudaDataType_t::CUDA_R_32U,
        _ => cudaDataType_t::CUDA_R_8U,
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

/// The parameters of one `cublasGemmStridedBatchedEx` call except the three addresses, converted once
/// (a launch plan keeps them, so a repeated call only fills in the addresses).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GemmCall {
    pub(super) m: i32,
    pub(super) n: i32,
    pub(super) k: i32,
    pub(super) first_op: BlasOp,
    pub(super) second_op: BlasOp,
    pub(super) lda: i32,
    pub(super) ldb: i32,
    pub(super) ldc: i32,
    pub(super) first_batch_stride: i64,
    pub(super) second_batch_stride: i64,
    pub(super) c_batch_stride: i64,
    pub(super) batch: i32,
    pub(super) ty: cudaDataType_t,
    /// Bytes of one element, to turn address distances into element strides.
    pub(super) element_bytes: u64,
    /// f32 operands multiplied on the tensor cores as TF32 (each rounded to 10 bits of mantissa, as f16
    /// holds): set for weights dequantized into scratch at many rows (see [`GemmCall::tf32_for`]).
    pub(crate) tf32: bool,
}

impl GemmPlan {
    /// The call's parameters for `dtype`; `None` when there is nothing to compute (an empty product).
    pub(crate) fn call(&self, dtype: DType) -> Result<Option<GemmCall>> {
        if self.m == 0 || self.n == 0 || self.batch == 0 {
            return Ok(None);
        }
        Ok(Some(GemmCall {
            m: to_i32("n", self.m)?,
            n: to_i32("m", self.n)?,
            k: to_i32("k", self.k)?,
            first_op: self.first.op,
            second_op: self.second.op,
            lda: to_i32("ld", self.first.ld)?,
            ldb: to_i32("ld", self.second.ld)?,
            ldc: to_i32("ld", self.ldc)?,
            first_batch_stride: to_i64(self.first_batch_stride),
            second_batch_stride: to_i64(self.second_batch_stride),
            c_batch_stride: to_i64(self.c_batch_stride),
            batch: to_i32("batch", self.batch)?,
            ty: data_type(dtype),
            element_bytes: dtype.size_bytes() as u64,
            tf32: false,
        }))
    }
}

/// Rows of the left operand from which an f32 product by weights of quantized blocks (dequantized into f32
/// scratch) runs on the tensor cores as TF32: there the weights carry 4-8 bits, and the f32 CUDA-core GEMM
/// took 4.1 ms for the 8B MLP at 512 rows on an H100 (BENCHMARKS.md). Fewer rows keep exact f32 products.
pub(crate) const TF32_MIN_ROWS: usize = 64;

impl GemmCall {
    /// Whether a product of `dtype` activations, `rows` of them, by weights that were `quantized` runs as
    /// TF32 (see [`TF32_MIN_ROWS`]).
    pub(crate) fn tf32_for(dtype: DType, quantized: bool, rows: usize) -> bool {
        dtype == DType::F32 && quantized && rows >= TF32_MIN_ROWS
    }

    /// cuBLAS's compute type for this call.
    pub(super) fn compute_type(&self) -> sys::cublasComputeType_t {
        match self.tf32 {
            true => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            false => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        }
    }

    /// Elements of one (unbatched) product.
    pub(crate) fn product_len(&self) -> usize {
        self.m as usize * self.n as usize
    }

    /// Elements from one product to the next in a buffer holding two: a product rounded up to 256 bytes,
    /// so that the second starts as aligned as a fresh allocation (the kernels that read it may have been
    /// specialised for 16-byte vector loads).
    pub(crate) fn paired_product_stride(&self) -> usize {
        let bytes = (self.product_len() as u64 * self.element_bytes).next_multiple_of(256);
        (bytes / self.element_bytes) as usize
    }

    /// Whether this product and `other` differ only in the right operand and the product's place, so that
    /// both can be one call of batch 2 (DualGemm: the two products share the left operand).
    pub(crate) fn pairs_with(&self, other: &GemmCall) -> bool {
        self == other && self.batch == 1
    }

    /// The two products `first_a · second` and `first_b · second` (cuBLAS's operand order) as one call of
    /// batch 2 when the two first operands lie a whole number of elements apart: batch 1 is batch 0
    /// moved by that distance, and the products sit `paired_product_stride` apart. Returns the order
    /// used (`false`: `first_a` is batch 0 and its product comes first) or `None` when the distance does
    /// not fit (the caller then makes two calls).
    pub(crate) fn batched_pair(&self, first_a: u64, first_b: u64) -> Option<(bool, GemmCall)> {
        let swapped = first_b < first_a;
        let distance = if swapped { first_a - first_b } else { first_b - first_a };
        if distance == 0 || distance % self.element_bytes != 0 {
            return None;
        }
        let stride = i64::try_from(distance / self.element_bytes).ok()?;
        let call = GemmCall {
            first_batch_stride: stride,
            second_batch_stride: 0,
            c_batch_stride: i64::try_from(self.paired_product_stride()).ok()?,
            batch: 2,
            ..*self
        };
        Some((swapped, call))
    }
}

fn op_name(op: BlasOp) -> &'static str {
    match op {
        BlasOp::CUBLAS_OP_N => "N",
        BlasOp::CUBLAS_OP_T => "T",
        _ => "C",
    }
}

fn type_name(ty: cudaDataType_t) -> &'static str {
    match ty {
        cudaDataType_t::CUDA_R_32F => "f32",
        cudaDataType_t::CUDA_R_16F => "f16",
        cudaDataType_t::CUDA_R_16BF => "bf16",
        _ => "?",
    }
}

impl GemmCall {
    /// FUSE_DEBUG>=3: `calls` cuBLAS calls of this form, in cuBLAS's column-major terms (A is the row-major
    /// right operand, the weight; B the left one; see the module doc), `note` in parentheses after the
    /// count. E.g. `cublasGemmStridedBatchedEx x1 (dual w_gate|w_up, batch stride 58720256 elems), op(A)=T
    /// op(B)=N, m=14336 n=16 k=4096, lda=4096 ldb=4096 ldc=14336, bf16, compute f32`.
    pub(crate) fn describe(&self, calls: usize, note: &str) -> String {
        let note = if note.is_empty() { String::new() } else { format!(" ({note})") };
        let batch = if self.batch == 1 {
            String::new()
        } else {
            format!(
                ", batch {} (strides A {}, B {}, C {} elems)",
                self.batch, self.first_batch_stride, self.second_batch_stride, self.c_batch_stride
            )
        };
        format!(
            "cublasGemmStridedBatchedEx x{calls}{note}, op(A)={} op(B)={}, m={} n={} k={}, lda={} ldb={} ldc={}{batch}, {}, compute {}",
            op_name(self.first_op),
            op_name(self.second_op),
            self.m,
            self.n,
            self.k,
            self.lda,
            self.ldb,
            self.ldc,
            type_name(self.ty),
            if self.tf32 { "f32 (TF32 tensor cores)" } else { "f32" },
        )
    }

    /// The batch stride of the right-operand (cuBLAS A) of a call, in elements (a batched pair's distance
    /// between its two weights).
    pub(crate) fn weight_batch_stride(&self) -> i64 {
        self.first_batch_stride
    }
}

/// cuBLAS's workspace, one per GPU, allocated and handed to the handle once: without one cuBLAS may
/// allocate its own per call, and `cublasSetStream` would reset it.
const WORKSPACE_BYTES: usize = 32 << 20;

fn workspaces() -> &'static Mutex<BTreeMap<usize, CudaSlice<u8>>> {
    static WORKSPACES: OnceLock<Mutex<BTreeMap<usize, CudaSlice<u8>>>> = OnceLock::new();
    WORKSPACES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Gives the handle its workspace on first use on this GPU (the handle is made once per GPU and its
/// stream never changes, so once is enough). A failure leaves cuBLAS managing its own workspace.
pub(crate) fn ensure_workspace(device: &CudaDevice, handle: sys::cublasHandle_t) {
    let mut all = lock(workspaces());
    // While capturing, the allocation would be the graph's: try again on a later call.
    if all.contains_key(&device.ordinal()) || device.is_capturing() {
        return;
    }
    // SAFETY: uninitialised scratch memory that only cuBLAS writes and reads, on the handle's stream.
    let Ok(buffer) = (unsafe { device.stream().alloc::<u8>(WORKSPACE_BYTES) }) else { return };
    let address = buffer.device_ptr(device.stream()).0;
    // SAFETY: the buffer is a live allocation of WORKSPACE_BYTES on this GPU, kept for the process's life.
    let status = unsafe { sys::cublasSetWorkspace_v2(handle, address as *mut std::ffi::c_void, WORKSPACE_BYTES) };
    if status.result().is_ok() {
        all.insert(device.ordinal(), buffer);
    }
}

/// Queues one prepared call on the device's stream with these operand and product addresses.
pub(crate) fn launch_gemm(device: &CudaDevice, call: &GemmCall, first: u64, second: u64, c: u64) -> Result<()> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    let guard = device.blas()?;
    let blas = guard.as_ref().ok_or_else(|| Error::Cuda { op: "cublas".into(), message: "no handle".into() })?;
    let handle = *blas.handle();
    ensure_workspace(device, handle);
    // SAFETY: the addresses are live device allocations of this GPU holding the planned matrices (the
    // executor checked shapes and strides against their allocations; a batched pair's stride is the
    // distance between its two checked operands), the handle is bound to this GPU's stream and locked for
    // the call, and alpha/beta are host f32 as the 32F compute type expects.
    let status = unsafe {
        sys::cublasGemmStridedBatchedEx(
            handle,
            call.first_op,
            call.second_op,
            call.m,
            call.n,
            call.k,
            (&alpha as *const f32).cast(),
            first as *const std::ffi::c_void,
            call.ty,
            call.lda,
            call.first_batch_stride,
            second as *const std::ffi::c_void,
            call.ty,
            call.ldb,
            call.second_batch_stride,
            (&beta as *const f32).cast(),
            c as *mut std::ffi::c_void,
            call.ty,
            call.ldc,
            call.c_batch_stride,
            call.batch,
            call.compute_type(),
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

    #[test]
    fn a_dual_gemm_pairs_into_one_batched_call_when_the_weights_are_whole_elements_apart() {
        let a = mat(1, 3, 17, [0, 17, 1]);
        let w = mat(1, 17, 5, [0, 1, 17]);
        let call = plan_gemm(&a, &w).unwrap().call(DType::BF16).unwrap().unwrap();
        assert!(call.pairs_with(&call));
        let (swapped, pair) = call.batched_pair(0x1000, 0x1000 + 2 * 85).unwrap();
        assert!(!swapped);
        // 15 products of 2 bytes, rounded up to 256 bytes.
        assert_eq!(
            (pair.batch, pair.first_batch_stride, pair.second_batch_stride, pair.c_batch_stride),
            (2, 85, 0, 128)
        );
        // The second weight first in memory: the order swaps so that the stride stays positive.
        let (swapped, pair) = call.batched_pair(0x9000, 0x1000).unwrap();
        assert!(swapped);
        assert_eq!(pair.first_batch_stride, 0x8000 / 2);
        // Half an element apart, or the same weight twice: two calls.
        assert!(call.batched_pair(0x1000, 0x1001).is_none());
        assert!(call.batched_pair(0x1000, 0x1000).is_none());
        // A batched product does not pair.
        let batched = plan_gemm(&mat(2, 3, 17, [51, 17, 1]), &mat(2, 17, 5, [85, 5, 1])).unwrap();
        let batched = batched.call(DType::F32).unwrap().unwrap();
        assert!(!batched.pairs_with(&batched));
        // FUSE_DEBUG>=3's description of the call, alone and paired.
        let bf16 = plan_gemm(&mat(1, 16, 4096, [0, 4096, 1]), &mat(1, 4096, 14336, [0, 1, 4096])).unwrap();
        let bf16 = bf16.call(DType::BF16).unwrap().unwrap();
        assert_eq!(
            bf16.describe(1, ""),
            "cublasGemmStridedBatchedEx x1, op(A)=T op(B)=N, m=14336 n=16 k=4096, lda=4096 ldb=4096 ldc=14336, bf16, compute f32"
        );
        let (_, pair) = bf16.batched_pair(0x10_0000, 0x10_0000 + 2 * 14336 * 4096).unwrap();
        assert_eq!(
            pair.describe(1, "dual w_gate|w_up, batch stride 58720256 elems"),
            "cublasGemmStridedBatchedEx x1 (dual w_gate|w_up, batch stride 58720256 elems), op(A)=T op(B)=N, \
             m=14336 n=16 k=4096, lda=4096 ldb=4096 ldc=14336, batch 2 (strides A 58720256, B 0, C 229376 elems), \
             bf16, compute f32"
        );
        assert_eq!(pair.weight_batch_stride(), 58720256);
        assert!(batched.describe(1, "").contains(", batch 2 (strides A 85, B 51, C 15 elems), f32, compute f32"));
        // An empty product is no call at all.
        assert!(plan_gemm(&mat(1, 0, 17, [0, 17, 1]), &w).unwrap().call(DType::F32).unwrap().is_none());
    }
}
