//! Matmuls on the GPU, apart from the executor that picks among them:
//!
//! - `cublas`: row-major matmuls mapped onto cuBLAS's column-major GEMM (`plan_gemm`, one pure mapping),
//!   and their launch;
//! - `lt`: the same calls through cuBLASLt with a chosen algorithm;
//! - `skinny`: the skinny GEMM template's configs, the operands it reads and its `FuseGemmArgs` words;
//! - `wgmma`: where the tensor-core template for many rows runs, and its operands' TMA descriptors;
//! - [`warm_up`]: the libraries' handles and workspaces, made in the background when a GPU is opened.
//!
//! fuse-ir's `codegen/gemm/` holds the other side of the templates: their sources and configs.

pub(crate) mod cublas;
pub(crate) mod lt;
pub(crate) mod skinny;
pub(crate) mod wgmma;

use super::device::CudaDevice;

/// Creates the cuBLAS and cuBLASLt handles and their workspaces on a background thread: creating them takes
/// over 100 ms, which a program would otherwise wait for in its first matmul; a model is usually still
/// loading its weights when they are ready. A failure here is silent: the first matmul then tries again
/// and reports it.
pub(crate) fn warm_up(device: CudaDevice) {
    let spawned = std::thread::Builder::new().name("fuse-cublas-setup".into()).spawn(move || {
        if device.context().bind_to_thread().is_err() {
            return;
        }
        // The workspaces are allocated on the stream: a graph captured meanwhile would record them.
        let _entered = device.enter();
        if let Ok(guard) = device.blas() {
            if let Some(blas) = guard.as_ref() {
                cublas::ensure_workspace(&device, *blas.handle());
            }
        }
        let _ = lt::prepare(&device);
    });
    drop(spawned);
}
