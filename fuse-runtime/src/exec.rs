//! The dispatcher: runs a plan on the backend its arguments live on, the CPU (`cpu::exec`) or a GPU
//! (`cuda::exec`). Neither backend knows of the other.

use crate::call::{values, GroupRun, InferMemo};
use crate::cuda::KernelCache;
use crate::{Arg, Device, Error, Result, Tensor};
use fuse_ir::{Graph, Plan};

/// Runs `plan` on `args` (one per graph input, kinds already checked). Returns the graph's outputs and,
/// when `timed`, how each group ran. Runs on the GPU when the tensors are there, generating the GPU
/// kernels for this call only.
pub(crate) fn execute(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: &[Arg<'_>],
    timed: bool,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    execute_cached(function, g, plan, args, timed, true, None, None)
}

/// [`execute`], keeping the plan's GPU kernels in `kernels` across calls. `library_only` keeps the GPU's
/// matmuls on cuBLAS (the unfused baseline and eager ops) instead of tuning their path. The arguments are
/// borrowed: a replayed GPU call reads them without cloning a tensor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_cached(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: &[Arg<'_>],
    timed: bool,
    library_only: bool,
    kernels: Option<&KernelCache>,
    memo: Option<&InferMemo>,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    if let Some(Device::Cuda(gpu)) = check_devices(function, args)? {
        return crate::cuda::exec::execute(function, g, plan, args, gpu, timed, library_only, kernels);
    }
    crate::cpu::exec::execute(function, g, plan, values(args), timed, memo)
}

/// The one device every tensor argument is on (`None` when there are no tensors).
fn check_devices<'a>(function: &str, args: &[Arg<'a>]) -> Result<Option<&'a Device>> {
    let mut first: Option<&Device> = None;
    for t in args.iter().filter_map(Arg::tensor) {
        match first {
            None => first = Some(t.device()),
            Some(d) if d != t.device() => {
                return Err(Error::DeviceMismatch {
                    function: function.into(),
                    first: d.to_string(),
                    second: t.device().to_string(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(first)
}
