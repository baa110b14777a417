//! NCCL for `fuse::parallel`'s GPU groups, through cudarc's bindings loaded at run time (the `cuda` feature):
//! one communicator a rank, made for all the group's GPUs at once from one thread (`ncclCommInitAll`, so a
//! rank that fails to start cannot leave the others waiting in a collective initialisation), then each used
//! by its rank's thread to sum on its device's stream, in order with fuse's kernels there (and captured by a
//! CUDA graph like them).

use crate::{Error, Result};
use cudarc::driver::CudaStream;
use cudarc::nccl::{result, sys};
use fuse_ir::DType;

/// One rank's NCCL communicator.
pub(crate) struct NcclComm {
    raw: sys::ncclComm_t,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it do not overlap; each rank's
// is moved to its rank's thread and used only there.
unsafe impl Send for NcclComm {}

fn nccl_error(call: &str, e: result::NcclError) -> Error {
    Error::Cuda { op: call.to_string(), message: format!("NCCL returned {:?}", e.0) }
}

impl NcclComm {
    /// A communicator for each of `ordinals`' GPUs, rank i on `ordinals[i]`. An error, not a panic, where NCCL
    /// is not installed.
    pub(crate) fn for_devices(ordinals: &[usize]) -> Result<Vec<NcclComm>> {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::CudaUnavailable {
                reason: "NCCL (libnccl.so.2) was not found on the library path: a GPU group needs it".into(),
            });
        }
        let devices: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut raw: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `raw` has room for one communicator a device of `devices`.
        unsafe { result::comm_init_all(raw.as_mut_ptr(), devices.len() as i32, devices.as_ptr()) }
            .map_err(|e| nccl_error("ncclCommInitAll", e))?;
        Ok(raw.into_iter().map(|raw| NcclComm { raw }).collect())
    }

    /// Queues on `stream` the sum over the group's ranks of the `count` elements of `dtype` at device address
    /// `send` into `recv` (which may be `send`).
    pub(crate) fn all_reduce_sum(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: &CudaStream,
    ) -> Result<()> {
        let element = match dtype {
            DType::F32 => sys::ncclDataType_t::ncclFloat32,
            DType::F16 => sys::ncclDataType_t::ncclFloat16,
            DType::BF16 => sys::ncclDataType_t::ncclBfloat16,
            other => {
                return Err(Error::InvalidArgument {
                    op: "all_reduce_sum",
                    reason: format!("sums f32, f16 or bf16 tensors, got {other}"),
                })
            }
        };
        // SAFETY: the caller's addresses hold `count` elements of `dtype` on this rank's device, live until
        // the stream's work queued after this call has run (the executor's buffers).
        unsafe {
            result::all_reduce(
                send as *const std::ffi::c_void,
                recv as *mut std::ffi::c_void,
                count,
                element,
                sys::ncclRedOp_t::ncclSum,
                self.raw,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map(|_| ())
        .map_err(|e| nccl_error("ncclAllReduce", e))
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: made by ncclCommInitAll, destroyed once; an error here has no one to report to.
        let _ = unsafe { result::comm_destroy(self.raw) };
    }
}
