//! The generated kernels of a plan, made once per fused function and plan rather than on every call: the
//! sources do not depend on shapes or dtypes (those are `-D` defines), so a `FusedFn` keeps them, and
//! beside them the launch plans of the argument signatures seen so far (`launch_plan.rs`).

use super::launch_plan::LaunchPlans;
use crate::cuda::compile::cache::CacheKey;
use fuse_ir::codegen::{group_kernels, KernelSpec};
use fuse_ir::{Graph, Plan};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// A kernel and a fingerprint of its source, so the module cache need not hash the text on each launch.
pub(crate) struct PreparedKernel {
    pub spec: KernelSpec,
    pub source_hash: u64,
    /// The source's stable 128-bit key (what the autotuner's results are filed under), made on first need:
    /// hashing a template's text costs far more than a launch, so it is done once, not per call.
    source_key: OnceLock<u128>,
}

impl PreparedKernel {
    pub(crate) fn new(spec: KernelSpec) -> PreparedKernel {
        PreparedKernel { source_hash: fingerprint(&spec.source), spec, source_key: OnceLock::new() }
    }

    pub(crate) fn source_key(&self) -> u128 {
        *self.source_key.get_or_init(|| CacheKey::of(&[self.spec.source.as_bytes()]).0)
    }
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
        let groups = groups.into_iter().map(|specs| specs.into_iter().map(PreparedKernel::new).collect()).collect();
        PlanKernels { groups, launch_plans: Mutex::new(LaunchPlans::default()) }
    }
}
