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
//! - here: the call, the value table, plain kernels and cuBLAS matmuls;
//! - `gemm_paths`: how a Gemm/DualGemm group runs on the path chosen for it (`gemm_path::GemmPath`);
//! - `tuning`: which path that is (forced, from the results table, timed, or a fixed rule).
//!
//! Beside it: `kernels` (a plan's generated kernels, kept per fused function), `fuse_args` (the kernel ABI:
//! `FuseArgs` packing and launch geometry), `launch` (one kernel launch), `launch_plan` (a call recorded and
//! replayed), `describe` (FUSE_DEBUG>=3's account of the matmuls).

mod attention;
mod describe;
mod fuse_args;
mod gemm_path;
mod gemm_paths;
pub(crate) mod kernels;
pub(crate) mod launch;
mod launch_plan;
mod model;
mod rope_append;
mod tuning;

pub(crate) use fuse_args::BLOCK_THREADS;

use crate::call::{infer, input_values, operand_name, values, GroupRun, Inferred, Value};
use crate::cuda::device::CudaDevice;
use crate::cuda::driver::{driver_error, lock};
use crate::cuda::gemm::cublas::{plan_gemm, GemmCall, Matrix};
use crate::cuda::gemm::lt::lt_matmul;
use crate::cuda::storage::CudaStorage;
use crate::host_profile::{self, Phase};
use crate::views::resolve_view;
use crate::{Arg, Error, Result, Tensor};
use describe::{describe_matmuls, DescribedGemm};
use fuse_args::ArgsLayout;
use fuse_args::{plan_launch, Operand};
use fuse_ir::codegen::{self, InputKind, Role, CONTIGUOUS_DEFINE};
use fuse_ir::infer::broadcast;
use fuse_ir::view::ViewOp;
use fuse_ir::{DType, Graph, GroupKind, NodeId, Op, Plan};
use gemm_path::GemmPath;
use kernels::{KernelCache, PlanKernels, PreparedKernel};
use launch::{checked_address, KernelDims};
use launch_plan::{host_written, run_step, signature, table_entry, LaunchPlan, Patch, Recording, Step};
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
    /// Copies (cat parts, slice_set rows) queued to be launched together, and the nodes they write
    /// (`model.rs`: `queue_copy`, `flush_copies`).
    pending_copies: Vec<model::PendingCopy>,
    pending_writers: Vec<NodeId>,
    /// Groups a launch made for an earlier group already ran (`rope_append.rs`).
    done_groups: Vec<usize>,
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
        if let Op::Input(k) = g.op(g.node(id).args[0]) {
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
    let values = input_values(g, args_owned);
    let recording = record.then(Recording::default);
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
        pending_copies: Vec::new(),
        pending_writers: Vec::new(),
        done_groups: Vec::new(),
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
            let matmul_path = ex.matmul_path(group.kind);
            runs.push(GroupRun { index, kind: group.kind, time, unfused_because, matmul_path });
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

    fn run_group(&mut self, index: usize, specs: &[PreparedKernel]) -> Result<Option<String>> {
        let plan = self.plan;
        let group = &plan.groups[index];
        if self.done_groups.contains(&index) {
            return Ok(None);
        }
        // Model ops and cat are groups of one node each, run by their hand-written kernels (`model.rs`).
        let is_cat = |n: &NodeId| matches!(self.graph.op(*n), Op::View(ViewOp::Cat { .. }));
        let is_write = |n: &NodeId| self.graph.op(*n).writes_in_place();
        if group.kind == GroupKind::Model || group.nodes.iter().any(|n| is_cat(n) || is_write(n)) {
            let &[node] = group.nodes.as_slice() else {
                return Err(self.internal(format!("group {index}: a model op, cat or slice_set beside other nodes")));
            };
            // A decode step's rope, cache appends and attention: one launch when the shapes allow it.
            if matches!(self.graph.op(node), Op::Model(fuse_ir::ModelOp::Rope)) && crate::env::rope_append_on() {
                if let Some(fused) = self.rope_append_match(index, node) {
                    self.flush_copies()?;
                    if self.run_rope_append(index, &fused)? {
                        return Ok(None);
                    }
                }
            }
            // Consecutive copies that do not read one another's results launch together.
            if !(is_cat(&node) || is_write(&node)) || self.reads_queued_copy(node) {
                self.flush_copies()?;
            }
            if is_cat(&node) {
                self.run_cat(node)?;
            } else if is_write(&node) {
                self.run_slice_set(node)?;
            } else {
                self.run_model(node)?;
            }
            return Ok(None);
        }
        self.flush_copies()?;
        self.place_views(group)?;
        if let Some(reason) = self.does_not_fit(group) {
            self.run_node_by_node(group)?;
            return Ok(Some(reason));
        }
        let is_gemm = matches!(group.kind, GroupKind::Gemm | GroupKind::DualGemm);
        // Where the Skinny kernel can run the prologue itself, the prologue kernel is deferred: it runs here,
        // unrecorded, only when the path is to be timed (timing reads the left operand), and `run_gemm` runs
        // it again, recorded, on the paths that do not stream it. A path known without timing (the results
        // table, a forced path, the fixed rule while capturing) launches no prologue kernel of its own.
        let first_skinny = GemmPath::Skinny(&crate::cuda::gemm::skinny::CONFIGS[0]);
        self.prologue_deferred =
            is_gemm && matches!(self.template_operands(index, specs, &first_skinny), Ok((_, Some(_))));
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

    /// Why this call's shapes do not fit a pointwise or row group's one pass (`None` when they do): the
    /// planner groups without shapes (`x.sum(-1) + z` is one row group), and a value whose rows are another
    /// width than the others' makes no one domain. The CPU backend decides the same (`cpu/rowprog.rs`).
    fn does_not_fit(&self, group: &fuse_ir::Group) -> Option<String> {
        if !matches!(group.kind, GroupKind::Pointwise | GroupKind::RowReduce) {
            return None;
        }
        let mut domain: Vec<usize> = Vec::new();
        for &id in group.inputs.iter().chain(&group.nodes) {
            let shape = self.shape(id);
            match broadcast(&domain, shape) {
                Some(d) => domain = d,
                None => return Some(format!("shapes {domain:?} and {shape:?} make no one domain")),
            }
        }
        // A row kernel reduces along the domain's rows: an operand whose rows are narrower (broadcast along
        // them, `[3, 1]` in a `[3, 7]` domain) would be summed once per column.
        let width = domain.last().copied().unwrap_or(1);
        for &n in group.nodes.iter().filter(|&&n| matches!(self.graph.op(n), Op::Reduce(_))) {
            let operand = self.graph.node(n).args[0];
            let rows = self.shape(operand).last().copied().unwrap_or(1);
            if rows != width {
                return Some(format!("%{} reduces rows of {rows}, the group's rows hold {width}", n.0));
            }
        }
        None
    }

    /// Runs `group` one node at a time, each node's kernel generated now (as the unfused plan's would be).
    fn run_node_by_node(&mut self, group: &fuse_ir::Group) -> Result<()> {
        for &n in &group.nodes {
            let single = Plan { groups: vec![fuse_ir::Group::single(self.graph, n)] };
            for spec in codegen::group_kernels(self.graph, &single, 0) {
                let kernel = PreparedKernel::new(spec);
                self.run_kernel(&kernel)?;
            }
        }
        Ok(())
    }

    /// Launches one generated kernel: resolves its inputs, allocates its outputs, maps them onto the
    /// domain, compiles (once) and launches.
    fn run_kernel(&mut self, kernel: &PreparedKernel) -> Result<()> {
        let spec = &kernel.spec;
        let inputs = spec.inputs.iter().map(|&id| self.resolve(id)).collect::<Result<Vec<_>>>()?;
        let outputs = spec.outputs.iter().map(|&id| self.allocate(id)).collect::<Result<Vec<_>>>()?;
        let mut domain: Vec<usize> = Vec::new();
        let mut shapes = spec.inputs.iter().chain(&spec.nodes).chain(&spec.outputs).map(|&id| self.shape(id));
        for shape in &mut shapes {
            domain = broadcast(&domain, shape).ok_or_else(|| {
                self.internal(format!("{}: shapes {domain:?} and {shape:?} do not broadcast", spec.name))
            })?;
        }
        let (kinds, in_operands): (Vec<InputKind>, Vec<Operand>) =
            inputs.iter().map(|v| self.input_slot(v)).collect::<Result<Vec<_>>>()?.into_iter().unzip();
        let out_operands = outputs.iter().map(|t| self.tensor_operand(t)).collect::<Result<Vec<_>>>()?;
        let launch = plan_launch(spec.kind, &domain, &in_operands, &out_operands)
            .map_err(|reason| Error::unsupported(self.function, "kernel", format!("{}: {reason}", spec.name)))?;
        let out_dtypes: Vec<DType> = outputs.iter().map(Tensor::dtype).collect();
        let mut defines = codegen::defines(spec, &kinds, &out_dtypes);
        if launch.contiguous {
            defines.push(CONTIGUOUS_DEFINE.to_string());
        }
        let grid = launch.grid(spec.kind, self.device.sm_count());
        if grid > 0 {
            let function = self.device.kernel(
                self.function,
                &spec.name,
                &spec.source,
                kernel.source_hash,
                &defines,
                self.device.arch(),
            )?;
            let (words, patches) = (launch.pack(), self.patches(spec, &inputs));
            let name = spec.name.clone();
            self.queue(Step::Kernel {
                name,
                function,
                dims: KernelDims::plain(grid),
                words,
                patches,
                maps: Vec::new(),
            })?;
        } else {
            self.unreplayable();
        }
        for (&id, t) in spec.outputs.iter().zip(outputs) {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
        Ok(())
    }

    /// Where a call's addresses and scalar arguments go in the kernel's words (`fuse_args::ArgsLayout`).
    fn patches(&self, spec: &codegen::KernelSpec, inputs: &[Value]) -> Vec<Patch> {
        let layout = ArgsLayout::new(inputs.len());
        let mut patches = Vec::with_capacity(inputs.len() + spec.outputs.len());
        for (i, (&id, value)) in spec.inputs.iter().zip(inputs).enumerate() {
            match (value, self.graph.op(id)) {
                (Value::Tensor(_), _) => {
                    patches.push(Patch { word: layout.input_address(i), node: base_of(self.graph, id).index() })
                }
                (Value::Scalar(_), Op::Input(_)) => {
                    patches.push(Patch { word: layout.input_scalar(i), node: id.index() })
                }
                // A literal stays as packed.
                (Value::Scalar(_), _) => {}
            }
        }
        for (j, &id) in spec.outputs.iter().enumerate() {
            patches.push(Patch { word: layout.output_address(j), node: id.index() });
        }
        patches
    }

    /// What an input slot holds: its kind (for the defines) and its operand (for the launch).
    fn input_slot(&self, value: &Value) -> Result<(InputKind, Operand)> {
        Ok(match value {
            Value::Tensor(t) if t.dtype() == DType::U32 => {
                return Err(Error::unsupported(
                    self.function,
                    "kernel",
                    "u32 tensors (token ids) are not yet read by GPU kernels",
                ))
            }
            Value::Tensor(t) => (InputKind::Tensor(t.dtype()), self.tensor_operand(t)?),
            Value::Scalar(v) => (InputKind::Scalar, Operand::Scalar(*v)),
        })
    }

    fn tensor_operand(&self, t: &Tensor) -> Result<Operand> {
        Ok(Operand::Tensor { address: self.address(t)?, shape: t.shape().to_vec(), strides: t.strides().to_vec() })
    }

    /// One matmul on cuBLAS into a fresh dense product of the node's dtype.
    fn run_matmul(&mut self, mm: NodeId) -> Result<()> {
        let graph = self.graph;
        let args = &graph.node(mm).args;
        let (a, b) = match (self.resolve(args[0])?, self.resolve(args[1])?) {
            (Value::Tensor(a), Value::Tensor(b)) => (a, b),
            _ => return Err(self.internal("a scalar as a matmul operand")),
        };
        if a.dtype() != b.dtype() || a.dtype() != self.dtype(mm) {
            return Err(self.internal(format!("matmul of {} by {} into {}", a.dtype(), b.dtype(), self.dtype(mm))));
        }
        let shape = self.shape(mm).to_vec();
        let product = CudaStorage::alloc(self.device, self.dtype(mm), shape.iter().product())?;
        let dtype = self.dtype(mm);
        self.addresses[mm.index()] = product.base_address();
        self.record_computed(mm, dtype, &shape);
        let (ma, mb) = (self.matrix(&a)?, self.matrix(&b)?);
        let mut described: std::result::Result<GemmCall, &'static str> = Err("an empty product: no cuBLAS call");
        if ma.cols == 0 {
            // An empty inner dimension: the product is all zeros.
            product.zero()?;
            described = Err("an empty inner dimension: the product is zero-filled, no cuBLAS call");
            self.unreplayable();
        } else {
            let plan = plan_gemm(&ma, &mb).map_err(|reason| {
                Error::unsupported(self.function, "matmul", format!("{reason} (make the operand contiguous first)"))
            })?;
            match plan.call(a.dtype())? {
                Some(call) => {
                    // A cuBLASLt algorithm this shape does not offer (a results file from elsewhere, say)
                    // falls back to cuBLAS: the product is the same, only the speed differs.
                    let lt = match self.path {
                        GemmPath::Lt(algo) => lt_matmul(self.device, &call)
                            .ok()
                            .filter(|form| algo < form.algorithms())
                            .map(|form| (form, algo)),
                        _ => None,
                    };
                    // cuBLAS's A is the weight, its B the left operand (see `plan_gemm`).
                    let (first, second) = (base_of(graph, args[1]).index(), base_of(graph, args[0]).index());
                    // Split on purpose: a launch plan must not pair these two calls either.
                    let (group, dual) = (self.group_of(mm), self.is_dual(mm) && self.path != GemmPath::CublasSplit);
                    self.queue(Step::Gemm { call, lt, first, second, product: mm.index(), group, dual })?;
                    described = Ok(call);
                }
                None => self.unreplayable(),
            }
        }
        if self.describe {
            self.gemms.push(DescribedGemm {
                call: described,
                weight: operand_name(self.graph, args[1]),
                left: operand_name(self.graph, args[0]),
                weight_address: mb.address,
                left_node: base_of(self.graph, args[0]),
                escapes: self.graph.outputs.contains(&mm),
            });
        }
        let product = Tensor::from_cuda(product, shape);
        self.values[mm.index()] = Some(Value::Tensor(product));
        Ok(())
    }

    /// FUSE_DEBUG>=3: how the matmuls of the group just run went to cuBLAS (`None` for a group without
    /// any); see `describe_matmuls`.
    fn matmul_path(&mut self, kind: GroupKind) -> Option<String> {
        let library = describe_matmuls(kind, &std::mem::take(&mut self.gemms), self.path == GemmPath::Cublas);
        match (self.path_note.take(), library) {
            (Some(note), Some(library)) => Some(format!("{note}; {library}")),
            (note, library) => note.or(library),
        }
    }

    /// The plan group that computes matmul `mm`.
    fn group_of(&self, mm: NodeId) -> usize {
        self.plan.groups.iter().position(|g| g.matmuls.contains(&mm)).unwrap_or(usize::MAX)
    }

    /// Whether matmul `mm` belongs to a DualGemm group (whose two products may be one cuBLAS call).
    fn is_dual(&self, mm: NodeId) -> bool {
        self.plan.groups.iter().any(|g| g.kind == GroupKind::DualGemm && g.matmuls.contains(&mm))
    }

    /// A tensor of two or more axes as a (batched) matrix: its batch axes (all but the last two) must merge
    /// into one strided axis (a dense [b, h, s, d] does; a transposed view of one whose batch axes are not
    /// adjacent in memory does not: `.contiguous()` it first).
    fn matrix(&self, t: &Tensor) -> Result<Matrix> {
        let (s, st) = (t.shape(), t.strides());
        let address = self.address(t)?;
        let r = s.len();
        if r < 2 {
            return Err(Error::unsupported(
                self.function,
                "matmul",
                format!("an operand of shape {s:?} (at least 2-D)"),
            ));
        }
        let (batch, batch_stride) = merged_batch(&s[..r - 2], &st[..r - 2]).ok_or_else(|| {
            Error::unsupported(
                self.function,
                "matmul",
                format!("an operand of shape {s:?} and strides {st:?}: its batch axes do not merge into one (make it contiguous first)"),
            )
        })?;
        Ok(Matrix {
            address,
            batch,
            rows: s[r - 2],
            cols: s[r - 1],
            batch_stride,
            row_stride: st[r - 2],
            col_stride: st[r - 1],
        })
    }

    /// A returned value as a tensor; scalars and literals become 0-d f32 tensors on this GPU.
    fn output(&self, id: NodeId) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(v) => Tensor::from_vec(vec![v as f32], &[], &crate::Device::Cuda(self.device.clone())),
        }
    }
}

/// Batch axes as one: their element count and the stride between consecutive batches, when every axis
/// (axes of size 1 aside) steps exactly over the one after it; `None` when they do not merge.
fn merged_batch(shape: &[usize], strides: &[usize]) -> Option<(usize, usize)> {
    let axes: Vec<(usize, usize)> =
        shape.iter().zip(strides).map(|(&d, &st)| (d, st)).filter(|&(d, _)| d != 1).collect();
    let Some(&(_, innermost)) = axes.last() else { return Some((1, 0)) };
    if axes.windows(2).any(|w| w[0].1 != w[1].0 * w[1].1) {
        return None;
    }
    Some((axes.iter().map(|&(d, _)| d).product(), innermost))
}

#[cfg(test)]
mod merged_batch_tests {
    use super::merged_batch;

    #[test]
    fn batch_axes_merge_only_when_adjacent_in_memory() {
        assert_eq!(merged_batch(&[], &[]), Some((1, 0)));
        assert_eq!(merged_batch(&[2, 3], &[3 * 35, 35]), Some((6, 35)));
        assert_eq!(merged_batch(&[1, 3], &[99, 7]), Some((3, 7)));
        assert_eq!(merged_batch(&[2, 1, 1], &[3, 3, 3]), Some((2, 3)));
        // [b, h] of a transposed [b, s, h, d] view: h steps d, b steps s*h*d, not h*d.
        assert_eq!(merged_batch(&[2, 3], &[5 * 3 * 4, 4]), None);
        // A broadcast batch axis (stride 0) beside a real one.
        assert_eq!(merged_batch(&[2, 3], &[0, 12]), None);
    }
}
