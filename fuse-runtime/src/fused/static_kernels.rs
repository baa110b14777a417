//! The CUDA sources `#[fuse]` emits into the user's binary, and the FUSE_DEBUG reports about kernels.

use crate::call::GroupRun;
use crate::Device;
use fuse_ir::codegen::{plan_kernels, KernelSpec};
use fuse_ir::{Graph, GroupKind, Plan};

/// One generated kernel as the macro emitted it: its `extern "C"` name, its description (slots, group, role:
/// `KernelSpec::meta`) and its self-contained CUDA C. The runtime launches these strings for a `#[fuse]`
/// function (it does not run the code generator for it), so what a user can read in the binary is what runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticKernel {
    pub name: &'static str,
    pub meta: &'static str,
    pub source: &'static str,
}

impl StaticKernel {
    /// The plan group this kernel belongs to (`k0`, `k1`, .. in reports).
    pub fn group(&self) -> usize {
        self.meta.split_whitespace().nth(3).and_then(|g| g.parse().ok()).unwrap_or(0)
    }

    /// What the kernel does in its group: `whole` (a pointwise or row group's one kernel); for a matmul group,
    /// `prologue` and `epilogue` (around library matmuls), or one of the alternatives that each do the matmuls
    /// and the epilogue in one kernel, `skinny`, `wgmma` and `mma`: one of those, or the library path, runs
    /// per shape.
    pub fn role(&self) -> &'static str {
        self.meta.split_whitespace().nth(4).unwrap_or("whole")
    }

    /// The kernel as the launcher takes it, its source borrowed (not copied) from the binary.
    pub fn spec(&self) -> Result<KernelSpec, String> {
        KernelSpec::from_meta(self.meta, std::borrow::Cow::Borrowed(self.source))
    }
}

/// FUSE_DEBUG>=4: each kernel's name and source. `emitted`: the macro's sources when they describe `plan`
/// (the fused plan of a `FusedFn` made by `with_kernels`); otherwise the kernels are generated from `plan`.
pub(crate) fn print_sources(function: &str, g: &Graph, plan: &Plan, emitted: Option<&[StaticKernel]>) {
    let kernels: Vec<(String, String)> = match emitted {
        Some(kernels) => kernels.iter().map(|k| (k.name.to_string(), k.source.to_string())).collect(),
        None => plan_kernels(g, plan).into_iter().map(|k| (k.name, k.source.into_owned())).collect(),
    };
    let origin = if emitted.is_some() { "emitted by #[fuse]" } else { "generated at run time" };
    if kernels.is_empty() {
        eprintln!("fuse: `{function}` has no generated kernels (library calls only)");
    }
    for (name, source) in kernels {
        eprintln!("fuse: kernel `{name}` of `{function}` ({origin}):\n{}", source.trim_end());
    }
}

/// FUSE_DEBUG>=3: which matmul path each matmul group took on this call's device: the call the executor
/// reported (`GroupRun::path`), else the device's backend.
pub(crate) fn print_matmul_paths(function: &str, runs: &[GroupRun], device: Option<&Device>) {
    for run in runs.iter().filter(|r| matches!(r.kind, GroupKind::Gemm | GroupKind::DualGemm)) {
        eprintln!("fuse: `{function}` k{} {}: matmul path: {}", run.index, run.kind.name(), matmul_path(run, device));
    }
}

/// The text after "matmul path: " for one run.
fn matmul_path(run: &GroupRun, device: Option<&Device>) -> String {
    let path = match (&run.path, device) {
        (Some(path), _) => path.as_str(),
        (None, Some(Device::Cuda(_))) => "cuBLAS (no call reported)",
        (None, Some(Device::Cpu)) => "the CPU backend's f32 GEMM (gemm crate; no call reported)",
        (None, None) => "no tensor argument, device unknown",
    };
    let how = if run.unfused_because.is_some() { "ran unfused; " } else { "" };
    format!("{how}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_reported_matmul_path_is_printed_as_is() {
        let run = |path: Option<&str>, unfused: bool| GroupRun {
            index: 1,
            kind: GroupKind::DualGemm,
            time: Duration::ZERO,
            unfused_because: unfused.then(|| "why".to_string()),
            path: path.map(str::to_string),
        };
        let reported = "cuBLAS cublasGemmStridedBatchedEx x1, op(A)=T op(B)=N";
        assert_eq!(matmul_path(&run(Some(reported), false), Some(&Device::Cpu)), reported);
        assert_eq!(matmul_path(&run(Some(reported), true), None), format!("ran unfused; {reported}"));
        assert!(matmul_path(&run(None, false), Some(&Device::Cpu)).starts_with("the CPU backend's f32 GEMM"));
        assert_eq!(matmul_path(&run(None, false), None), "no tensor argument, device unknown");
    }
}
