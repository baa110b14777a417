//! The plan executor: infers this call's shapes and dtypes, then runs the plan group by group over a table
//! of values (arguments, literals, group outputs, and `.t()` views of those), and returns the outputs.

use super::kernels::Sink;
use super::matmul::run_gemm_group;
use super::rowprog::{compile, CallInfo, Compiled, RowSpec};
use super::rowrun::BlockInputs;
use super::storage::CpuData;
use super::Value;
use crate::cuda::kernels::KernelCache;
use crate::{Device, Error, Result, Tensor};
use fuse_ir::infer::{infer_dtypes, infer_shapes, NodeError};
use fuse_ir::plan::is_free;
use fuse_ir::{DType, Graph, Group, GroupKind, NodeId, Op, Plan};
use std::time::{Duration, Instant};

/// What running a group did.
pub(crate) enum Outcome {
    /// The group's outputs.
    Done(Vec<(NodeId, Tensor)>),
    /// The shapes of this call do not fit the group's fused form (the planner decides without shapes).
    DoesNotFit(String),
}

/// How one group ran, for FUSE_DEBUG.
pub(crate) struct GroupRun {
    pub index: usize,
    pub kind: GroupKind,
    pub time: Duration,
    /// Why the group ran one op at a time, if it did.
    pub unfused_because: Option<String>,
    /// For a Gemm/DualGemm group of a timed call, how its matmuls ran: the CPU GEMM call, or the cuBLAS
    /// call form (FUSE_DEBUG>=3 prints it). Only made when `timed`: the fast paths format nothing.
    pub matmul_path: Option<String>,
}

/// A matmul operand as the user wrote it, for FUSE_DEBUG: `w_gate`, `self.up.t()`, or `%7` for a value
/// computed in the function.
pub(crate) fn operand_name(g: &Graph, id: NodeId) -> String {
    match g.op(id) {
        Op::Transpose => format!("{}.t()", operand_name(g, g.node(id).args[0])),
        Op::Input(k) => g.inputs.get(k as usize).map_or_else(|| format!("%{}", id.0), |i| i.name.clone()),
        _ => format!("%{}", id.0),
    }
}

/// The shapes and dtypes of every node for a call's arguments.
pub(crate) struct Inferred {
    pub shapes: Vec<Vec<usize>>,
    pub dtypes: Vec<Option<DType>>,
}

/// Maps an inference failure to the user-facing error naming the function, op and source.
pub(crate) fn node_error(function: &str, g: &Graph, e: NodeError) -> Error {
    Error::Shape { function: function.to_string(), op: g.op(e.node).name(), label: g.label_of(e.node).to_string(), error: e.error }
}

pub(crate) fn infer(function: &str, g: &Graph, args: &[Value]) -> Result<Inferred> {
    let shapes: Vec<Vec<usize>> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(t) => t.shape().to_vec(),
            Value::Scalar(_) => Vec::new(),
        })
        .collect();
    let dtypes: Vec<Option<DType>> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(t) => Some(t.dtype()),
            Value::Scalar(_) => None,
        })
        .collect();
    let shapes = infer_shapes(g, &shapes).map_err(|e| node_error(function, g, e))?;
    let dtypes = infer_dtypes(g, &dtypes).map_err(|e| node_error(function, g, e))?;
    Ok(Inferred { shapes, dtypes })
}

/// A zeroed buffer for an output of `shape`.
pub(crate) fn allocate(dtype: DType, shape: &[usize]) -> CpuData {
    CpuData::zeros(dtype, shape.iter().product())
}

pub(crate) fn sink_of(data: &mut CpuData) -> Sink<'_> {
    match data {
        CpuData::F32(v) => Sink::F32(v),
        CpuData::F16(v) => Sink::F16(v),
        CpuData::BF16(v) => Sink::BF16(v),
    }
}

struct Executor<'a> {
    info: CallInfo<'a>,
    values: Vec<Option<Value>>,
    /// Whether to describe each GEMM call (a timed call: FUSE_DEBUG>=2).
    describe: bool,
}

/// Runs `plan` on `args` (one per graph input, kinds already checked). Returns the graph's outputs and,
/// when `timed`, how each group ran. Runs on the GPU when the tensors are there (see `cuda/exec.rs`),
/// generating the GPU kernels for this call only.
pub(crate) fn execute(function: &str, g: &Graph, plan: &Plan, args: Vec<Value>, timed: bool) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    execute_cached(function, g, plan, args, timed, true, None)
}

/// [`execute`], keeping the plan's GPU kernels in `kernels` across calls. `library_only` keeps the GPU's
/// matmuls on cuBLAS (the unfused baseline and eager ops) instead of tuning their path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_cached(
    function: &str,
    g: &Graph,
    plan: &Plan,
    args: Vec<Value>,
    timed: bool,
    library_only: bool,
    kernels: Option<&KernelCache>,
) -> Result<(Vec<Tensor>, Vec<GroupRun>)> {
    if let Some(Device::Cuda(gpu)) = check_devices(function, &args)? {
        return crate::cuda::exec::execute(function, g, plan, args, &gpu, timed, library_only, kernels);
    }
    let inferred = infer(function, g, &args)?;
    let mut values: Vec<Option<Value>> = vec![None; g.nodes.len()];
    let mut args = args.into_iter().map(Some).collect::<Vec<_>>();
    for id in g.ids() {
        if let Op::Input(k) = g.op(id) {
            values[id.index()] = args.get_mut(k as usize).and_then(Option::take);
        }
    }
    let info = CallInfo { function, graph: g, shapes: &inferred.shapes, dtypes: &inferred.dtypes };
    let mut ex = Executor { info, values, describe: timed };
    let mut runs = Vec::new();
    let mut paths = Vec::new();
    for (index, group) in plan.groups.iter().enumerate() {
        let start = Instant::now();
        paths.clear();
        let unfused_because = ex.run_group(group, &mut paths)?;
        if timed || unfused_because.is_some() {
            let matmul_path = (!paths.is_empty()).then(|| paths.join("; "));
            runs.push(GroupRun { index, kind: group.kind, time: start.elapsed(), unfused_because, matmul_path });
        }
    }
    let outputs = g.outputs.iter().map(|&o| ex.output(o)).collect::<Result<Vec<_>>>()?;
    Ok((outputs, runs))
}

/// The one device every tensor argument is on (`None` when there are no tensors).
fn check_devices(function: &str, args: &[Value]) -> Result<Option<Device>> {
    let mut first: Option<&Device> = None;
    for a in args {
        if let Value::Tensor(t) = a {
            match first {
                None => first = Some(t.device()),
                Some(d) if d != t.device() => {
                    return Err(Error::DeviceMismatch { function: function.into(), first: d.clone(), second: t.device().clone() })
                }
                Some(_) => {}
            }
        }
    }
    Ok(first.cloned())
}

impl Executor<'_> {
    /// The value of a node that some group reads (never a node computed inside that group).
    fn resolve(&self, id: NodeId) -> Result<Value> {
        let g = self.info.graph;
        match g.op(id) {
            Op::Const(c) => Ok(Value::Scalar(c)),
            Op::Transpose => match self.resolve(g.node(id).args[0])? {
                Value::Tensor(t) => Ok(Value::Tensor(t.t()?)),
                Value::Scalar(_) => Err(Error::internal(self.info.function, "a transposed scalar")),
            },
            _ => self.values[id.index()]
                .clone()
                .ok_or_else(|| Error::internal(self.info.function, format!("%{} is read before it is computed", id.0))),
        }
    }

    /// Runs one group fused, or its nodes one at a time when this call's shapes do not fit the fused
    /// form; returns the reason in that case. Describes each GEMM call into `paths` when describing.
    fn run_group(&mut self, group: &Group, paths: &mut Vec<String>) -> Result<Option<String>> {
        match self.run_fused(group, paths)? {
            Outcome::Done(outputs) => {
                self.store(outputs);
                Ok(None)
            }
            Outcome::DoesNotFit(reason) => {
                for &n in &group.nodes {
                    let single = single_node_group(self.info.graph, n);
                    match self.run_fused(&single, paths)? {
                        Outcome::Done(outputs) => self.store(outputs),
                        Outcome::DoesNotFit(why) => {
                            return Err(Error::internal(self.info.function, format!("%{} alone does not run: {why}", n.0)))
                        }
                    }
                }
                Ok(Some(reason))
            }
        }
    }

    fn store(&mut self, outputs: Vec<(NodeId, Tensor)>) {
        for (id, t) in outputs {
            self.values[id.index()] = Some(Value::Tensor(t));
        }
    }

    fn run_fused(&self, group: &Group, paths: &mut Vec<String>) -> Result<Outcome> {
        let resolve = |id: NodeId| self.resolve(id);
        match group.kind {
            GroupKind::Gemm | GroupKind::DualGemm => {
                run_gemm_group(&self.info, group, &resolve, self.describe.then_some(paths))
            }
            GroupKind::Pointwise | GroupKind::RowReduce => {
                if !group.matmuls.is_empty() {
                    return Ok(Outcome::DoesNotFit(format!("a {} group with a matmul", group.kind.name())));
                }
                self.run_rows(group)
            }
        }
    }

    fn run_rows(&self, group: &Group) -> Result<Outcome> {
        let spec = RowSpec { nodes: &group.nodes, sinks: &group.outputs, blocks: &[], domain: None, keep_last_axis: false };
        let program = match compile(&self.info, &spec, &|id| self.resolve(id))? {
            Compiled::Fits(p) => p,
            Compiled::DoesNotFit(reason) => return Ok(Outcome::DoesNotFit(reason)),
        };
        let shape = |id: NodeId| self.info.shapes[id.index()].clone();
        let mut buffers: Vec<CpuData> = group
            .outputs
            .iter()
            .map(|&o| allocate(self.info.dtypes[o.index()].unwrap_or(DType::F32), &shape(o)))
            .collect();
        let sinks: Vec<Sink<'_>> = buffers.iter_mut().map(sink_of).collect();
        program.run(0..program.rows, sinks, &BlockInputs { first_row: 0, buffers: &[] }, true);
        Ok(Outcome::Done(group.outputs.iter().zip(buffers).map(|(&o, data)| (o, Tensor::from_cpu(data, shape(o)))).collect()))
    }

    /// A returned value as a tensor; scalars and literals become 0-d f32 tensors.
    fn output(&self, id: NodeId) -> Result<Tensor> {
        match self.resolve(id)? {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(v) => Ok(Tensor::from_cpu(CpuData::F32(vec![v as f32]), Vec::new())),
        }
    }
}

/// The group that computes only `n`, every value it reads coming from memory.
fn single_node_group(g: &Graph, n: NodeId) -> Group {
    let op = g.op(n);
    let mut inputs: Vec<NodeId> = Vec::new();
    for &a in &g.node(n).args {
        if !matches!(g.op(a), Op::Const(_)) && !inputs.contains(&a) {
            inputs.push(a);
        }
    }
    let kind = match op {
        Op::MatMul => GroupKind::Gemm,
        Op::Reduce(_) => GroupKind::RowReduce,
        _ => GroupKind::Pointwise,
    };
    debug_assert!(!is_free(op));
    Group {
        kind,
        nodes: vec![n],
        matmuls: if op == Op::MatMul { vec![n] } else { vec![] },
        prologue: vec![],
        inputs,
        outputs: vec![n],
    }
}
