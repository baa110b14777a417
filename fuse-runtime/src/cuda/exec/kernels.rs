//! The generated kernels of a plan, made once per fused function and plan rather than on every call: the
//! sources do not depend on shapes or dtypes (those are `-D` defines), so a `FusedFn` keeps them, and
//! beside them the launch plans of the argument signatures seen so far (`launch_plan.rs`).

use super::launch_plan::LaunchPlans;
use fuse_ir::codegen::{group_kernels, KernelSpec};
use fuse_ir::{Graph, Plan};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// A kernel and a fingerprint of its source, so the module cache need not hash the text on each launch.
pub(crate) struct PreparedKernel {
    pub spec: KernelSpec,
    pub source_hash: u64,
}

/// Per group of a plan, its kernels in launch order.
pub(crate) struct PlanKernels {
    pub groups: Vec<Vec<PreparedKernel>>,
    /// Everything a call of a known signature needs, so that it only fills in addresses and launches.
    pub launch_plans: Mutex<LaunchPlans>,
}

/// Where a caller keeps a plan's kernels between calls (`None`: make them for this call only).
pub type KernelCache = OnceLock<PlanKernels>;

/// A 64-bit fingerprint of a source (the module cache still compares the full text on a hit).
pub(crate) fn fingerprint(source: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut h);
    h.finish()
}

impl PlanKernels {
    /// The kernels of a plan made at run time (eager ops, unfused plans, plans built in code).
    pub(crate) fn generate(g: &Graph, plan: &Plan) -> PlanKernels {
        PlanKernels::from_specs((0..plan.groups.len()).map(|i| group_kernels(g, plan, i)).collect())
    }

    /// Kernels given per group, in launch order: a `#[fuse]` function's emitted ones (`FusedFn::plan_kernel_specs`).
    pub(crate) fn from_specs(groups: Vec<Vec<KernelSpec>>) -> PlanKernels {
        let prepare = |spec: KernelSpec| PreparedKernel { source_hash: fingerprint(&spec.source), spec };
        let groups = groups.into_iter().map(|specs| specs.into_iter().map(prepare).collect()).collect();
        PlanKernels { groups, launch_plans: Mutex::new(LaunchPlans::default()) }
    }
}
