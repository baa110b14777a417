//! The in-memory module cache: each kernel is compiled by NVRTC to a CUBIN for this GPU's exact arch and
//! loaded once per (name, source, defines, arch); later launches find the loaded function here.

use super::device::{driver_error, lock, CudaDevice};
use super::nvrtc::compile_cubin;
use crate::{Error, Result};
use cudarc::driver::CudaFunction;
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::Mutex;

/// What identifies a loaded kernel; the source is stored beside the function and compared on a hit, so a
/// fingerprint collision recompiles instead of launching the wrong kernel.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ModuleKey {
    name: String,
    source_hash: u64,
    defines: Vec<String>,
    arch: String,
}

/// Loaded kernels of one GPU. A HashMap is fine here: nothing is ever iterated, only looked up.
#[derive(Default)]
pub(crate) struct ModuleCache {
    functions: Mutex<HashMap<ModuleKey, (String, CudaFunction)>>,
}

impl ModuleCache {
    /// Number of distinct kernels loaded so far (tests check that a second call compiles nothing).
    pub(crate) fn len(&self) -> usize {
        lock(&self.functions).len()
    }
}

/// The kernel `name` of `source` (whose `fingerprint` is `source_hash`) specialised by `defines`, compiled
/// and loaded on first use.
pub(crate) fn kernel(
    device: &CudaDevice,
    function: &str,
    name: &str,
    source: &str,
    source_hash: u64,
    defines: &[String],
) -> Result<CudaFunction> {
    kernel_for_arch(device, function, name, source, source_hash, defines, device.arch())
}

/// [`kernel`] compiled for `arch` instead of the GPU's own (`sm_90a` for the wgmma template on an sm_90 GPU).
pub(crate) fn kernel_for_arch(
    device: &CudaDevice,
    function: &str,
    name: &str,
    source: &str,
    source_hash: u64,
    defines: &[String],
    arch: &str,
) -> Result<CudaFunction> {
    let cache = &device.state().modules;
    let key = ModuleKey { name: name.into(), source_hash, defines: defines.to_vec(), arch: arch.into() };
    let mut functions = lock(&cache.functions);
    if let Some((cached_source, f)) = functions.get(&key) {
        if cached_source == source {
            return Ok(f.clone());
        }
    }
    let cubin = compile_cubin(name, source, defines, arch).map_err(|e| Error::KernelCompile {
        function: function.to_string(),
        kernel: name.to_string(),
        log: e.to_string(),
    })?;
    let module = device.context().load_module(Ptx::from_binary(cubin)).map_err(|e| driver_error("load module", e))?;
    let f = module.load_function(name).map_err(|e| driver_error("load function", e))?;
    functions.insert(key, (source.to_string(), f.clone()));
    Ok(f)
}
