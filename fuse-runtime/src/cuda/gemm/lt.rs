//! The same matmuls as `gemm.rs`, through cuBLASLt with an algorithm the autotuner picked: cuBLAS's own
//! call takes its heuristic's first algorithm, cuBLASLt lists several, and at some shapes a later one is
//! faster. A [`LtMatmul`] holds the descriptors of one call form (a `GemmCall`) and the heuristic's
//! algorithms, made once per form and GPU and kept for the process.

use super::cublas::GemmCall;
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::lock;
use crate::{Error, Result};
use cudarc::cublas::sys::cudaDataType_t as BlasType;
use cudarc::cublaslt::sys::{self, cublasLtMatmulAlgo_t};
use cudarc::driver::{CudaSlice, DevicePtr};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// Algorithms asked of the heuristic (the fast tuning mode tries the first few).
const MAX_ALGOS: usize = 8;
/// The workspace each algorithm may use.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A raw handle or descriptor; cuBLASLt objects are plain host structures, used under the lock below.
#[derive(Clone, Copy)]
struct Raw<T>(T);
// SAFETY: cuBLASLt handles and descriptors may be used from any thread; every use of these is serialised
// by the `LT` mutex or is read-only after creation (descriptors are not changed after `LtMatmul::new`).
unsafe impl<T> Send for Raw<T> {}
unsafe impl<T> Sync for Raw<T> {}

/// Per GPU: the cuBLASLt handle and its workspace.
struct LtDevice {
    ordinal: usize,
    handle: Raw<sys::cublasLtHandle_t>,
    workspace: CudaSlice<u8>,
}

/// One call form on one GPU: its descriptors and the heuristic's algorithms, best first.
pub(crate) struct LtMatmul {
    ordinal: usize,
    call: GemmCall,
    desc: Raw<sys::cublasLtMatmulDesc_t>,
    a: Raw<sys::cublasLtMatrixLayout_t>,
    b: Raw<sys::cublasLtMatrixLayout_t>,
    c: Raw<sys::cublasLtMatrixLayout_t>,
    algos: Vec<Raw<cublasLtMatmulAlgo_t>>,
}

struct LtState {
    devices: Vec<LtDevice>,
    forms: Vec<Arc<LtMatmul>>,
}

fn state() -> &'static Mutex<LtState> {
    static LT: OnceLock<Mutex<LtState>> = OnceLock::new();
    LT.get_or_init(|| Mutex::new(LtState { devices: Vec::new(), forms: Vec::new() }))
}

fn lt_error(op: &str, e: impl std::fmt::Debug) -> Error {
    Error::Cuda { op: format!("cublasLt {op}"), message: format!("{e:?}") }
}

fn lt_type(ty: BlasType) -> sys::cudaDataType {
    match ty {
        BlasType::CUDA_R_16F => sys::cudaDataType::CUDA_R_16F,
        BlasType::CUDA_R_16BF => sys::cudaDataType::CUDA_R_16BF,
        _ => sys::cudaDataType::CUDA_R_32F,
    }
}

/// `cublasOperation_t` as the 32-bit value cuBLASLt's TRANSA/TRANSB attributes hold (N = 0, T = 1).
fn lt_op(op: cudarc::cublas::sys::cublasOperation_t) -> i32 {
    match op {
        cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T => 1,
        _ => 0,
    }
}

impl LtState {
    fn device(&mut self, device: &CudaDevice) -> Result<&LtDevice> {
        if let Some(i) = self.devices.iter().position(|d| d.ordinal == device.ordinal()) {
            return Ok(&self.devices[i]);
        }
        // Its workspace, allocated on the stream, would be recorded into a graph being captured.
        device.refuse_while_capturing("setting up cuBLASLt (run the step once before capturing it)")?;
        let handle = cudarc::cublaslt::result::create_handle().map_err(|e| lt_error("create", e))?;
        // SAFETY: scratch memory only cuBLASLt uses, on the device's stream, kept for the process's life.
        let workspace = unsafe { device.stream().alloc::<u8>(WORKSPACE_BYTES) }
            .map_err(|e| crate::cuda::driver::driver_error("alloc the cuBLASLt workspace", e))?;
        self.devices.push(LtDevice { ordinal: device.ordinal(), handle: Raw(handle), workspace });
        Ok(self.devices.last().expect("just pushed"))
    }
}

impl LtMatmul {
    /// How many algorithms the heuristic offered for this form (the `cublaslt:<i>` paths).
    pub(crate) fn algorithms(&self) -> usize {
        self.algos.len()
    }
}

/// Creates this GPU's cuBLASLt handle and workspace now rather than at the first cuBLASLt matmul.
pub(crate) fn prepare(device: &CudaDevice) -> Result<()> {
    lock(state()).device(device).map(|_| ())
}

/// The descriptors and algorithms of `call` on `device` (made on first use).
pub(crate) fn lt_matmul(device: &CudaDevice, call: &GemmCall) -> Result<Arc<LtMatmul>> {
    let mut st = lock(state());
    if let Some(f) = st.forms.iter().find(|f| f.ordinal == device.ordinal() && f.call == *call) {
        return Ok(f.clone());
    }
    let handle = st.device(device)?.handle.0;
    let form = Arc::new(LtMatmul::new(device.ordinal(), handle, call)?);
    st.forms.push(form.clone());
    Ok(form)
}

/// A column-major layout of `rows x cols` with leading dimension `ld`, batched when `batch > 1`.
fn layout(
    ty: sys::cudaDataType,
    rows: i32,
    cols: i32,
    ld: i32,
    batch: i32,
    stride: i64,
) -> Result<Raw<sys::cublasLtMatrixLayout_t>> {
    use sys::cublasLtMatrixLayoutAttribute_t as Attr;
    let l = cudarc::cublaslt::result::create_matrix_layout(ty, rows as u64, cols as u64, i64::from(ld))
        .map_err(|e| lt_error("layout", e))?;
    if batch > 1 {
        // SAFETY: `l` is a live layout; the values are an i32 and an i64 as these attributes expect.
        unsafe {
            cudarc::cublaslt::result::set_matrix_layout_attribute(
                l,
                Attr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                (&batch as *const i32).cast(),
                4,
            )
            .map_err(|e| lt_error("layout", e))?;
            cudarc::cublaslt::result::set_matrix_layout_attribute(
                l,
                Attr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                (&stride as *const i64).cast(),
                8,
            )
            .map_err(|e| lt_error("layout", e))?;
        }
    }
    Ok(Raw(l))
}

impl LtMatmul {
    fn new(ordinal: usize, handle: sys::cublasLtHandle_t, call: &GemmCall) -> Result<LtMatmul> {
        use sys::cublasLtMatmulDescAttributes_t as Desc;
        let ty = lt_type(call.ty);
        let compute = match call.tf32 {
            true => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            false => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let desc = cudarc::cublaslt::result::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F)
            .map_err(|e| lt_error("matmul desc", e))?;
        let (ta, tb) = (lt_op(call.first_op), lt_op(call.second_op));
        let is_t = |op: i32| op == 1;
        // SAFETY: `desc` is live; each value is an i32 operation code as the attribute expects.
        unsafe {
            for (attr, op) in [(Desc::CUBLASLT_MATMUL_DESC_TRANSA, &ta), (Desc::CUBLASLT_MATMUL_DESC_TRANSB, &tb)] {
                cudarc::cublaslt::result::set_matmul_desc_attribute(desc, attr, (op as *const i32).cast(), 4)
                    .map_err(|e| lt_error("matmul desc", e))?;
            }
        }
        let (m, n, k) = (call.m, call.n, call.k);
        let a = if is_t(ta) { (k, m) } else { (m, k) };
        let b = if is_t(tb) { (n, k) } else { (k, n) };
        let a = layout(ty, a.0, a.1, call.lda, call.batch, call.first_batch_stride)?;
        let b = layout(ty, b.0, b.1, call.ldb, call.batch, call.second_batch_stride)?;
        let c = layout(ty, m, n, call.ldc, call.batch, call.c_batch_stride)?;
        let mut form = LtMatmul { ordinal, call: *call, desc: Raw(desc), a, b, c, algos: Vec::new() };
        form.algos = form.heuristic(handle)?;
        Ok(form)
    }

    fn heuristic(&self, handle: sys::cublasLtHandle_t) -> Result<Vec<Raw<cublasLtMatmulAlgo_t>>> {
        use sys::cublasLtMatmulPreferenceAttributes_t as Pref;
        let pref = cudarc::cublaslt::result::create_matmul_pref().map_err(|e| lt_error("preference", e))?;
        let bytes = WORKSPACE_BYTES as u64;
        let mut results = vec![std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed(); MAX_ALGOS];
        let mut count = 0i32;
        // SAFETY: every descriptor is live; `results` has room for MAX_ALGOS entries, which the call fills
        // up to `count`.
        let status = unsafe {
            cudarc::cublaslt::result::set_matmul_pref_attribute(
                pref,
                Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&bytes as *const u64).cast(),
                8,
            )
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    self.desc.0,
                    self.a.0,
                    self.b.0,
                    self.c.0,
                    self.c.0,
                    pref,
                    MAX_ALGOS as i32,
                    results.as_mut_ptr().cast(),
                    &mut count,
                )
                .result()
            })
        };
        // SAFETY: `pref` is live and no longer used.
        let _ = unsafe { cudarc::cublaslt::result::destroy_matmul_pref(pref) };
        status.map_err(|e| lt_error("heuristic", e))?;
        let algos = results
            .iter()
            .take(count.max(0) as usize)
            // SAFETY: the first `count` entries were written by the heuristic.
            .map(|r| unsafe { r.assume_init() })
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && r.workspaceSize <= WORKSPACE_BYTES)
            .map(|r| Raw(r.algo))
            .collect();
        Ok(algos)
    }
}

/// Queues `call` with algorithm `algo` of its form on the device's stream.
pub(crate) fn launch_lt(
    device: &CudaDevice,
    form: &LtMatmul,
    algo: usize,
    first: u64,
    second: u64,
    c: u64,
) -> Result<()> {
    let Some(chosen) = form.algos.get(algo) else {
        return Err(lt_error("matmul", format!("algorithm {algo} of {} for this shape", form.algos.len())));
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let mut st = lock(state());
    let dev = st.device(device)?;
    let workspace = dev.workspace.device_ptr(device.stream()).0;
    // SAFETY: the addresses are live allocations of this GPU holding the matrices `form.call` describes
    // (checked by the executor as for cuBLAS), the descriptors and the algorithm belong to this form, the
    // workspace is this GPU's and the call is queued on its stream under the lock.
    unsafe {
        cudarc::cublaslt::result::matmul(
            dev.handle.0,
            form.desc.0,
            (&alpha as *const f32).cast(),
            (&beta as *const f32).cast(),
            first as *const c_void,
            form.a.0,
            second as *const c_void,
            form.b.0,
            c as *const c_void,
            form.c.0,
            c as *mut c_void,
            form.c.0,
            &chosen.0,
            workspace as *mut c_void,
            WORKSPACE_BYTES,
            device.stream().cu_stream() as sys::cudaStream_t,
        )
    }
    .map_err(|e| lt_error("matmul", e))
}
