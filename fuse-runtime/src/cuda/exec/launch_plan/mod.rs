//! Launch plans: what a call of one argument signature (device, and per argument its dtype, shape, strides
//! and 16-byte alignment, or "scalar") needs, recorded on the first such call and replayed on the next
//! ones, so that a steady-state call only fills in addresses and scalars and launches: no shape
//! inference, source generation, defines, module lookup or cuBLAS mapping, and no driver allocation but
//! the returned outputs'. Intermediates (values no caller sees) live in buffers the plan owns; every use
//! of them is queued on the device's one stream, so a later call's writes are ordered after an earlier
//! call's reads and the buffers can be reused call after call.
//!
//! The executor launches its first call through the same [`run_step`], with the same kind of address
//! table, so a replay differs from the call it recorded only in where the addresses come from.
//!
//! `FUSE_DUAL_GEMM=split` (read once, `crate::env`) makes a DualGemm's two products two cuBLAS calls instead of one
//! batched call, to compare the two.

mod host_scalars;
pub(crate) use host_scalars::{compute as compute_host_scalars, program as host_scalar_program, HostScalar};

use super::launch::{checked_address, launch_kernel, KernelDims};
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::driver_error;
use crate::cuda::gemm::cublas::{launch_gemm, GemmCall};
use crate::cuda::gemm::lt::{launch_lt, LtMatmul};
use crate::cuda::gemm::wgmma::TensorMapSpec;
use crate::cuda::storage::CudaStorage;
use crate::host_profile::{self, Phase};
use crate::{Arg, Result, Tensor};
use cudarc::driver::CudaFunction;
use fuse_ir::DType;
use std::sync::Arc;

/// Launch plans kept per plan: a call with a new signature past this many evicts the oldest (and frees
/// its intermediates, in stream order).
const MAX_PLANS: usize = 8;

/// What a launch plan depends on in one argument.
#[derive(Debug, PartialEq)]
pub(crate) enum ArgSignature {
    Scalar,
    Tensor { dtype: DType, aligned: bool, shape: Vec<usize>, strides: Vec<usize> },
}

fn is_aligned(t: &Tensor) -> bool {
    let Some(storage) = t.cuda_storage() else { return false };
    storage.element_address(t.offset()).is_some_and(|a| a.is_multiple_of(16))
}

impl ArgSignature {
    fn of(arg: &Arg<'_>) -> ArgSignature {
        match *arg {
            Arg::Scalar(_) => ArgSignature::Scalar,
            Arg::Tensor(t) => ArgSignature::Tensor {
                dtype: t.dtype(),
                aligned: is_aligned(t),
                shape: t.shape().to_vec(),
                strides: t.strides().to_vec(),
            },
        }
    }

    /// `ArgSignature::of(arg) == *self`, without allocating.
    fn matches(&self, arg: &Arg<'_>) -> bool {
        match (self, *arg) {
            (ArgSignature::Scalar, Arg::Scalar(_)) => true,
            (ArgSignature::Tensor { dtype, aligned, shape, strides }, Arg::Tensor(t)) => {
                *dtype == t.dtype() && shape == t.shape() && strides == t.strides() && *aligned == is_aligned(t)
            }
            _ => false,
        }
    }
}

/// Word `word` of a kernel's `FuseArgs` takes this call's entry `node` of the address table (a device
/// address, or a scalar argument's f64 bits).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patch {
    pub word: usize,
    pub node: usize,
}

/// Words `word..word + 16` of a kernel's parameter are the tensor map `map` of this call's entry `node`
/// (the wgmma template's operands): encoded again when the address changes.
#[derive(Clone, Debug)]
pub(crate) struct MapPatch {
    pub word: usize,
    pub node: usize,
    pub map: TensorMapSpec,
    /// The address the words hold now.
    pub encoded_at: u64,
}

/// One thing a call queues. Node indices name entries of the address table; a `.t()` view has its base
/// value's address, so steps always name base values.
pub(crate) enum Step {
    Kernel {
        name: String,
        function: CudaFunction,
        dims: KernelDims,
        words: Vec<u64>,
        patches: Vec<Patch>,
        maps: Vec<MapPatch>,
    },
    /// `group` is the plan group, `dual` whether it is a DualGemm (whose two products may pair up when
    /// they run on cuBLAS); `lt`: through cuBLASLt with that algorithm of the form.
    Gemm {
        call: GemmCall,
        lt: Option<(Arc<LtMatmul>, usize)>,
        first: usize,
        second: usize,
        product: usize,
        group: usize,
        dual: bool,
    },
    /// Two products of one left operand (`second`) in one buffer, `paired_product_stride` apart: one
    /// batched call when the two weights are whole elements apart, two calls otherwise.
    DualGemm { call: GemmCall, first: [usize; 2], second: usize, products: [usize; 2], buffer: CudaStorage },
}

/// What the first call of a signature recorded while it ran (see `exec.rs`).
#[derive(Default)]
pub(crate) struct Recording {
    pub steps: Vec<Step>,
    /// Every value the call allocated: node, dtype, shape.
    pub computed: Vec<(usize, DType, Vec<usize>)>,
    /// Something this call did is not a replayable step (an empty launch or product): do not keep it.
    pub unreplayable: bool,
    /// Buffers the recorded steps use at fixed addresses (split-K workspaces and their counters, which
    /// every launch leaves zeroed): the launch plan keeps them, never poisons or patches them.
    pub scratch: Vec<CudaStorage>,
    /// Arguments a step reads before its grid wait because only the host has written them
    /// (`Executor::unwritten_before`): the plan is replayed only while that holds.
    pub host_written: Vec<usize>,
    /// The host scalars the steps read, recomputed from the scalar arguments on each replay.
    pub host_scalars: Vec<HostScalar>,
}

pub(crate) struct LaunchPlan {
    ordinal: usize,
    signature: Vec<ArgSignature>,
    /// See `Recording::host_written`.
    host_written: Vec<usize>,
    /// See `Recording::host_scalars`.
    host_scalars: Vec<HostScalar>,
    /// (input node, argument index).
    inputs: Vec<(usize, usize)>,
    /// Allocated fresh on every call (the caller keeps them): node, dtype, shape.
    fresh: Vec<(usize, DType, Vec<usize>)>,
    /// Graph output k is `fresh[results[k]]`.
    results: Vec<usize>,
    /// `results` is `0..fresh.len()` (the usual case): a replay returns its fresh tensors as they are, with no
    /// second vector and no clone of each.
    results_in_order: bool,
    /// The intermediates' buffers (their addresses are fixed in `addresses`).
    intermediates: Vec<CudaStorage>,
    /// See `Recording::scratch`.
    _scratch: Vec<CudaStorage>,
    steps: Vec<Step>,
    addresses: Vec<u64>,
}

/// The launch plans of one plan, newest last.
#[derive(Default)]
pub(crate) struct LaunchPlans {
    plans: Vec<LaunchPlan>,
}

impl LaunchPlans {
    /// The launch plan for these arguments on `device`, if a call with the same signature made one.
    pub(crate) fn find(&mut self, device: &CudaDevice, args: &[Arg<'_>]) -> Option<&mut LaunchPlan> {
        self.plans.iter_mut().find(|p| {
            p.ordinal == device.ordinal()
                && p.signature.len() == args.len()
                && p.signature.iter().zip(args).all(|(s, a)| s.matches(a))
                && p.host_written.iter().all(|&k| host_written(args.get(k).and_then(Arg::tensor)))
        })
    }

    pub(crate) fn insert(&mut self, plan: LaunchPlan) {
        // Two threads may record the same signature at once: keep the first.
        if self.plans.iter().any(|p| p.ordinal == plan.ordinal && p.signature == plan.signature) {
            return;
        }
        if self.plans.len() >= MAX_PLANS {
            self.plans.remove(0);
        }
        self.plans.push(plan);
    }
}

/// How a DualGemm's two products run on the `cublas` path, as calls `a` and `b` with their weights at
/// `weights`: the one batched call and whether the second weight is its batch 0 (lower in memory), or why
/// it makes two calls. The executor's first call (`exec/gemm_paths.rs`) and FUSE_DEBUG>=3 ask this; a replay
/// makes the same tests (`LaunchPlan::build`, `run_step`).
pub(crate) fn dual_gemm_pairing(
    a: &GemmCall,
    b: &GemmCall,
    same_left: bool,
    products_escape: bool,
    weights: [u64; 2],
) -> std::result::Result<(bool, GemmCall), &'static str> {
    dual_gemm_pairing_with(crate::env::batch_dual_gemms(), a, b, same_left, products_escape, weights)
}

/// [`dual_gemm_pairing`] with `FUSE_DUAL_GEMM` given (tests).
pub(crate) fn dual_gemm_pairing_with(
    batching: bool,
    a: &GemmCall,
    b: &GemmCall,
    same_left: bool,
    products_escape: bool,
    weights: [u64; 2],
) -> std::result::Result<(bool, GemmCall), &'static str> {
    if !same_left {
        return Err("the products have different left operands");
    }
    if !b.pairs_with(a) {
        return Err("the two calls differ (shapes, strides or batching)");
    }
    if products_escape {
        return Err("a product is an output of the function");
    }
    if !batching {
        return Err("FUSE_DUAL_GEMM=split");
    }
    a.batched_pair(weights[0], weights[1]).ok_or(if weights[0] == weights[1] {
        "the same weight twice"
    } else {
        "the weights are not a whole number of elements apart"
    })
}

/// The signature of a call's arguments (what `LaunchPlans::find` compares).
pub(crate) fn signature(args: &[Arg<'_>]) -> Vec<ArgSignature> {
    args.iter().map(ArgSignature::of).collect()
}

impl LaunchPlan {
    /// A launch plan from what a call recorded: `inputs` maps input nodes to arguments, `outputs` are the
    /// graph's output nodes. `None` when the call cannot be replayed (an output that is an argument, a
    /// literal or a view, an empty launch) or the intermediates cannot be allocated; the call then keeps
    /// taking the general path.
    pub(crate) fn build(
        device: &CudaDevice,
        signature: Vec<ArgSignature>,
        inputs: Vec<(usize, usize)>,
        outputs: &[usize],
        node_count: usize,
        recording: Recording,
    ) -> Option<LaunchPlan> {
        if recording.unreplayable {
            return None;
        }
        let Recording { steps, computed, scratch, host_written, host_scalars, .. } = recording;
        let escapes = |node: usize| outputs.contains(&node);
        let fresh: Vec<_> = computed.iter().filter(|(node, ..)| escapes(*node)).cloned().collect();
        let results =
            outputs.iter().map(|o| fresh.iter().position(|(node, ..)| node == o)).collect::<Option<Vec<usize>>>()?;
        let dtype_of = |node: usize| computed.iter().find(|(n, ..)| *n == node).map(|(_, d, _)| *d);
        let mut addresses = vec![0u64; node_count];
        let mut paired = Vec::new();
        let mut merged = Vec::with_capacity(steps.len());
        let mut steps = steps.into_iter().peekable();
        while let Some(step) = steps.next() {
            let Step::Gemm { call, lt: None, first, second, product, group, dual: true } = step else {
                merged.push(step);
                continue;
            };
            let pairs = |next: &Step| match next {
                Step::Gemm { call: c, lt: None, second: s, product: p, group: g, .. } => {
                    *g == group && *s == second && c.pairs_with(&call) && !escapes(product) && !escapes(*p)
                }
                _ => false,
            };
            match steps.next_if(pairs) {
                Some(Step::Gemm { first: first_b, product: product_b, .. }) => {
                    let dtype = dtype_of(product)?;
                    let buffer = CudaStorage::alloc(device, dtype, 2 * call.paired_product_stride()).ok()?;
                    paired.extend([product, product_b]);
                    merged.push(Step::DualGemm {
                        call,
                        first: [first, first_b],
                        second,
                        products: [product, product_b],
                        buffer,
                    });
                }
                _ => merged.push(Step::Gemm { call, lt: None, first, second, product, group, dual: true }),
            }
        }
        let mut intermediates = Vec::new();
        for (node, dtype, shape) in &computed {
            if escapes(*node) || paired.contains(node) {
                continue;
            }
            let buffer = CudaStorage::alloc(device, *dtype, shape.iter().product()).ok()?;
            addresses[*node] = buffer.base_address();
            intermediates.push(buffer);
        }
        let results_in_order = results.len() == fresh.len() && results.iter().enumerate().all(|(k, &i)| k == i);
        Some(LaunchPlan {
            ordinal: device.ordinal(),
            signature,
            host_written,
            host_scalars,
            inputs,
            fresh,
            results,
            results_in_order,
            intermediates,
            _scratch: scratch,
            steps: merged,
            addresses,
        })
    }

    /// Queues the recorded work for these arguments (of this plan's signature) and returns the outputs.
    pub(crate) fn replay(&mut self, function: &str, device: &CudaDevice, args: &[Arg<'_>]) -> Result<Vec<Tensor>> {
        if device.poisons_allocations() {
            self.poison_intermediates(device)?;
        }
        let addresses = &mut self.addresses;
        for &(node, k) in &self.inputs {
            addresses[node] = match args.get(k) {
                Some(value) => table_entry(function, device, value)?,
                None => return Err(crate::Error::internal(function, "a launch plan names a missing argument")),
            };
        }
        compute_host_scalars(&self.host_scalars, addresses);
        host_profile::lap(Phase::Inputs);
        let mut fresh = Vec::with_capacity(self.fresh.len());
        for (node, dtype, shape) in &self.fresh {
            let storage = CudaStorage::alloc(device, *dtype, shape.iter().product())?;
            addresses[*node] = storage.base_address();
            fresh.push(Tensor::from_cuda(storage, shape.clone()));
        }
        host_profile::lap(Phase::Outputs);
        for (k, step) in self.steps.iter_mut().enumerate() {
            run_step(device, step, addresses)?;
            host_profile::lap(Phase::Step(k));
        }
        #[cfg(test)]
        tests::REPLAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.results_in_order {
            return Ok(fresh);
        }
        Ok(self.results.iter().map(|&i| fresh[i].clone()).collect())
    }
}

impl LaunchPlan {
    /// Refills every reused buffer with NaN bytes, as a fresh allocation would be when poisoning is on, so
    /// that a kernel failing to write part of an intermediate still shows on a replayed call.
    fn poison_intermediates(&self, device: &CudaDevice) -> Result<()> {
        let pairs = self.steps.iter().filter_map(|step| match step {
            Step::DualGemm { buffer, .. } => Some(buffer),
            _ => None,
        });
        for buffer in self.intermediates.iter().chain(pairs) {
            let bytes = buffer.dtype().storage_bytes(buffer.len()).unwrap_or(0);
            // SAFETY: the address and byte count are this live allocation's; the memset is queued on the
            // stream every use of it is ordered on.
            unsafe {
                cudarc::driver::result::memset_d8_async(buffer.base_address(), 0xFF, bytes, device.stream().cu_stream())
            }
            .map_err(|e| driver_error("memset", e))?;
        }
        Ok(())
    }
}

/// Whether `tensor` is one whose memory only copies from the host have written
/// (`CudaStorage::host_written`).
pub(crate) fn host_written(tensor: Option<&Tensor>) -> bool {
    tensor.and_then(Tensor::cuda_storage).is_some_and(CudaStorage::host_written)
}

/// An argument's entry in the address table: a tensor's checked device address, a scalar's f64 bits.
pub(crate) fn table_entry(function: &str, device: &CudaDevice, arg: &Arg<'_>) -> Result<u64> {
    match *arg {
        Arg::Tensor(t) => checked_address(function, device, t),
        Arg::Scalar(v) => Ok(v.to_bits()),
    }
}

/// Queues one step with this call's addresses: patches its words from the address table (a first call's
/// words already hold them), then launches. The executor's first call and a replay both launch this way.
pub(crate) fn run_step(device: &CudaDevice, step: &mut Step, addresses: &mut [u64]) -> Result<()> {
    let result = queue_step(device, step, addresses);
    // While capturing, a call the driver cannot record invalidates the capture silently: name it here.
    if device.is_capturing() {
        let step: &Step = step;
        device.check_capture(&|| match step {
            Step::Kernel { name, .. } => format!("kernel {name}"),
            Step::Gemm { lt: Some(_), .. } => "a cuBLASLt matmul".to_string(),
            Step::Gemm { .. } | Step::DualGemm { .. } => "a cuBLAS matmul".to_string(),
        })?;
    }
    result
}

fn queue_step(device: &CudaDevice, step: &mut Step, addresses: &mut [u64]) -> Result<()> {
    match step {
        Step::Kernel { name, function, dims, words, patches, maps } => {
            for p in patches.iter() {
                words[p.word] = addresses[p.node];
            }
            for m in maps.iter_mut() {
                // The encoding is a host call: skip it while the operand stays where it was.
                if addresses[m.node] != m.encoded_at {
                    let encoded = m.map.encode(addresses[m.node]).map_err(|e| crate::Error::internal(name, e))?;
                    words[m.word..m.word + encoded.len()].copy_from_slice(&encoded);
                    m.encoded_at = addresses[m.node];
                }
            }
            launch_kernel(device, name, function, *dims, words)
        }
        Step::Gemm { call, lt, first, second, product, .. } => {
            let (first, second, product) = (addresses[*first], addresses[*second], addresses[*product]);
            match lt {
                Some((form, algo)) => launch_lt(device, form, *algo, first, second, product),
                None => launch_gemm(device, call, first, second, product),
            }
        }
        Step::DualGemm { call, first, second, products, buffer } => {
            let base = buffer.base_address();
            let half = (call.paired_product_stride() * buffer.dtype().size_bytes()) as u64;
            let (weight_a, weight_b, a) = (addresses[first[0]], addresses[first[1]], addresses[*second]);
            match call.batched_pair(weight_a, weight_b).filter(|_| crate::env::batch_dual_gemms()) {
                Some((swapped, pair)) => {
                    // Batch 0 is the weight lower in memory; its product goes first in the buffer.
                    let (low, place_a, place_b) =
                        if swapped { (weight_b, base + half, base) } else { (weight_a, base, base + half) };
                    addresses[products[0]] = place_a;
                    addresses[products[1]] = place_b;
                    launch_gemm(device, &pair, low, a, base)
                }
                None => {
                    addresses[products[0]] = base;
                    addresses[products[1]] = base + half;
                    launch_gemm(device, call, weight_a, a, base)?;
                    launch_gemm(device, call, weight_b, a, base + half)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
