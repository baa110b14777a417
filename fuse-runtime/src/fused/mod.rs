//! `FusedFn`: what `#[fuse]` expands to. It holds the traced graph as text (a `&'static str` in the user's
//! binary) and the CUDA source of each kernel of its fused plan, parses and plans the graph once, and runs
//! the plan on each call. FUSE_DEBUG (see `env.rs`) reports what it does.

mod args;
mod static_kernels;

pub use args::{arg, field_is_tensor, prepare, Arg, FromOutput, FromOutputs, Fusion, IntoArg, PrepareArg, Prepared};
pub use static_kernels::StaticKernel;

use crate::call::{infer, values, GroupRun, InferMemo};
use crate::cuda::{KernelCache, PlanKernels};
use crate::env;
use crate::exec::execute_cached;
use crate::host_profile::{self, Phase};
use crate::{Device, Error, Result, Tensor};
use fuse_ir::plan::{describe_for, Backend};
use fuse_ir::{Graph, GroupKind, InputKind, Plan};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

pub struct FusedFn {
    name: Cow<'static, str>,
    graph_text: &'static str,
    /// The fused plan as the macro emitted it (its text form); `None` for a `FusedFn` made without one, whose
    /// plan is made at run time.
    plan_text: Option<&'static str>,
    /// The fused plan's kernels as the macro emitted them; `None` for a `FusedFn` made without them.
    emitted_kernels: Option<&'static [StaticKernel]>,
    graph: OnceLock<std::result::Result<Graph, String>>,
    fused: OnceLock<std::result::Result<Plan, String>>,
    unfused: OnceLock<std::result::Result<Plan, String>>,
    /// The GPU kernels of each plan, generated on the first GPU call.
    fused_kernels: KernelCache,
    unfused_kernels: KernelCache,
    /// The shapes the CPU inferred for recent calls (both plans share the graph).
    inferred: InferMemo,
    /// Set by the first call, which prints the FUSE_DEBUG summary.
    called: AtomicBool,
    /// For a method: whether each field input (in graph order) is a tensor, as the field's Rust type says
    /// (declared by the generated companion, see [`FusedFn::declare_fields`]).
    field_kinds: OnceLock<Vec<bool>>,
    /// `Type::method` for a method whose macro saw only the method (see [`FusedFn::declare_owner`]).
    qualified: OnceLock<String>,
}

impl FusedFn {
    /// A fused function from its graph text, planned at run time; usable in a `static`.
    pub const fn new(name: &'static str, graph_text: &'static str) -> FusedFn {
        Self::make(name, graph_text, None, None)
    }

    /// A fused function as `#[fuse]` emits it: its graph text, its fused plan's text and that plan's kernels,
    /// `FusedFn::emitted(name, graph, plan, &[FusedFn::kernel("f_k0_pointwise_exp", "...", "..."), ..])`. The
    /// plan and kernels are what runs: nothing is planned or generated at run time for the fused form.
    pub const fn emitted(
        name: &'static str,
        graph_text: &'static str,
        plan_text: &'static str,
        kernels: &'static [StaticKernel],
    ) -> FusedFn {
        Self::make(name, graph_text, Some(plan_text), Some(kernels))
    }

    /// One emitted kernel. A constructor on `FusedFn` so generated code needs no other path into the runtime.
    pub const fn kernel(name: &'static str, meta: &'static str, source: &'static str) -> StaticKernel {
        StaticKernel { name, meta, source }
    }

    const fn make(
        name: &'static str,
        graph_text: &'static str,
        plan_text: Option<&'static str>,
        emitted_kernels: Option<&'static [StaticKernel]>,
    ) -> FusedFn {
        FusedFn {
            name: Cow::Borrowed(name),
            graph_text,
            plan_text,
            emitted_kernels,
            graph: OnceLock::new(),
            fused: OnceLock::new(),
            unfused: OnceLock::new(),
            fused_kernels: OnceLock::new(),
            unfused_kernels: OnceLock::new(),
            inferred: InferMemo::new(),
            called: AtomicBool::new(false),
            field_kinds: OnceLock::new(),
            qualified: OnceLock::new(),
        }
    }

    /// A fused function from a graph built in code (tests, tools).
    pub fn from_graph(graph: Graph) -> FusedFn {
        let checked = graph.verify().map(|()| graph.clone());
        FusedFn {
            name: Cow::Owned(graph.name.clone()),
            graph_text: "",
            plan_text: None,
            emitted_kernels: None,
            graph: OnceLock::from(checked),
            fused: OnceLock::new(),
            unfused: OnceLock::new(),
            fused_kernels: OnceLock::new(),
            unfused_kernels: OnceLock::new(),
            inferred: InferMemo::new(),
            called: AtomicBool::new(false),
            field_kinds: OnceLock::new(),
            qualified: OnceLock::new(),
        }
    }

    /// Declares, once, whether each field of a `#[fuse]` method is a tensor (`true`) or a scalar, from the
    /// fields' Rust types (the generated `<method>_fused()` calls it with [`field_is_tensor`]), so that a call
    /// listing the fields by hand in another order is an error rather than a wrong answer.
    #[doc(hidden)]
    pub fn declare_fields(&self, kinds: impl FnOnce() -> Vec<bool>) -> &Self {
        self.field_kinds.get_or_init(kinds);
        self
    }

    /// Declares, once, the type a method belongs to (`std::any::type_name::<Self>()`, from the generated
    /// companion), so that errors and reports name `Block::forward` even when `#[fuse]` saw only the method.
    #[doc(hidden)]
    pub fn declare_owner(&self, type_name: &str) -> &Self {
        // Called on every call of the method: after the first, one load of the cell.
        if self.qualified.get().is_none() && !self.name.contains("::") {
            self.qualified.get_or_init(|| {
                // `model::Block<f32>` -> `Block`
                let base = type_name.split('<').next().unwrap_or(type_name);
                format!("{}::{}", base.rsplit("::").next().unwrap_or(base), self.name)
            });
        }
        self
    }

    /// The function's name in errors and reports: `mlp`, or `Block::forward` for a method.
    pub fn name(&self) -> &str {
        self.qualified.get().map_or(&self.name, |q| q.as_str())
    }

    /// The CUDA kernels of the fused plan, name, description and source, as `#[fuse]` emitted them into the
    /// binary, in plan order (empty for a function made without them, or whose groups are all library calls).
    pub fn kernels(&self) -> &'static [StaticKernel] {
        self.emitted_kernels.unwrap_or(&[])
    }

    /// The kernels of `plan` (this function's plan for `fusion`) grouped by plan group, in launch order, as the
    /// GPU launches them: the emitted ones, sources borrowed from the binary, for the fused plan of a
    /// `#[fuse]` function; generated now for any other plan.
    pub fn plan_kernel_specs(&self, fusion: Fusion) -> Result<Vec<Vec<fuse_ir::codegen::KernelSpec>>> {
        let (g, plan) = (self.graph()?, self.plan(fusion)?);
        let mut groups = vec![Vec::new(); plan.groups.len()];
        match self.emitted_kernels.filter(|_| fusion == Fusion::On && self.plan_text.is_some()) {
            Some(emitted) => {
                for kernel in emitted {
                    let spec =
                        kernel.spec().map_err(|e| Error::internal(self.name(), format!("an emitted kernel: {e}")))?;
                    let slot = groups.get_mut(spec.group);
                    slot.ok_or_else(|| {
                        Error::internal(self.name(), format!("kernel `{}` of a group past the plan", spec.name))
                    })?
                    .push(spec);
                }
            }
            None => {
                for (i, group) in groups.iter_mut().enumerate() {
                    *group = fuse_ir::codegen::group_kernels(g, plan, i);
                }
            }
        }
        Ok(groups)
    }

    /// The traced graph, parsed on first use.
    pub fn graph(&self) -> Result<&Graph> {
        self.graph
            .get_or_init(|| Graph::parse(self.graph_text))
            .as_ref()
            .map_err(|e| Error::internal(self.name(), format!("the embedded graph is invalid: {e}")))
    }

    /// The fused or unfused plan, verified, on first use: the fused plan the macro emitted when there is one
    /// (read back, not planned again), else the planner's.
    pub fn plan(&self, fusion: Fusion) -> Result<&Plan> {
        let g = self.graph()?;
        let cell = match fusion {
            Fusion::On => &self.fused,
            Fusion::Off => &self.unfused,
        };
        cell.get_or_init(|| match (fusion, self.plan_text) {
            (Fusion::On, Some(text)) => Plan::parse(text, g),
            (Fusion::On, None) => Plan::fused(g).verify(g).map(|()| Plan::fused(g)),
            (Fusion::Off, _) => {
                let plan = Plan::unfused(g);
                plan.verify(g).map(|()| plan)
            }
        })
        .as_ref()
        .map_err(|e| Error::internal(self.name(), format!("the plan does not verify: {e}")))
    }

    /// Runs the function, fused unless `FUSE_FUSION=off`. `args` follow the graph's inputs: the parameters
    /// in order, then (for a method) the fields the body reads, in order of first use, as
    /// `f.graph()?.inputs` lists them (`x, self.norm, self.eps, ..`). A method's own call passes them right;
    /// by hand, a field of the wrong kind (a scalar where its type is a tensor) is an error.
    pub fn call(&self, args: &[Arg<'_>]) -> Result<Vec<Tensor>> {
        self.call_with(args, default_fusion())
    }

    /// Runs the function with `fusion` chosen for this call: [`Fusion::On`] runs the plan `#[fuse]` emitted
    /// (one kernel or pass per group), [`Fusion::Off`] one op at a time (the baseline, and a way to bisect a
    /// wrong answer). Returns the graph's outputs in order; errors name the function and the expression
    /// (shapes that do not combine, dtypes, devices, argument kinds and count).
    ///
    /// The crate docs of `fuse` show it on a `#[fuse]` function (section "Fused and unfused").
    pub fn call_with(&self, args: &[Arg<'_>], fusion: Fusion) -> Result<Vec<Tensor>> {
        host_profile::begin();
        let outputs = self.run(args, fusion);
        host_profile::end();
        outputs
    }

    fn run(&self, args: &[Arg<'_>], fusion: Fusion) -> Result<Vec<Tensor>> {
        let g = self.graph()?;
        let plan = self.plan(fusion)?;
        self.check_args(g, args)?;
        let level = env::debug_level();
        // A load first: the swap, a locked write, is needed only once.
        let first = !self.called.load(Ordering::Relaxed) && !self.called.swap(true, Ordering::Relaxed);
        if first && level >= 5 {
            eprintln!("fuse: graph of `{}`:\n{}", self.name(), g.to_text());
        }
        let device = device_of(args);
        let on_gpu = device.is_some_and(Device::is_cuda);
        if first && level >= 1 {
            if let Ok(inferred) = infer(self.name(), g, &values(args)) {
                let shapes = Some((&inferred.shapes[..], &inferred.dtypes[..]));
                eprint!("fuse: plan of `{}`:\n{}", self.name(), describe_for(g, plan, shapes, backend(on_gpu)));
            }
        }
        if first && level >= 4 {
            if on_gpu {
                let emitted = self.emitted_kernels.filter(|_| fusion == Fusion::On);
                static_kernels::print_sources(self.name(), g, plan, emitted);
            } else {
                eprintln!(
                    "fuse: `{}` runs on the CPU: no CUDA kernels to show (FUSE_DEBUG=4 prints them for a GPU call)",
                    self.name()
                );
            }
        }
        let kernels = match fusion {
            Fusion::On => &self.fused_kernels,
            Fusion::Off => &self.unfused_kernels,
        };
        if on_gpu && kernels.get().is_none() {
            // The GPU launches the kernels the macro emitted (for the fused plan), generated ones otherwise.
            let _ = kernels.set(PlanKernels::from_specs(self.plan_kernel_specs(fusion)?));
        }
        host_profile::lap(Phase::Args);
        let (outputs, runs) = execute_cached(
            self.name(),
            g,
            plan,
            args,
            level >= 2,
            fusion == Fusion::Off,
            Some(kernels),
            Some(&self.inferred),
        )?;
        if (first && level >= 1) || level >= 2 {
            self.report_runs(&runs, level);
        }
        if level >= 3 {
            static_kernels::print_matmul_paths(self.name(), &runs, device);
        }
        Ok(outputs)
    }

    /// Runs a plan made elsewhere (tests, tools comparing plans), after verifying it against the graph.
    pub fn call_with_plan(&self, plan: &Plan, args: &[Arg<'_>]) -> Result<Vec<Tensor>> {
        let g = self.graph()?;
        plan.verify(g).map_err(|e| Error::internal(self.name(), format!("the plan does not verify: {e}")))?;
        self.check_args(g, args)?;
        let level = env::debug_level();
        let (outputs, runs) = execute_cached(self.name(), g, plan, args, level >= 2, false, None, None)?;
        if level >= 1 {
            self.report_runs(&runs, level);
        }
        Ok(outputs)
    }

    /// The plan report for these arguments' shapes and dtypes, in the words of the device they are on.
    pub fn explain(&self, args: &[Arg<'_>]) -> Result<String> {
        let g = self.graph()?;
        let plan = self.plan(default_fusion())?;
        self.check_args(g, args)?;
        let inferred = infer(self.name(), g, &values(args))?;
        let on_gpu = device_of(args).is_some_and(Device::is_cuda);
        Ok(describe_for(g, plan, Some((&inferred.shapes, &inferred.dtypes)), backend(on_gpu)))
    }

    /// Checks the arguments' number and kinds against the graph (allocating nothing unless they are wrong).
    fn check_args(&self, g: &Graph, args: &[Arg<'_>]) -> Result<()> {
        if args.len() != g.inputs.len() {
            return Err(Error::ArgumentCount {
                function: self.name().to_string(),
                expected: g.inputs.len(),
                got: args.len(),
            });
        }
        let mut field_kinds = self.field_kinds.get().map(|k| k.iter().copied());
        for (input, a) in g.inputs.iter().zip(args) {
            // A field is what its Rust type says where the companion declared it; otherwise either.
            let declared = match input.kind {
                InputKind::Field | InputKind::ScalarField => field_kinds.as_mut().and_then(Iterator::next),
                _ => None,
            };
            let expected = match (input.kind, declared) {
                (InputKind::Field, Some(true)) => InputKind::Tensor,
                (InputKind::Field, Some(false)) | (InputKind::ScalarField, _) => InputKind::Scalar,
                (kind, _) => kind,
            };
            match (expected, a) {
                (InputKind::Tensor | InputKind::Field, Arg::Tensor(_))
                | (InputKind::Scalar | InputKind::Field, Arg::Scalar(_)) => {}
                (kind, a) => {
                    return Err(Error::ArgumentKind {
                        function: self.name().to_string(),
                        parameter: input.name.clone(),
                        expected: kind.name(),
                        got: match a {
                            Arg::Tensor(_) => "tensor",
                            Arg::Scalar(_) => "scalar",
                        },
                    })
                }
            }
        }
        Ok(())
    }

    fn report_runs(&self, runs: &[GroupRun], level: u32) {
        for run in runs {
            if let Some(reason) = &run.unfused_because {
                eprintln!(
                    "fuse: `{}` k{} {}: ran one op at a time, the shapes of this call do not fit one pass ({reason})",
                    self.name(),
                    run.index,
                    run.kind.name()
                );
            }
            if level >= 2 {
                // The way a rope_append_attention group ran (a GEMM group's matmul path is FUSE_DEBUG=3's).
                let path = match (&run.path, run.kind) {
                    (Some(path), GroupKind::RopeAppendAttention) => format!(" ({path})"),
                    _ => String::new(),
                };
                eprintln!(
                    "fuse: `{}` k{} {}: {:.3} ms{path}",
                    self.name(),
                    run.index,
                    run.kind.name(),
                    run.time.as_secs_f64() * 1e3
                );
            }
        }
    }
}

/// The fusion a call gets when it does not say (`FUSE_FUSION`).
fn default_fusion() -> Fusion {
    if env::fusion_off() {
        Fusion::Off
    } else {
        Fusion::On
    }
}

/// The device of the first tensor argument (the dispatcher checks that every tensor is on it).
fn device_of<'a>(args: &[Arg<'a>]) -> Option<&'a Device> {
    args.iter().find_map(|a| match a {
        Arg::Tensor(t) => Some(t.device()),
        Arg::Scalar(_) => None,
    })
}

fn backend(on_gpu: bool) -> Backend {
    if on_gpu {
        Backend::Gpu
    } else {
        Backend::Cpu
    }
}
