//! The in-memory module cache: each kernel is compiled by NVRTC to a CUBIN for this GPU's exact arch and
//! loaded once per (name, source, defines, arch); later launches find the loaded function here.

use super::nvrtc::compile_cubin;
use crate::cuda::driver::{driver_error, lock};
use crate::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    /// Each loaded function's key, by its driver handle: what a recorded launch ran (`source_of`).
    by_function: Mutex<HashMap<usize, ModuleKey>>,
}

/// What a loaded kernel was compiled from.
pub(crate) struct KernelOrigin {
    pub name: String,
    pub source: String,
    pub defines: Vec<String>,
    pub arch: String,
}

impl ModuleCache {
    /// Number of distinct kernels loaded so far (tests check that a second call compiles nothing).
    pub(crate) fn len(&self) -> usize {
        lock(&self.functions).len()
    }

    /// The kernel `name` of `source` (whose `fingerprint` is `source_hash`) specialised by `defines` and
    /// compiled for `arch`, compiled and loaded into `ctx` on first use (`CudaDevice::kernel` calls this).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn kernel(
        &self,
        ctx: &Arc<CudaContext>,
        function: &str,
        name: &str,
        source: &str,
        source_hash: u64,
        defines: &[String],
        arch: &str,
    ) -> Result<CudaFunction> {
        let key = ModuleKey { name: name.into(), source_hash, defines: defines.to_vec(), arch: arch.into() };
        let mut functions = lock(&self.functions);
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
        let module = ctx.load_module(Ptx::from_binary(cubin)).map_err(|e| driver_error("load module", e))?;
        let f = module.load_function(name).map_err(|e| driver_error("load function", e))?;
        lock(&self.by_function).insert(f.cu_function() as usize, key.clone());
        functions.insert(key, (source.to_string(), f.clone()));
        Ok(f)
    }

    /// The name, source, defines and arch `function` was compiled from, if this cache loaded it.
    pub(crate) fn origin(&self, function: &CudaFunction) -> Option<KernelOrigin> {
        let key = lock(&self.by_function).get(&(function.cu_function() as usize)).cloned()?;
        let functions = lock(&self.functions);
        let (source, _) = functions.get(&key)?;
        Some(KernelOrigin { name: key.name, source: source.clone(), defines: key.defines, arch: key.arch })
    }
}
