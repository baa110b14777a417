//! The GPU plan executor, the twin of `cpu/exec.rs`: infers this call's shapes and dtypes, then runs the
//! plan group by group over a table of values (arguments, group outputs, `.t()` views of those). Each group
//! is its generated kernels (`fuse_ir::codegen::group_kernels`) launched with packed `FuseArgs`, and for
//! Gemm/DualGemm groups the matmuls on cuBLAS between the prologue and the epilogue kernels. Everything is
//! queued on the device's one stream; nothing waits for the GPU until a result is read.
//!
//! With a kernel cache (a `FusedFn`'s), the first call of each argument signature also records what it
//! queued as a launch plan (`launch_plan/`), and later calls of that signature replay it instead. There is
//! one launch path: every launch, first call or replay, is a `launch_plan::Step` run by
//! `launch_plan::run_step` over a per-node address table; the first call builds each step (`queue`) and
//! keeps it only when recording.
//!
//! The executor is one type whose methods are grouped by concern in this folder:
//! - here: the call, the value table, and which of the others runs each group;
//! - `generated`: the kernels the code generator wrote (pointwise and row groups, prologues, epilogues);
//! - `matmul`: one matmul on cuBLAS;
//! - `gemm_paths`: how a Gemm/DualGemm group runs on the path chosen for it (`gemm_path::GemmPath`);
//! - `tuning`: which path that is (forced, from the results table, timed, or a fixed rule);
//! - `model`, `attention`: the hand-written kernels of the model ops, `cat` and `slice_set`;
//! - `rope_append`: a rope_append_attention group, in one launch or member by member.
//!
//! Beside it: `kernels` (a plan's generated kernels, kept per fused function), `fuse_args` (the kernel ABI:
//! `FuseArgs` packing and launch geometry), `model_args` (the model kernels' argument words), `launch` (one
//! kernel launch), `launch_plan` (a call recorded and replayed), `describe` (FUSE_DEBUG>=3's account of the
//! matmuls).

mod attention;
mod describe;
mod dual_pair;
mod fuse_args;
mod gemm_path;
mod gemm_paths;
mod generated;
pub(crate) mod kernels;
pub(crate) mod launch;
mod launch_plan;
mod matmul;
mod model;
mod model_args;
mod products;
mod rope_append;
mod sort;
mod task_tuning;
mod template;
mod tune_timing;
mod tuning;

use crate::call::{infer, input_values, values, GroupRun, Inferred, Value};
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::{driver_error, lock};
use crate::cuda::storage::CudaStorage;
use crate::host_profile::{self, Phase};
use crate::views::{host_scalar, resolve_view};
use crate::{Arg, Error, Result, Tensor};
use describe::DescribedGemm;
use fuse_ir::codegen::Role;
use fuse_ir::view::ViewOp;
use fuse_ir::{DType, Graph, GroupKind, NodeId, Op, Plan};
use gemm_path::GemmPath;
use kernels::{KernelCache, PlanKernels, PreparedKernel};
use launch::checked_address;
use launch_plan::{host_written, run_step, signature, table_entry, LaunchPlan, Recording, Step};
use std::time::Instant;

struct Executor<'a> {
    function: &'a str,
    graph: &'a Graph,
    plan: &'a Plan,
    device: &'a CudaDevice,
    inferred: Inferred,
    values: Vec<Option<Value>>,
    /// Per node, the address table a launch plan keeps: the device address of each base value (a `.t()`
    /// view has its base's), a scalar argument's f64 bits. Every step is launched through it (`queue`).
    addresses: Vec<u64>,
    /// What this call queued, when it is to become a launch plan.
    recording: Option<Recording>,
    /// Whether to describe the cuBLAS calls (a timed call, FUSE_DEBUG>=2; never on the replayed path).
    describe: bool,
    /// The current group's matmuls so far, when describing.
    gemms: Vec<DescribedGemm>,
    /// Matmuls stay on cuBLAS (the unfused baseline, eager ops): no tuning, no templates.
    library_only: bool,
    /// How the current Gemm/DualGemm group runs, and for FUSE_DEBUG>=3 how that was decided.
    path: GemmPath,
    path_note: Option<String>,
    /// The current group's prologue kernel is left to `run_gemm`: the skinny paths run the prologue in
    /// their kernel, the others launch the prologue kernel first (so the tuner times it with them).
    prologue_deferred: bool,
    /// Templates launch as a one-launch step's tasks would run: in their task forms, one block a
    /// multiprocessor (`task_tuning.rs`, while timing them so).
    as_tasks: bool,
    /// Copies (cat parts, slice_set rows) queued to be launched together, and the nodes they write
    /// (`model.rs`: `queue_copy`, `flush_copies`).
    pending_copies: Vec<model::PendingCopy>,
    pending_writers: Vec<NodeId>,
    /// How the current group ran, where that is not a matmul path: a rope_append_attention group's one
    /// launch or members (`rope_append.rs`; when describing).
    group_path: Option<String>,
    /// This call has queued a step: the launch before the next one in the stream is this call's, which
    /// writes only its own values and arguments that nothing else in the graph reads (`Graph::verify_writes`).
    queued: bool,
}

/// Runs `plan` on `args` (one per graph input, every tensor on `device`; borrowed: a replay clones none,
/// the general path clones them into its value table). Returns the graph's outputs and,
/// when `timed`, each group's time (the stream is synchronised after each group to measure it). The plan's
/// kernels come from `cache` (filled on first use) or, without one, are generated for this call.
/// `library_only`: every matmul on cuBLAS (see `tuning.rs` for the other paths).
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: &[Arg<'_>],
    device: &CudaDevice,
    timed: bool,
    library_only: bool,
    cache: Option<&KernelCache>,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    // Another thread's capture would record this call: wait for it to end.
    let _entered = device.enter();
    // Timing a group waits for the GPU, which a capture cannot: captured calls are not timed.
    let timed = timed && !device.is_capturing();
    // Raw driver calls below (launches, memsets) need the context current on this thread.
    device.context().bind_to_thread().map_err(|e| driver_error("bind the context", e))?;
    let generated;
    let kernels = match cache {
        Some(cell) => cell.get_or_init(|| PlanKernels::generate(g, plan)),
        None => {
            generated = PlanKernels::generate(g, plan);
            &generated
        }
    };
    if kernels.groups.len() != plan.groups.len() {
        return Err(Error::internal(function, "the cached kernels belong to another plan"));
    }
    // An argument this call writes in place is no longer only host-written (before anything is launched).
    for id in g.ids().filter(|&id| g.op(id).writes_in_place()) {
        if let Some(Op::Input(k)) = g.written_argument(g.node(id).args[0]).map(|(a, _)| g.op(a)) {
            if let Some(storage) = args.get(k as usize).and_then(Arg::tensor).and_then(Tensor::cuda_storage) {
                storage.mark_kernel_written();
            }
        }
    }
    // Per-group timing needs the general path (it synchronises after each group); so does a path forced
    // for this thread (it must not be recorded for other calls).
    // A graph being captured takes the general path too: a launch plan's scratch memory is shared by every
    // call of its signature and may be freed when the plan is dropped, while a graph keeps the addresses it
    // recorded (its own memory comes from its arena).
    let replayable = cache.is_some() && !timed && crate::tune::forced_choice().is_none() && !device.is_capturing();
    host_profile::lap(Phase::Enter);
    if replayable {
        let mut plans = lock(&kernels.launch_plans);
        let found = plans.find(device, args);
        host_profile::lap(Phase::Find);
        if let Some(launch_plan) = found {
            return Ok((launch_plan.replay(function, device, args)?, Vec::new()));
        }
    }
    let args_owned = values(args);
    let inferred = infer(function, g, &args_owned)?;
    // Empty values make empty launches and products, which the general path skips call by call. A view op's
    // layout may depend on a scalar argument (narrow's start), which a launch plan's signature does not
    // hold: such graphs take the general path on every call.
    // Model ops are not recorded either: their steps are queued without patches (`model.rs`), so a replay
    // could not move their addresses to the new call's tensors.
    let has_views = g.nodes.iter().any(|n| matches!(n.op, Op::View(_) | Op::Model(_)));
    let record = replayable && !has_views && !inferred.shapes.iter().any(|s| s.contains(&0));
    let recorded_signature = record.then(|| signature(args));
    let inputs: Vec<(usize, usize)> = g
        .ids()
        .filter_map(|id| match g.op(id) {
            Op::Input(k) => Some((id.index(), k as usize)),
            _ => None,
        })
        .collect();
    let mut addresses = vec![0u64; g.nodes.len()];
    for &(node, k) in &inputs {
        if let Some(value) = args.get(k) {
            addresses[node] = table_entry(function, device, value)?;
        }
    }
    // Host scalars kernels read (`(d as f32).sqrt()`): their f64 bits in the table, as a scalar argument's.
    let host = fuse_ir::plan::host_scalars(g);
    let scalars: Vec<Option<f64>> = args.iter().map(Arg::scalar).collect();
    for id in g.ids().filter(|&id| host[id.index()] && g.op(id).is_pointwise()) {
        if let Some(v) = fuse_ir::infer::size_of(g, id, &inferred.shapes, &scalars) {
            addresses[id.index()] = v.to_bits();
        }
    }
    let values = input_values(g, args_owned);
    let recording =
        record.then(|| Recording { host_scalars: launch_plan::host_scalar_program(g, &host), ..Default::default() });
    let mut ex = Executor {
        function,
        graph: g,
        plan,
        device,
        inferred,
        values,
        addresses,
        recording,
        describe: timed,
        gemms: Vec::new(),
        library_only,
        path: GemmPath::Cublas,
        path_note: None,
        prologue_deferred: false,
        as_tasks: false,
        pending_copies: Vec::new(),
        pending_writers: Vec::new(),
        group_path: None,
        queued: false,
    };
    let mut runs = Vec::new();
    for (index, group) in plan.groups.iter().enumerate() {
        let start = Instant::now();
        let unfused_because = ex.run_group(index, &kernels.groups[index])?;
        if timed || unfused_because.is_some() {
            if timed {
                ex.flush_copies()?;
                device.synchronize()?;
            }
            let time = start.elapsed();
            let path = ex.group_path.take().or_else(|| ex.matmul_path(group.kind));
            runs.push(GroupRun { index, kind: group.kind, time, unfused_because, path });
        }
    }
    ex.flush_copies()?;
    let outputs = g.outputs.iter().map(|&o| ex.output(o)).collect::<Result<Vec<_>>>()?;
    if let (Some(recording), Some(signature)) = (ex.recording.take(), recorded_signature) {
        let graph_outputs: Vec<usize> = g.outputs.iter().map(|o| o.index()).collect();
        let built = LaunchPlan::build(device, signature, inputs, &graph_outputs, g.nodes.len(), recording);
        if let Some(launch_plan) = built {
            lock(&kernels.launch_plans).insert(launch_plan);
        }
    }
    Ok((outputs, runs))
}

/// The value a `.t()` view reads (launch plans address views by their base value). Other views have an
/// address of their own (a narrow moves it), set by `place_views` before a group reads them.
fn base_of(g: &Graph, mut id: NodeId) -> NodeId {
    while let Op::Transpose = g.op(id) {
        id = g.node(id).args[0];
    }
    id
}

impl Executor<'_> {
    fn shape(&self, id: NodeId) -> &[usize] {
        &self.inferred.shapes[id.index()]
    }

    /// A node's dtype; values made of scalars only have none and are computed as f32.
    fn dtype(&self, id: NodeId) -> DType {
        self.inferred.dtypes[id.index()].unwrap_or(DType::F32)
    }

    fn internal(&self, message: impl Into<String>) -> Error {
        Error::internal(self.function, message)
    }

    /// The value of a node some kernel reads (never one computed inside that kernel).
    fn resolve(&self, id: NodeId) -> Result<Value> {
        match self.graph.op(id) {
            Op::Const(c) => Ok(Value::Scalar(c)),
            Op::Transpose => match self.resolve(self.graph.node(id).args[0])? {
                Value::Tensor(t) => Ok(Value::Tensor(t.t()?)),
                Value::Scalar(_) => Err(self.internal("a transposed scalar")),
            },
            Op::Unary(_) | Op::Binary(_) | Op::Where if self.values[id.index()].is_none() => {
                Ok(Value::Scalar(host_scalar(self.function, self.graph, id, &|a| self.resolve(a))?))
            }
            Op::View(v) if !v.is_copy() => {
                // Resolved once per call (`place_views` keeps it): a reshape its strides cannot view reads a
                // dense copy, as on the CPU (the decoder's heads merged back after attention), and that copy
                // must live until the kernels that read it have run, at the address the group was given.
                if let Some(value) = &self.values[id.index()] {
                    return Ok(value.clone());
                }
                let copy = |t: &Tensor| t.contiguous();
                resolve_view(self.function, self.graph, id, &self.inferred.shapes, &|a| self.resolve(a), &copy)
            }
            _ => self.values[id.index()]
                .clone()
                .ok_or_else(|| self.internal(format!("%{} is read before it is computed", id.0))),
        }
    }

    /// The device address of a view's first element (checked: see `checked_address`).
    fn address(&self, t: &Tensor) -> Result<u64> {
        checked_address(self.function, self.device, t)
    }

    /// A fresh dense tensor for node `id`, its address in the table.
    fn allocate(&mut self, id: NodeId) -> Result<Tensor> {
        let (shape, dtype) = (self.shape(id).to_vec(), self.dtype(id));
        let storage = CudaStorage::alloc(self.device, dtype, shape.iter().product())?;
        self.addresses[id.index()] = storage.base_address();
        self.record_computed(id, dtype, &shape);
        Ok(Tensor::from_cuda(storage, shape))
    }

    /// Launches `step` through the address table, as a replay would (`launch_plan::run_step`), and keeps
    /// it when this call is being recorded.
    fn queue(&mut self, mut step: Step) -> Result<()> {
        run_step(self.device, &mut step, &mut self.addresses)?;
        self.queued = true;
        self.record(step);
        Ok(())
    }

    /// Whether the kernel before the next launch cannot have written the values `ids` (so that a kernel may
    /// read them before it waits for that one, programmatic dependent launch): each is an argument of the
    /// function (a `.t()` of one), which no kernel of this graph computes and none but a slice_set of it writes
    /// (`Graph::verify_writes`: an argument written in place has no other reader), and either this call has
    /// queued a launch already, so that kernel is this call's (each kernel waits for the one before it before
    /// it lets the next start, so the kernels before that one have finished), or no kernel ever wrote it.
    /// An argument that only copies from the host have written (`CudaStorage::host_written`) qualifies
    /// whatever the kernel before is; a launch plan that relied on it is replayed only while it still holds.
    fn unwritten_before(&mut self, ids: impl IntoIterator<Item = NodeId>) -> bool {
        let mut relied = Vec::new();
        for id in ids {
            let base = base_of(self.graph, id);
            let Op::Input(k) = self.graph.op(base) else { return false };
            if self.queued {
                continue;
            }
            if !host_written(self.values[base.index()].as_ref().and_then(Value::tensor)) {
                return false;
            }
            relied.push(k as usize);
        }
        if let Some(recording) = &mut self.recording {
            recording.host_written.extend(relied);
        }
        true
    }

    /// Keeps `step` when this call is being recorded.
    fn record(&mut self, step: Step) {
        if let Some(recording) = &mut self.recording {
            recording.steps.push(step);
        }
    }

    /// Notes, when recording, that this call allocated node `id` (a launch plan gives it a buffer).
    fn record_computed(&mut self, id: NodeId, dtype: DType, shape: &[usize]) {
        if let Some(recording) = &mut self.recording {
            recording.computed.push((id.index(), dtype, shape.to_vec()));
        }
    }

    /// Notes, when recording, that this call did something a launch plan cannot replay.
    fn unreplayable(&mut self) {
        if let Some(recording) = &mut self.recording {
            recording.unreplayable = true;
        }
    }

    /// Puts the address of each view that `group` reads (other than `.t()`, which shares its base's) in the
    /// address table, so that launches read it where it starts.
    fn place_views(&mut self, group: &fuse_ir::Group) -> Result<()> {
        let mut stack: Vec<NodeId> = group.inputs.clone();
        while let Some(id) = stack.pop() {
            match self.graph.op(id) {
                Op::Transpose => stack.push(self.graph.node(id).args[0]),
                Op::View(v) if !v.is_copy() && !matches!(v, ViewOp::Dim { .. }) => {
                    if let Value::Tensor(t) = self.resolve(id)? {
                        self.addresses[id.index()] = self.address(&t)?;
                        self.values[id.index()] = Some(Value::Tensor(t));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs group `index` by what it is: a decode attention block (`rope_append.rs`), a model op, cat or
    /// slice_set alone (their hand-written kernels, `model.rs`), else its generated kernels and matmuls.
    /// Returns why it ran one op at a time, if it did.
    fn run_group(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<Option<String>> {
        let plan = self.plan;
        let group = &plan.groups[index];
        if group.kind == GroupKind::RopeAppendAttention {
            return self.run_rope_append_attention(group);
        }
        let is_cat = |n: &NodeId| matches!(self.graph.op(*n), Op::View(ViewOp::Cat { .. }));
        let is_write = |n: &NodeId| self.graph.op(*n).writes_in_place();
        if group.kind == GroupKind::Model || group.nodes.iter().any(|n| is_cat(n) || is_write(n)) {
            let &[node] = group.nodes.as_slice() else {
                return Err(self.internal(format!("group {index}: a model op, cat or slice_set beside other nodes")));
            };
            self.run_hand_written(node)?;
            return Ok(None);
        }
        self.flush_copies()?;
        self.place_views(group)?;
        if let Some(reason) = self.does_not_fit(group) {
            self.run_node_by_node(group)?;
            return Ok(Some(reason));
        }
        let is_gemm = matches!(group.kind, GroupKind::Gemm | GroupKind::DualGemm | GroupKind::MultiGemm);
        // Where the Skinny kernel can run the prologue itself, the prologue kernel is deferred: it runs here,
        // unrecorded, only when the path is to be timed (timing reads the left operand), and `run_gemm` runs
        // it again, recorded, on the paths that do not stream it. A path known without timing (the results
        // table, a forced path, the fixed rule while capturing) launches no prologue kernel of its own.
        self.prologue_deferred =
            is_gemm && matches!(self.template_operands(index, specs, &self.skinny_probe(index)), Ok((_, Some(_))));
        // Without timing to do, the path is known before the prologue runs, and the kernel that streams the
        // prologue needs no separate prologue kernel at all.
        let decided = if self.prologue_deferred { self.decided_path(index, specs)? } else { None };
        let unrecorded = self.prologue_deferred && decided.is_none();
        let recording = if unrecorded { self.recording.take() } else { None };
        for spec in
            specs.iter().filter(|k| k.spec.role == Role::Whole || (k.spec.role == Role::Prologue && decided.is_none()))
        {
            self.run_kernel(spec)?;
        }
        if unrecorded {
            self.recording = recording;
        }
        if is_gemm {
            let path = match decided {
                Some(path) => path,
                None => self.choose_path(index, specs)?,
            };
            self.run_gemm(index, specs, &path)?;
        }
        self.prologue_deferred = false;
        if let Some(missing) = group.outputs.iter().find(|o| self.values[o.index()].is_none()) {
            return Err(self.internal(format!(
                "group {index} ({}): no kernel wrote its output %{}",
                group.kind.name(),
                missing.0
            )));
        }
        Ok(None)
    }

    /// A returned value as a tensor; scalars and literals become 0-d f32 tensors on this GPU.
    fn output(&self, id: NodeId) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(v) => Tensor::from_vec(vec![v as f32], &[], &crate::Device::Cuda(self.device.clone())),
        }
    }
}
